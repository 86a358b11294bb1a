"""Publication of a run's changes: the operator's act (docs/changes.md, Publication).

`start` answers POST /ops-runs/{id}/publish (the pending row, its audit entry and the
workflow's start in one transaction); `remote_git` fetches, re-checks and pushes
create-only in a scratch repository, its git handed the token from its file by
`ops_runtime.git_credential_helper` (the worker's fetch uses the same one); `forgejo`
opens the pull request; `record` writes the outcome; `activities` are what
PublishChangesWorkflow (temporal/publication_workflow.py) runs; `queries` holds the SQL
of `ops_run_publications`.
"""
