"""Runtime pieces both services share: `ops_runtime.logs` (the log line schema of
docs/logging.md) and `ops_runtime.liveness` (the `/livez` probe that fails when an event
loop stops running). Standard library only; the services still never import each other."""
