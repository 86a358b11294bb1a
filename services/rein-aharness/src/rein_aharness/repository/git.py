"""Run git for the worker: no shell, no network, no inherited repository redirection.

Every call gets an environment with the worker's `GIT_*` variables removed (a stray
`GIT_DIR` or `GIT_INDEX_FILE` would point git at another repository), no terminal
prompts, no system or user config (only the repository's, which no approach can
change: see metadata.py), no hooks, no fsmonitor, and `protocol.allow=never`, which
makes every fetch, push and clone fail, local paths and `file://` included: the worker
never publishes. The one exception is the mirror's fetch in remote mode (mirror.py),
which allows the remote's scheme for that git process alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

__all__ = ["GitError", "git", "git_environment", "git_text"]

_STDERR_CHARS = 300

# Applied through GIT_CONFIG_COUNT, so it overrides every config file.
_FORCED_CONFIG: tuple[tuple[str, str], ...] = (
    ("protocol.allow", "never"),
    ("core.hooksPath", "/dev/null"),
    ("gc.auto", "0"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("advice.detachedHead", "false"),
    ("core.fsmonitor", "false"),
)


class GitError(Exception):
    """A git command failed; the message carries the subcommand, exit code and a bounded
    stderr excerpt (git's stderr names refs, paths and, for a fetch, the remote's URL,
    never credentials: the worker configures no remotes and a URL template cannot carry
    any, remote.py)."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: bytes) -> None:
        self.returncode = returncode
        excerpt = stderr.decode("utf-8", "replace").strip().replace("\n", " ")[:_STDERR_CHARS]
        self.stderr = excerpt
        subcommand = next((a for a in args if not a.startswith("-")), "git")
        super().__init__(f"git {subcommand} exited {returncode}: {excerpt}")


def git_environment(
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    *,
    config: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """`base` (default: the worker's environment) without `GIT_*`, plus the forced config
    and then `config` (later entries win: only the mirror's fetch passes any, mirror.py)."""
    source = os.environ if base is None else base
    env = {key: value for key, value in source.items() if not key.upper().startswith("GIT_")}
    entries = (*_FORCED_CONFIG, *config)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_CONFIG_COUNT": str(len(entries)),
        }
    )
    for index, (key, value) in enumerate(entries):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    if extra:
        env.update(extra)
    return env


async def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> bytes:
    """Run `git args...` in `cwd`; its stdout, or GitError. Cancelling kills git."""
    result = await anyio.run_process(
        ["git", *args],
        cwd=cwd,
        env=git_environment(extra=env),
        input=stdin,
        check=False,
    )
    if result.returncode != 0:
        raise GitError(args, result.returncode, result.stderr)
    return result.stdout


async def git_text(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """`git` with its stdout decoded and stripped of the trailing newline."""
    return (await git(cwd, *args, env=env)).decode("utf-8", "surrogateescape").strip()
