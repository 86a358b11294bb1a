"""The local Glas gateway: run the profile's approach in a fresh worktree, inside the grant.

Per request:

1. before anything exists on disk: render and check the brief path (inside the grant),
   resolve the target repository under the repositories root (remote mode, `source`:
   fetch the remote's default branch into the repository's mirror, repository/mirror.py;
   a failed fetch is one of errors.py's `Repository*` errors), snapshot its refs;
2. create a detached worktree at the baseline: the repository's HEAD commit, or in
   remote mode the fetched commit; and
   fingerprint the git metadata the approach must not change;
3. run the approach (`command` or `brief`) in the run's sandbox (sandbox/): if the
   sandbox cannot be created, the attempt fails as `SandboxFailed` (reopened) before the
   approach ran, and the worker's sandbox gate closes; an approach that grows its
   worktree past the profile's `worktree_mb` is killed and fails (`ApproachFailed`);
4. inspect and judge the work (repository/acceptance.py): rejected work is discarded and
   reported as `WorkRejected`; accepted commits' objects are imported into the repository
   (unreachable until landed), the changes bundle is written from them and made durable
   in `<state>/changes/` (repository/changes_bundle.py; past `changes_max_bytes` the work
   is rejected, `changes_too_large`, and nothing lands), and only then the commits land
   on `rein/<run-id>/<attempt>` (repository/landing.py); the result's repository
   transaction carries the bundle's digest (`changes_digest`). This is the order of
   docs/changes.md: a landed attempt always has its bundle, or can write it again;
5. always, even when cancelled: put back any ref the approach changed and remove the
   worktree and its scratch directory.

`withdraw` removes an attempt's landing branch again, when the worker will not close the
run as succeeded: its lease was lost (even after the branch landed), or an operator
cancelled the run before its close arrived.

The returned GatewayResult 1.0 carries the execution evidence, the repository
transaction and the executor fields (`ok`, `path`, `head_after`, `target_repo`,
`committed`); a command's output never appears in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import anyio

from ops_contracts import GatewayResult, path_allowed
from ops_contracts.gateway import GatewayOutcome
from rein_aharness.gateway.approaches.brief import commit_brief
from rein_aharness.gateway.approaches.command import approach_environment, run_command
from rein_aharness.gateway.approaches.logged import logged_approach
from rein_aharness.gateway.errors import (
    ApproachFailed,
    ApproachTimedOut,
    GatewayRefused,
    SandboxFailed,
    WorkRejected,
)
from rein_aharness.gateway.evidence import gateway_evidence, gateway_result, repository_transaction
from rein_aharness.gateway.fetch_failures import fetch_error
from rein_aharness.gateway.report_evidence import approach_report, result_file_env, with_report
from rein_aharness.gateway.request import QueuedRequest
from rein_aharness.gateway.secrets_step import attempt_secrets, with_secrets
from rein_aharness.profiles import render_output_path
from rein_aharness.repository import (
    ChangesTooLarge,
    FetchFailed,
    GitError,
    LandingError,
    RemoteSource,
    RepositoryNotFound,
    Workspace,
    WorktreeSession,
    discard_landing,
    existing_mirror,
    git_environment,
    import_objects,
    inspect_work,
    judge,
    land,
    resolve_repository,
    worktree_session,
    write_changes_bundle,
)
from rein_aharness.repository.changes_bundle import DEFAULT_CHANGES_MAX_BYTES
from rein_aharness.sandbox import Sandbox, SandboxUnavailable, WorktreeTooLarge, sandbox_over
from rein_aharness.sandbox.egress_log import ConnectionRecord
from rein_aharness.sandbox.result_file import Report
from rein_aharness.sandbox.secrets import LoadedSecret, secret_environment

__all__ = ["LocalGlasGateway", "worktree_name"]

log = logging.getLogger(__name__)


def worktree_name(request: QueuedRequest) -> str:
    return f"{request.run.id}.{request.run.attempt}"


def rein_identity(request: QueuedRequest) -> dict[str, str]:
    """The author and committer of the run's commits: the profile's rein."""
    rein = request.profile.rein
    name = f"{rein.id} {rein.version}"
    email = f"{rein.id}@rein.invalid"
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


class LocalGlasGateway:
    def __init__(
        self,
        *,
        repositories_root: Path,
        worktrees_root: Path,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        bwrap: Path | None = None,
        on_sandbox_failure: Callable[[str], None] | None = None,
        source: RemoteSource | None = None,
        changes_dir: Path | None = None,
        changes_max_bytes: int = DEFAULT_CHANGES_MAX_BYTES,
        on_egress: Callable[[ConnectionRecord], None] | None = None,
    ) -> None:
        """`changes_dir`: where changes bundles are written (default: `changes/` beside
        `worktrees_root`, both in the state directory)."""
        self._root = repositories_root
        self._changes_dir = changes_dir or worktrees_root.parent / "changes"
        self._changes_max_bytes = changes_max_bytes
        self._source = source
        self._worktrees = worktrees_root
        self._environ = os.environ if environ is None else environ
        self._clock = clock
        self._bwrap = bwrap
        self._on_sandbox_failure = on_sandbox_failure
        self._on_egress = on_egress

    async def execute(self, request: QueuedRequest) -> GatewayResult:
        started = self._clock()
        brief_path = self._brief_path(request)
        secrets = attempt_secrets(request)
        try:
            session = worktree_session(
                self._root,
                self._worktrees,
                request.run.target_repo,
                worktree_name(request),
                self._source,
                log_fields={"run_id": request.run_id, "attempt": request.run.attempt},
            )
            async with session as opened:
                return await self._work(request, opened, brief_path, started, secrets)
        except RepositoryNotFound as exc:
            raise GatewayRefused(str(exc)) from None
        except FetchFailed as exc:
            raise fetch_error(exc, request.run_id) from None

    async def withdraw(self, target_repo: str, run_id: str, attempt: int) -> None:
        """Remove `rein/<run_id>/<attempt>` if it landed; log, never raise."""
        with anyio.CancelScope(shield=True):
            try:
                repository = await (
                    resolve_repository(self._root, target_repo)
                    if self._source is None
                    else existing_mirror(self._root, target_repo)
                )
                removed = await discard_landing(repository, run_id, attempt)
            except (RepositoryNotFound, GitError) as exc:
                log.warning(
                    "could not withdraw the run's landing: %s", exc, extra={"run_id": run_id}
                )
                return
        if removed is not None:
            log.info(
                "landing withdrawn: the run will not be closed as succeeded",
                extra={"run_id": run_id, "attempt": attempt, "head": removed},
            )

    # -- steps -----------------------------------------------------------------------

    def _brief_path(self, request: QueuedRequest) -> str | None:
        spec = request.profile.brief
        if spec is None:
            return None
        try:
            path = render_output_path(spec.output_path, request.run)
        except ValueError as exc:
            raise GatewayRefused(str(exc)) from None
        if request.grant is None or not path_allowed(request.grant, path):
            raise GatewayRefused(
                f"the brief output path {path!r} is outside the grant's allowed_paths"
            )
        return path

    async def _work(
        self,
        request: QueuedRequest,
        session: WorktreeSession,
        brief_path: str | None,
        started: float,
        secrets: tuple[LoadedSecret, ...] = (),
    ) -> GatewayResult:
        workspace = session.workspace
        sandbox = with_secrets(
            await sandbox_over(workspace, request.sandbox, self._bwrap, self._on_egress), secrets
        )
        failure: ApproachFailed | None = None
        try:
            async with logged_approach(request.run, sandbox):
                await self._run_approach(request, workspace, sandbox, brief_path)
        except ApproachFailed as exc:
            failure = exc
        except WorktreeTooLarge as exc:
            failure = ApproachFailed(exc.reason)
        except SandboxUnavailable as exc:
            if self._on_sandbox_failure is not None:
                self._on_sandbox_failure(exc.reason)
            raise SandboxFailed(f"the sandbox could not be created: {exc.reason}") from None
        # The approach and its sandbox are gone: the report is read whatever the outcome,
        # and never changes how the work is judged.
        report = approach_report(request, sandbox)
        inspection = await inspect_work(workspace, session.refs_before, session.metadata_before)
        elapsed = self._clock() - started

        def rejected(outcome: GatewayOutcome) -> GatewayResult:
            return self._result(
                request,
                workspace,
                "rejected",
                outcome,
                elapsed,
                head=None,
                report=report,
                sandbox=sandbox,
            )

        if failure is not None:
            timed_out = isinstance(failure, ApproachTimedOut)
            failure.result = rejected("timed_out" if timed_out else "failed")
            raise failure
        verdict = judge(inspection, request.grant)
        if not verdict.accepted:
            assert verdict.reason is not None
            raise WorkRejected(verdict.reason, result=rejected("refused"))
        head = inspection.head_after
        assert head is not None  # judge accepts only a commit HEAD
        changes_digest: str | None = None
        if inspection.commits:
            changes_digest = await self._hand_over(request, workspace, head, rejected)
        return self._result(
            request,
            workspace,
            "accepted",
            "succeeded",
            elapsed,
            head=head,
            commits=inspection.commits,
            paths=inspection.paths,
            brief_path=brief_path,
            changes_digest=changes_digest,
            report=report,
            sandbox=sandbox,
        )

    async def _hand_over(
        self,
        request: QueuedRequest,
        workspace: Workspace,
        head: str,
        rejected: Callable[[GatewayOutcome], GatewayResult],
    ) -> str:
        """Import the accepted objects, write the changes bundle durably, then land;
        the bundle's digest. Any failure: WorkRejected, and nothing landed."""
        repository = workspace.repository
        try:
            await import_objects(workspace, head)
            bundle = await write_changes_bundle(
                repository.path,
                self._changes_dir,
                baseline=workspace.baseline,
                head=head,
                run_id=request.run_id,
                attempt=request.run.attempt,
                max_bytes=self._changes_max_bytes,
            )
        except ChangesTooLarge as exc:
            raise WorkRejected(str(exc), result=rejected("refused")) from None
        except (GitError, OSError) as exc:
            raise WorkRejected(
                f"writing the changes bundle failed: {exc}", result=rejected("failed")
            ) from None
        log.info(
            "changes bundle written",
            extra={"run_id": request.run_id, "digest": bundle.digest, "size": bundle.size},
        )
        try:
            await land(repository, head, request.run_id, request.run.attempt)
        except (LandingError, GitError) as exc:
            with contextlib.suppress(OSError):
                bundle.path.unlink()
            raise WorkRejected(f"landing failed: {exc}", result=rejected("failed")) from None
        return bundle.digest

    async def _run_approach(
        self,
        request: QueuedRequest,
        workspace: Workspace,
        sandbox: Sandbox,
        brief_path: str | None,
    ) -> None:
        identity = rein_identity(request)
        if brief_path is not None:
            await commit_brief(
                workspace, brief_path, request.run, request.profile.ref, identity, sandbox
            )
            return
        spec = request.profile.command
        assert spec is not None  # the catalogue requires the approach's parameters
        run_vars = {
            "REIN_RUN_ID": request.run_id,
            "REIN_RUN_ATTEMPT": str(request.run.attempt),
            "REIN_TARGET_REPO": request.run.target_repo,
            "REIN_PROFILE_REF": request.profile.ref,
            **identity,
            **sandbox.git_env(),
            **result_file_env(sandbox),
            **secret_environment(sandbox.mounts.secrets),
        }
        env = git_environment(base=approach_environment(spec, self._environ, {}), extra=run_vars)
        outcome = await run_command(spec, sandbox, env)
        log.debug(
            "command finished",
            extra={
                "run_id": request.run_id,
                "returncode": outcome.returncode,
                "timed_out": outcome.timed_out,
                "output_bytes": outcome.output_bytes,
                "output_tail": outcome.output_tail.decode("utf-8", "replace"),
            },
        )
        if outcome.timed_out:
            raise ApproachTimedOut(f"the command timed out after {spec.timeout_s:g} s")
        if outcome.returncode != 0:
            raise ApproachFailed(f"the command exited with status {outcome.returncode}")

    def _result(
        self,
        request: QueuedRequest,
        workspace: Workspace,
        acceptance: Literal["accepted", "rejected"],
        outcome: GatewayOutcome,
        elapsed: float,
        *,
        head: str | None,
        commits: tuple[str, ...] = (),
        paths: tuple[str, ...] = (),
        brief_path: str | None = None,
        changes_digest: str | None = None,
        report: Report | None = None,
        sandbox: Sandbox | None = None,
    ) -> GatewayResult:
        accepted = acceptance == "accepted"
        if brief_path is None and len(paths) == 1:
            brief_path = paths[0]
        return gateway_result(
            request,
            ok=accepted,
            evidence=with_report(
                gateway_evidence(
                    request,
                    outcome=outcome,
                    duration_s=elapsed,
                    head_after=head,
                    commits=commits,
                    paths=paths,
                    network_egress=sandbox.network_evidence() if sandbox is not None else None,
                ),
                report,
            ),
            transaction=repository_transaction(
                request,
                baseline=workspace.baseline,
                acceptance=acceptance,
                commits=commits,
                paths=paths,
                changes_digest=changes_digest,
            ),
            path=brief_path if accepted else None,
            head_after=head,
            committed=bool(commits) if accepted else False,
        )
