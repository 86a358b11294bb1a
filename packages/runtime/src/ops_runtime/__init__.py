"""Runtime pieces both services share: `ops_runtime.logs` (the log line schema of
docs/logging.md), `ops_runtime.liveness` (the `/livez` probe that fails when an event
loop stops running) and `ops_runtime.threaded_servers` (a probe server on a thread of its
own). Standard library only; the services still never import each other."""
