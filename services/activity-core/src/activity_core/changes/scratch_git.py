"""git on bytes we do not trust: in a directory of our own, with no config but ours.

A changes bundle comes from a worker; activity-core reads it with git. Nothing of the
bundle or of this machine's git setup may steer that git, so every call here:

- runs in a bare repository made with `git init --bare --template=` (no sample hooks,
  no info/ or description from a template directory);
- has an environment of our own, not the process's: no inherited `GIT_*` variable
  (GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_EXEC_PATH... would each redirect git), no system
  or global config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), HOME in the
  scratch directory, no terminal prompt;
- passes `-c protocol.allow=never` (no transport at all: nothing here fetches) and
  `-c core.hooksPath=/dev/null` (no hook, whatever a config would say);
- is bounded in time and in output: past `timeout_s`, or once it has written more than
  `max_output_bytes` to stdout, its process group is killed and GitTimeout /
  GitOutputTooLarge is raised. stderr is kept to its first few KiB, for the reason.

`run_git` is the same discipline for a repository that is not a scratch one (publication
works in a clone of its own and allows its one transport through `config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

__all__ = [
    "DEFAULT_OUTPUT_BYTES",
    "DEFAULT_TIMEOUT_S",
    "GitFailed",
    "GitOutputTooLarge",
    "GitRunner",
    "GitTimeout",
    "ScratchGit",
    "git_environment",
    "run_git",
]

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_OUTPUT_BYTES = 1 << 20
# How much of a failing git's stderr is kept for the error.
_STDERR_BYTES = 4096
_READ_CHUNK = 65536
# Our own config for every call; protocol.allow=never unless the caller allows one.
_BASE_CONFIG: tuple[str, ...] = ("core.hooksPath=/dev/null", "core.fsmonitor=false")


class GitFailed(Exception):
    """git exited non-zero; `stderr` is (the start of) what it said."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: bytes) -> None:
        self.returncode = returncode
        self.stderr = stderr.decode("utf-8", "replace").strip()
        super().__init__(f"git {args[0] if args else ''} exited {returncode}: {self.stderr}")


class GitTimeout(Exception):
    """git did not finish within its time bound and was killed."""


class GitOutputTooLarge(Exception):
    """git wrote more than its output bound and was killed."""


class GitRunner(Protocol):
    """What the history checks need: one bounded git call in some repository."""

    async def run(
        self,
        *args: str,
        max_output_bytes: int = DEFAULT_OUTPUT_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stdin: bytes | None = None,
    ) -> bytes: ...


def git_environment(home: Path) -> dict[str, str]:
    """The whole environment of a git call: PATH to find git, and our own settings."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
    }


async def run_git(
    args: Sequence[str],
    *,
    git_dir: Path,
    home: Path,
    max_output_bytes: int = DEFAULT_OUTPUT_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    stdin: bytes | None = None,
    config: Sequence[str] = ("protocol.allow=never",),
    env: Mapping[str, str] | None = None,
) -> bytes:
    """Run `git --git-dir=<git_dir> <args>` bounded as the module says; its stdout. `env`:
    variables added to our own environment for this call alone (a credential helper's)."""
    command = ["git", f"--git-dir={git_dir}"]
    for setting in (*_BASE_CONFIG, *config):
        command += ["-c", setting]
    command += list(args)
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**git_environment(home), **(env or {})},
        cwd=str(home),
        # its own process group, so a kill reaches any child git starts
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(timeout_s):
            stdout, stderr, _ = await asyncio.gather(
                _read_bounded(process.stdout, max_output_bytes),
                _read_bounded(process.stderr, _STDERR_BYTES, keep_reading=True),
                _feed(process.stdin, stdin),
            )
            returncode = await process.wait()
    except TimeoutError as exc:
        raise GitTimeout(f"git {args[0] if args else ''} took longer than {timeout_s} s") from exc
    except _TooMuch as exc:
        raise GitOutputTooLarge(
            f"git {args[0] if args else ''} wrote more than {max_output_bytes} bytes"
        ) from exc
    finally:
        await _kill(process)
    if returncode != 0:
        raise GitFailed(args, returncode, stderr)
    return stdout


class ScratchGit:
    """An empty bare repository in a temporary directory, removed on exit.

    async with ScratchGit() as git:
        await git.index_pack(pack)
        out = await git.run("diff-tree", "-p", baseline, tip, max_output_bytes=...)
    """

    def __init__(self, *, object_format: str = "sha1") -> None:
        self._object_format = object_format
        self._root: Path | None = None

    @property
    def git_dir(self) -> Path:
        if self._root is None:
            raise RuntimeError("ScratchGit is used outside its `async with`")
        return self._root / "repo.git"

    async def __aenter__(self) -> ScratchGit:
        self._root = Path(tempfile.mkdtemp(prefix="ac-changes-"))
        try:
            await run_git(
                (
                    "init",
                    "--quiet",
                    "--bare",
                    "--template=",
                    f"--object-format={self._object_format}",
                    str(self._root / "repo.git"),
                ),
                git_dir=self._root / "repo.git",
                home=self._root,
                timeout_s=DEFAULT_TIMEOUT_S,
            )
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._root is not None:
            # many small files at worst; not worth a thread
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    async def run(
        self,
        *args: str,
        max_output_bytes: int = DEFAULT_OUTPUT_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stdin: bytes | None = None,
    ) -> bytes:
        assert self._root is not None, "ScratchGit is used outside its `async with`"
        return await run_git(
            args,
            git_dir=self.git_dir,
            home=self._root,
            max_output_bytes=max_output_bytes,
            timeout_s=timeout_s,
            stdin=stdin,
        )

    async def index_pack(self, pack: bytes, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Store `pack`'s objects. A thin pack (one that needs objects we do not have) or a
        corrupt one fails (GitFailed); --fsck-objects refuses malformed objects (a tree
        entry named `.git`, a bad author line) without asking for the objects a
        self-contained changes pack leaves out on purpose (unchanged subtrees)."""
        await self.run(
            "index-pack",
            "--stdin",
            "--fsck-objects",
            max_output_bytes=4096,
            timeout_s=timeout_s,
            stdin=pack,
        )


class _TooMuch(Exception):
    pass


async def _read_bounded(
    stream: asyncio.StreamReader | None, limit: int, *, keep_reading: bool = False
) -> bytes:
    """Up to `limit` bytes of `stream`. Past it: _TooMuch, or (keep_reading, for stderr)
    the rest is read and dropped so that git never blocks on a full pipe."""
    if stream is None:
        return b""
    kept = bytearray()
    while chunk := await stream.read(_READ_CHUNK):
        if len(kept) + len(chunk) > limit:
            if not keep_reading:
                raise _TooMuch
            kept += chunk[: max(0, limit - len(kept))]
            continue
        kept += chunk
    return bytes(kept)


async def _feed(stream: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if stream is None or data is None:
        return
    # git may exit before it has read everything (a bad pack): its answer says why
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.close()
        await stream.wait_closed()


async def _kill(process: asyncio.subprocess.Process) -> None:
    """Make sure git and its process group are gone (a no-op after a normal exit)."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
