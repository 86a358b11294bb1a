"""Remote mode: a bare mirror per target repository, fetched before every attempt.

`ensure_mirror` creates `<root>/<owner>/<name>.git` on first need (`git init --bare` in a
temporary directory beside it, then a rename: a half-made mirror is never seen, and of
two creators one wins and the other uses its mirror). `fetch_baseline` then, under the
repository lock (worktree.repository_lock: an flock on the mirror, so one fetch at a
time across processes sharing the volume, and never during worktree administration or
a landing's import), asks the remote for its default branch (`ls-remote --symref HEAD`)
and fetches it by URL, forced, into `refs/remotes/origin/<branch>`, with `--no-tags`:
an upstream force-push moves that ref, nothing else is touched, and the `rein/*`
branches the worker landed under `refs/heads/` survive every fetch. The fetched commit is
the attempt's baseline. No remote is configured and no FETCH_HEAD written, so the
mirror's config never holds a URL.

Only these two git processes may use the network: each gets `protocol.<scheme>.allow`
for the template's scheme alone, in its own environment (every other git call keeps
`protocol.allow=never`), no redirects, and the credential helper (credential_helper.py)
after `credential.helper` is reset. Bounds: both together are killed (their whole
process group) at the source's timeout, and `http.lowSpeedLimit/Time` ends a stalled
transfer even earlier; the fetch is killed as soon as the mirror's packs grow by more
than the source's `max_bytes` (always a pack: `unpackLimit=1`), polled while it runs
and checked once more after. A failed or oversized fetch is rolled back: the ref is put
back, and packs and `tmp_*` files it left in `objects/pack/` are removed.

Failures are classified (`FetchFailed.kind`) from git's exit and its stderr:
`credentials_refused` (401/403, or no credentials to answer with), `not_found` (404, no
such repository, or a remote without a default branch), `too_large` (past the bound),
and `unavailable` for everything else (unreachable, timed out, 5xx, a connection dropped
mid-fetch): the only kind worth retrying.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteReceiveStream, Process

import ops_evidence
from rein_aharness.repository.git import GitError, git, git_environment, git_text
from rein_aharness.repository.locate import Repository, RepositoryNotFound, inspect_repository
from rein_aharness.repository.remote import (
    CREDENTIAL_HELPER_MODULE,
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
    RemoteSource,
)
from rein_aharness.repository.worktree import repository_lock

__all__ = [
    "FETCH_NAMESPACE",
    "FetchFailed",
    "FetchFailure",
    "ensure_mirror",
    "existing_mirror",
    "fetch_baseline",
    "mirror_path",
]

FETCH_NAMESPACE = "refs/remotes/origin/"
FetchFailure = Literal["unavailable", "credentials_refused", "not_found", "too_large"]

_POLL_SECONDS = 0.02
_HISTORICAL_FSCK = (
    "badTimezone",
    "badDate",
    "zeroPaddedDate",
    "missingSpaceBeforeDate",
    "missingEmail",
    "badEmail",
    "zeroPaddedFilemode",
)
_STDERR_KEEP = 16 * 1024
_STDOUT_MAX = 1024 * 1024
_DETAIL_CHARS = 200


class FetchFailed(Exception):
    """The attempt's fetch failed; nothing of it stays in the mirror. `reason` is the
    operator's line (`repository_<kind>: ...`), naming the URL (never a credential)."""

    def __init__(self, kind: FetchFailure, detail: str) -> None:
        self.kind = kind
        self.reason = f"repository_{kind}: {detail}"
        super().__init__(self.reason)


def mirror_path(root: Path, target_repo: str) -> Path:
    if ops_evidence.target_repo(target_repo) is None:
        raise RepositoryNotFound(f"target_repo {target_repo[:80]!r} is not an owner/name path")
    return root / f"{target_repo}.git"


async def existing_mirror(root: Path, target_repo: str) -> Repository:
    """The mirror of `target_repo` if it exists (RepositoryNotFound otherwise): what a
    landing is withdrawn from in remote mode, never a checkout beside it."""
    if not mirror_path(root, target_repo).is_dir():
        raise RepositoryNotFound(f"target_repo {target_repo!r} has no mirror")
    return await ensure_mirror(root, target_repo)


