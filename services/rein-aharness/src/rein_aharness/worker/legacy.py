"""The legacy approach table: profile-absent, grant-less rows (ACT-ADR-006 coexistence).

A row with neither `harness_profile_ref` nor `repository_grant` is matched by its
`approach_hint` against `legacy_approaches` in the catalogue file. The approach is a
`command` run in a fresh worktree and sandbox like a profiled one, but with no repository
authority:
the run has no grant, so any commit or ref change is rejected and discarded. In remote mode
it fetches first, as the local gateway does (a failed fetch fails it the same way). Its result
is the plain executor result (`ok`, `target_repo`, `head_after`, `committed: false`)
with no execution evidence: the hint never becomes a profile ref. Its close is direct,
not outboxed (closer.py).

Retire an entry once its definition declares a `harness_profile_ref`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ops_contracts import OpsRun
from rein_aharness.gateway.approaches.command import approach_environment, run_command
from rein_aharness.gateway.approaches.logged import logged_approach
from rein_aharness.gateway.errors import (
    ApproachFailed,
    ApproachTimedOut,
    GatewayRefused,
    SandboxFailed,
    WorkRejected,
)
from rein_aharness.gateway.fetch_failures import fetch_error
from rein_aharness.profiles import Legacy
from rein_aharness.repository import (
    FetchFailed,
    RemoteSource,
    RepositoryNotFound,
    git_environment,
    inspect_work,
    judge,
    worktree_session,
)
from rein_aharness.sandbox import SandboxUnavailable, WorktreeTooLarge, sandbox_over

__all__ = ["LegacyRunner"]

_IDENTITY = {
    "GIT_AUTHOR_NAME": "rein-aharness legacy",
    "GIT_AUTHOR_EMAIL": "rein-aharness@rein.invalid",
    "GIT_COMMITTER_NAME": "rein-aharness legacy",
    "GIT_COMMITTER_EMAIL": "rein-aharness@rein.invalid",
}


class LegacyRunner:
    def __init__(
        self,
        *,
        repositories_root: Path | None,
        worktrees_root: Path,
        environ: Mapping[str, str] | None = None,
        bwrap: Path | None = None,
        on_sandbox_failure: Callable[[str], None] | None = None,
        source: RemoteSource | None = None,
    ) -> None:
        self._root = repositories_root
        self._source = source
        self._worktrees = worktrees_root
        self._environ = os.environ if environ is None else environ
        self._bwrap = bwrap
        self._on_sandbox_failure = on_sandbox_failure

    async def execute(self, run: OpsRun, selection: Legacy) -> dict[str, Any]:
        """The executor result; a GatewayError subclass when the run is to be failed."""
        if self._root is None:
            raise GatewayRefused("legacy approaches need REIN_AHARNESS_REPOSITORIES_ROOT")
        spec = selection.approach.command
        try:
            session = worktree_session(
                self._root,
                self._worktrees,
                run.target_repo,
                f"{run.id}.{run.attempt}",
                self._source,
                log_fields={"run_id": str(run.id), "attempt": run.attempt},
            )
            async with session as opened:
                sandbox = await sandbox_over(opened.workspace, selection.sandbox, self._bwrap)
                run_vars = {
                    "REIN_RUN_ID": str(run.id),
                    "REIN_RUN_ATTEMPT": str(run.attempt),
                    "REIN_TARGET_REPO": run.target_repo,
                    "REIN_APPROACH_HINT": selection.approach_hint,
                    **_IDENTITY,
                    **sandbox.git_env(),
                }
                env = git_environment(
                    base=approach_environment(spec, self._environ, {}), extra=run_vars
                )
                try:
                    async with logged_approach(run, sandbox):
                        outcome = await run_command(spec, sandbox, env)
                        if outcome.timed_out:
                            raise ApproachTimedOut(
                                f"the command timed out after {spec.timeout_s:g} s"
                            )
                        if outcome.returncode != 0:
                            raise ApproachFailed(
                                f"the command exited with status {outcome.returncode}"
                            )
                except WorktreeTooLarge as exc:
                    raise ApproachFailed(exc.reason) from None
                except SandboxUnavailable as exc:
                    if self._on_sandbox_failure is not None:
                        self._on_sandbox_failure(exc.reason)
                    raise SandboxFailed(f"the sandbox could not be created: {exc.reason}") from None
                inspection = await inspect_work(
                    opened.workspace, opened.refs_before, opened.metadata_before
                )
                verdict = judge(inspection, None)
                if not verdict.accepted:
                    raise WorkRejected(verdict.reason or "rejected")
                return {
                    "ok": True,
                    "target_repo": run.target_repo,
                    "head_after": inspection.head_after,
                    "committed": False,
                }
        except RepositoryNotFound as exc:
            raise GatewayRefused(str(exc)) from None
        except FetchFailed as exc:
            raise fetch_error(exc, str(run.id)) from None
