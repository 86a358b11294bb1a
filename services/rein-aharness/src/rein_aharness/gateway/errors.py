"""How a gateway says the run must be failed, with the reason and the reopen decision.

| error                | when                                                      | reopen |
| -------------------- | --------------------------------------------------------- | ------ |
| `GatewayRefused`     | refused before anything ran (profile/request/repository)  | no     |
| `SecretUnavailable`  | a profile's secret file is unusable; nothing ran          | no     |
| `WorkRejected`       | the work ran but lies outside the grant; it was discarded | no     |
| `ApproachFailed`     | the approach failed (exit status, nothing to commit)      | no     |
| `ApproachTimedOut`   | the approach ran out of its time budget                   | yes    |
| `GatewayUnavailable` | a remote gateway could not be reached after retries       | yes    |
| `GatewayProtocolError` | a remote gateway answered something that is not 1.0     | no     |
| `SandboxFailed`      | the sandbox could not be created; nothing of the approach ran | yes |
| `RepositoryUnavailable` | fetch failed: unreachable, timed out, 5xx, dropped   | yes    |
| `RepositoryCredentialsRefused` | the remote refused the credentials (401/403) | no     |
| `RemoteRepositoryNotFound` | no such repository on the remote (404), or empty | no     |
| `RepositoryTooLarge` | the fetch brought more than REIN_AHARNESS_FETCH_MAX_MB  | no     |

The four remote-mode errors (fetch_failures.py, from repository/mirror.py's `FetchFailed`)
happen before any worktree exists; their reasons start with `repository_unavailable:`,
`repository_credentials_refused:`, `repository_not_found:` and `repository_too_large:`,
which the run's fail `error` (and so activity-core's run page and explain view) carries,
and the same words are the worker's `ops_worker_execution_failures_total{reason}` label.
Only an unavailable remote reopens (it may answer the next attempt); the others need an
operator (a token, a repository name, the size bound), so retrying would only repeat them.

`SandboxFailed` reopens: the approach never started and the repository was not touched
(its worktree is removed), and the cause is this worker's environment, not the run, so
another worker, or this one once its sandbox probes well again, may run it. The queue's
attempt ceiling still bounds it: a fleet that cannot sandbox at all fails the run after
OPS_RUN_MAX_ATTEMPTS claims, visibly, instead of retrying forever.

`reason` is the operator-facing text sent (sanitized) as the fail `error`; `result`, when
present, is the GatewayResult 1.0 evidence sent with the failure.
"""

from __future__ import annotations

from ops_contracts import GatewayResult

__all__ = [
    "ApproachFailed",
    "ApproachTimedOut",
    "GatewayError",
    "GatewayProtocolError",
    "GatewayRefused",
    "GatewayUnavailable",
    "RemoteRepositoryNotFound",
    "RepositoryCredentialsRefused",
    "RepositoryTooLarge",
    "RepositoryUnavailable",
    "SandboxFailed",
    "SecretUnavailable",
    "WorkRejected",
]


class GatewayError(Exception):
    default_reopen = False

    def __init__(
        self, reason: str, *, result: GatewayResult | None = None, reopen: bool | None = None
    ) -> None:
        self.reason = reason
        self.result = result
        self.reopen = self.default_reopen if reopen is None else reopen
        super().__init__(reason)


class GatewayRefused(GatewayError):
    pass


class SecretUnavailable(GatewayRefused):
    """`secret_unavailable: NAME: <problem>`, never the value (gateway/secrets_step.py)."""


class WorkRejected(GatewayError):
    pass


class ApproachFailed(GatewayError):
    pass


class ApproachTimedOut(ApproachFailed):
    default_reopen = True


class GatewayUnavailable(GatewayError):
    default_reopen = True


class GatewayProtocolError(GatewayError):
    pass


class SandboxFailed(GatewayError):
    default_reopen = True


class RepositoryUnavailable(GatewayError):
    default_reopen = True


class RepositoryCredentialsRefused(GatewayError):
    pass


class RemoteRepositoryNotFound(GatewayError):
    pass


class RepositoryTooLarge(GatewayError):
    pass
