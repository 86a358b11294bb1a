"""The `brief` approach: a deterministic markdown brief from the run, committed once.

The same run always renders the same bytes: title, description and the run's identity,
nothing time- or host-dependent. The worker writes the file inside the worktree only
(every parent directory must be a real directory in it, never a symlink out of it); the
approach's git (`add`, `commit`) runs in the run's sandbox like any command, so it writes
only the run's own objects, index and HEAD. One commit, with the rein's identity.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import anyio

from ops_contracts import OpsRun
from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.gateway.errors import ApproachFailed, ApproachTimedOut
from rein_aharness.profiles.templates import activity_id, fire_date
from rein_aharness.repository import GitError, Workspace, git, git_environment
from rein_aharness.sandbox import Sandbox

__all__ = ["commit_brief", "render_brief"]

# How long each of the brief's git commands may take in the sandbox.
GIT_TIMEOUT_SECONDS = 120.0
_SANDBOX_PATH = "/usr/bin:/bin"

# Control characters other than newline and tab have no place in a markdown file.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clean(text: str) -> str:
    return _CONTROL.sub(" ", text.replace("\r\n", "\n").replace("\r", "\n")).strip()


def render_brief(run: OpsRun) -> str:
    title = _clean(run.title).replace("\n", " ") or "Untitled run"
    description = _clean(run.description) or "_No description._"
    labels = ", ".join(f"`{label}`" for label in run.labels) or "none"
    lines = [
        f"# {title}",
        "",
        description,
        "",
        "---",
        "",
        f"- Date: {fire_date(run).isoformat()}",
        f"- Activity: `{activity_id(run)}`",
        f"- Run: `{run.id}`",
        f"- Target: `{run.target_repo}`",
        f"- Labels: {labels}",
        "",
    ]
    return "\n".join(lines)


def _commit_message(run: OpsRun, profile_ref: str) -> str:
    subject = (_clean(run.title).splitlines() or ["brief"])[0][:72] or "brief"
    trailers = f"Rein-Run: {run.id}\nRein-Attempt: {run.attempt}\nRein-Profile: {profile_ref}"
    return f"{subject}\n\n{trailers}\n"


def _write_inside(worktree: Path, relative: str, content: bytes) -> None:
    target = worktree / relative
    current = worktree
    for part in Path(relative).parts[:-1]:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            raise ApproachFailed(f"cannot write the brief: {relative} crosses a non-directory")
        current.mkdir(exist_ok=True)
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise ApproachFailed(f"cannot write the brief: {relative} is not a regular file")
    target.write_bytes(content)


async def commit_brief(
    workspace: Workspace,
    relative: str,
    run: OpsRun,
    profile_ref: str,
    identity: Mapping[str, str],
    sandbox: Sandbox,
) -> None:
    """Write and commit the brief; ApproachFailed if it is unchanged (nothing to commit)."""
    content = render_brief(run).encode("utf-8")
    await anyio.to_thread.run_sync(_write_inside, workspace.path, relative, content)
    env = git_environment(base={"PATH": _SANDBOX_PATH}, extra={**identity, **sandbox.git_env()})
    await _sandboxed_git(sandbox, env, "add", "--", relative)
    try:
        await git(
            workspace.path, "diff", "--cached", "--quiet", "--", relative, env=workspace.git_env()
        )
    except GitError as exc:
        if exc.returncode != 1:
            raise
    else:
        raise ApproachFailed(f"the brief at {relative} is already up to date: nothing to commit")
    message = _commit_message(run, profile_ref)
    await _sandboxed_git(
        sandbox, env, "commit", "--no-verify", "--quiet", "-m", message, "--", relative
    )


async def _sandboxed_git(sandbox: Sandbox, env: Mapping[str, str], *args: str) -> None:
    outcome = await run_in_sandbox(["git", *args], GIT_TIMEOUT_SECONDS, sandbox, env)
    if outcome.timed_out:
        raise ApproachTimedOut(f"git {args[0]} timed out after {GIT_TIMEOUT_SECONDS:g} s")
    if outcome.returncode != 0:
        raise ApproachFailed(f"git {args[0]} exited with status {outcome.returncode}")
