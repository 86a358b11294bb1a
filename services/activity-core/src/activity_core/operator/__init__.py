"""The operator plane: requeue and cancel of runs, the views an operator reads (runs
summary, dead letter, workers, explain), the audit trail of every action, and the
`activity-core runs` command that drives them over the HTTP API."""
