"""Runtime pieces both services share: `ops_runtime.logs` (the log line schema of
docs/logging.md), `ops_runtime.liveness` (the `/livez` probe that fails when an event
loop stops running), `ops_runtime.threaded_servers` (a probe server on a thread of its
own) and `ops_runtime.git_credential_helper` (git's credential helper for a call to a
remote, the token read from its file). Standard library only; the services still never
import each other."""
