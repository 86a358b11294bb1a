"""rein-aharness: the worker that claims, executes and closes ops runs."""