async def ensure_mirror(root: Path, target_repo: str) -> Repository:
    """The mirror of `target_repo` under `root`, created (empty, bare) if it is missing."""
    path = mirror_path(root, target_repo)
    if not path.exists():
        await _create_mirror(path)
    resolved = path.resolve()
    real_root = root.resolve()
    if not resolved.is_relative_to(real_root) or resolved == real_root:
        raise RepositoryNotFound(
            f"target_repo {target_repo!r} resolves outside the repositories root"
        )
    found = await inspect_repository(target_repo, resolved)
    return replace(found, unwatched=(FETCH_NAMESPACE,))


async def _create_mirror(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        await git(path.parent, "init", "--quiet", "--bare", os.fspath(staging))
        try:
            os.rename(staging, path)
        except OSError as exc:
            # Another creator won the rename: use its mirror, drop ours.
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not path.is_dir():
                raise
    finally:
        await anyio.to_thread.run_sync(partial(shutil.rmtree, staging, ignore_errors=True))


async def fetch_baseline(repository: Repository, source: RemoteSource) -> str:
    """Fetch the remote's default branch into the mirror; its commit (the baseline)."""
    url = source.url(repository.target_repo)
    async with repository_lock(repository):
        with anyio.move_on_after(source.timeout_seconds) as deadline:
            return await _fetch(repository, source, url)
        assert deadline.cancelled_caught
        raise FetchFailed(
            "unavailable", f"fetching {url} timed out after {source.timeout_seconds:g} s"
        )


async def _fetch(repository: Repository, source: RemoteSource, url: str) -> str:
    env = _network_environment(source, url)
    listing = await _network_git(repository, ["ls-remote", "--symref", url, "HEAD"], env, url)
    branch = _default_branch(listing.decode("utf-8", "replace"))
    if branch is None:
        raise FetchFailed("not_found", f"{url} has no default branch (an empty repository?)")
    ref = f"{FETCH_NAMESPACE}{branch}"
    await git(repository.path, "check-ref-format", ref)
    before = await _ref_value(repository, ref)
    packs = _pack_dir(repository)
    packs_before = _listing(packs)
    size_before = _size(packs)
    too_large = (
        f"fetching {url} brought more than REIN_AHARNESS_FETCH_MAX_MB "
        f"({source.max_bytes / (1 << 20):g} MB); the fetch was stopped and undone"
    )
    try:
        await _network_git(
            repository,
            [
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-recurse-submodules",
                "--no-auto-gc",
                url,
                f"+refs/heads/{branch}:{ref}",
            ],
            env,
            url,
            growth=(packs, size_before, source.max_bytes),
            too_large=too_large,
        )
        if _size(packs) - size_before > source.max_bytes:
            raise FetchFailed("too_large", too_large)
        return await git_text(repository.path, "rev-parse", "--verify", f"{ref}^{{commit}}")
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _roll_back(repository, ref, before, packs, packs_before)
        raise


_SYMREF = re.compile(r"^ref: refs/heads/(\S+)\tHEAD$", re.MULTILINE)


def _default_branch(listing: str) -> str | None:
    found = _SYMREF.search(listing)
    return found.group(1) if found else None


def _network_environment(source: RemoteSource, url: str) -> dict[str, str]:
    scheme = source.scheme
    config: list[tuple[str, str]] = [
        (f"protocol.{scheme}.allow", "always"),
        ("http.followRedirects", "false"),
        ("http.lowSpeedLimit", "1"),
        ("http.lowSpeedTime", str(max(1, int(source.timeout_seconds)))),
        ("transfer.unpackLimit", "1"),
        ("fetch.unpackLimit", "1"),
        # Objects are checked as they arrive (a hostile remote's `.git` paths, broken
        # trees), but old history's harmless format slips (dates, emails, zero-padded
        # modes) are let through, or real repositories could never be fetched.
        ("transfer.fsckObjects", "true"),
        *((f"fetch.fsck.{message}", "ignore") for message in _HISTORICAL_FSCK),
        ("fetch.prune", "false"),
        ("credential.helper", ""),
    ]
    extra: dict[str, str] = {}
    if source.token_file is not None and scheme in ("http", "https"):
        helper = f"!{shlex.quote(sys.executable)} -I -m {CREDENTIAL_HELPER_MODULE}"
        config.append(("credential.helper", helper))
        parts = urlsplit(url)
        extra = {
            TOKEN_FILE_VARIABLE: os.fspath(source.token_file),
            USERNAME_VARIABLE: source.username,
            ORIGIN_VARIABLE: f"{parts.scheme}://{parts.netloc}",
        }
    env = git_environment(config=config)
    env.pop("SSH_ASKPASS", None)
    env.update(extra)
    return env


@dataclass
class _Output:
    stdout: bytearray
    stderr: bytearray


async def _network_git(
    repository: Repository,
    args: Sequence[str],
    env: Mapping[str, str],
    url: str,
    *,
    growth: tuple[Path, int, int] | None = None,
    too_large: str = "",
) -> bytes:
    """Run git in its own process group, killed (all of it) when cancelled or, with
    `growth` (pack dir, size before, bound), when the packs grow past the bound."""
    output = _Output(bytearray(), bytearray())
    grew = False
    process = await anyio.open_process(
        ["git", *args],
        cwd=repository.path,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        async with anyio.create_task_group() as tasks:
            assert process.stdout is not None and process.stderr is not None
            tasks.start_soon(_collect, process.stdout, output.stdout, _STDOUT_MAX, False)
            tasks.start_soon(_collect, process.stderr, output.stderr, _STDERR_KEEP, True)
            if growth is not None:
                packs, size_before, bound = growth

                async def watch() -> None:
                    nonlocal grew
                    while True:
                        await anyio.sleep(_POLL_SECONDS)
                        if _size(packs) - size_before > bound:
                            grew = True
                            _kill(process)
                            return

                tasks.start_soon(watch)
            await process.wait()
            tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            _kill(process)
            await process.wait()
    if grew:
        raise FetchFailed("too_large", too_large)
    if process.returncode != 0:
        error = GitError(args, process.returncode or -1, bytes(output.stderr))
        raise _classified(url, error)
    return bytes(output.stdout)


async def _collect(stream: ByteReceiveStream, into: bytearray, keep: int, tail: bool) -> None:
    async for chunk in stream:
        into += chunk
        if len(into) > keep:
            if tail:
                del into[: len(into) - keep]
            else:
                del into[keep:]


def _kill(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


_CREDENTIALS = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "returned error: 401",
    "returned error: 403",
)
_NOT_FOUND = (
    "returned error: 404",
    "not found",
    "does not appear to be a git repository",
)


def _classified(url: str, error: GitError) -> FetchFailed:
    text = error.stderr.lower()
    # git's last `fatal:`/`error:` line says what went wrong, without the progress noise.
    detail = error.stderr
    for marker in ("fatal: ", "error: "):
        position = error.stderr.rfind(marker)
        if position >= 0:
            detail = error.stderr[position:]
            break
    detail = detail[:_DETAIL_CHARS] or f"git exited {error.returncode}"
    if any(sign in text for sign in _CREDENTIALS):
        return FetchFailed("credentials_refused", f"{url} refused the credentials: {detail}")
    if any(sign in text for sign in _NOT_FOUND):
        return FetchFailed("not_found", f"{url} was not found: {detail}")
    return FetchFailed("unavailable", f"fetching {url} failed: {detail}")


async def _ref_value(repository: Repository, ref: str) -> str | None:
    try:
        return await git_text(repository.path, "rev-parse", "--verify", "-q", ref)
    except GitError:
        return None


async def _roll_back(
    repository: Repository, ref: str, before: str | None, packs: Path, packs_before: set[str]
) -> None:
    """Undo a failed fetch: the ref back where it was, and every file it added to the
    pack directory (finished packs and `tmp_*` leftovers) removed. Only safe under the
    repository lock: nothing else adds packs meanwhile."""
    after = await _ref_value(repository, ref)
    if after != before:
        with contextlib.suppress(GitError):
            if before is None:
                await git(repository.path, "update-ref", "-d", ref)
            else:
                await git(repository.path, "update-ref", ref, before)
    for name in _listing(packs) - packs_before:
        with contextlib.suppress(OSError):
            (packs / name).unlink()


def _pack_dir(repository: Repository) -> Path:
    return repository.common_dir / "objects" / "pack"


def _listing(directory: Path) -> set[str]:
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()


def _size(directory: Path) -> int:
    total = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        with contextlib.suppress(OSError):
            total += entry.stat(follow_symlinks=False).st_size
    return total
