"""Run artefacts: an automation's fires joined to the ops runs they produced, and what
those runs delivered (paths at a commit, with Forgejo links), never what they were told
or what a model said."""
