"""The attempt's secrets (sandbox/secrets.py): loaded before anything exists on disk.

A secret that cannot be used fails the attempt conclusively (`SecretUnavailable`, a
`GatewayRefused`, not reopened; `secret_unavailable` in the worker's
`ops_worker_execution_failures_total`), before its worktree exists and so before the
approach could start. The file is part of the deployment (every worker of a fleet
mounts the same Secret), so another attempt would only repeat the failure and spend
the run's attempts; an operator fixes the mount and requeues. The reason names the
secret and the problem, never the value. Secrets need a bwrap sandbox: kind `none`
has no private place to show them.
"""

from __future__ import annotations

import dataclasses

from rein_aharness.gateway.errors import SecretUnavailable as SecretRefused
from rein_aharness.gateway.request import QueuedRequest
from rein_aharness.sandbox import Sandbox
from rein_aharness.sandbox.secrets import LoadedSecret, SecretUnavailable, load_secrets

__all__ = ["attempt_secrets", "with_secrets"]


def attempt_secrets(request: QueuedRequest) -> tuple[LoadedSecret, ...]:
    spec = request.profile.command
    if spec is None or request.profile.brief is not None or not spec.secrets:
        return ()
    if not request.sandbox.confined:
        raise SecretRefused(
            "secret_unavailable: secrets need a bwrap sandbox "
            f"({request.sandbox.name} confines nothing)"
        )
    try:
        return load_secrets(spec.secrets)
    except SecretUnavailable as exc:
        raise SecretRefused(str(exc)) from None


def with_secrets(sandbox: Sandbox, secrets: tuple[LoadedSecret, ...]) -> Sandbox:
    if not secrets:
        return sandbox
    return dataclasses.replace(sandbox, mounts=dataclasses.replace(sandbox.mounts, secrets=secrets))
