"""Write a run's changes bundle (docs/changes.md): what activity-core stores and shows.

The bundle holds one prerequisite (the baseline), one ref (`rein/<run>/<attempt>` at
`head_after`) and a non-thin pack of exactly the objects a diff of the work needs: the
commits, the baseline commit, every root tree, and both sides of each commit's
`diff-tree -r -t --no-renames` against its parent. So activity-core can index it into an
empty repository and diff it there, and any clone with the baseline can fetch it.

Deterministic, so a bundle written again from the landed branch (the file was lost before
its close was delivered) has the digest the close intent recorded: the object list is
built in a fixed order, and `pack-objects` runs single-threaded with every object
compressed afresh (`--no-reuse-object`), so how the repository happens to store the
objects (loose, packed, repacked since) does not change the bytes.

The file is written durably (outbox/durable.py's pattern): a temp file in
`<state>/changes/`, fsynced, renamed to `<digest hex>.bundle`, the directory fsynced.
Past `max_bytes` nothing is kept and `ChangesTooLarge` is raised.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

from rein_aharness.outbox.durable import fsync_dir
from rein_aharness.repository.git import GitError, git, git_environment, git_text
from rein_aharness.repository.landing import landing_ref

__all__ = [
    "BUNDLE_SUFFIX",
    "DEFAULT_CHANGES_MAX_BYTES",
    "ChangesBundle",
    "ChangesTooLarge",
    "bundle_name",
    "bundle_objects",
    "write_changes_bundle",
]

DEFAULT_CHANGES_MAX_BYTES = 8 * 1024 * 1024
BUNDLE_SUFFIX = ".bundle"
_TEMP_PREFIX = ".tmp-"
_GITLINK = "160000"
_CHUNK = 1 << 16
_FILE_MODE = 0o600
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
# One thread and fresh compression: the same objects give the same pack bytes.
_PACK_CONFIG = ("-c", "pack.threads=1", "-c", "pack.compression=9")


@dataclass(frozen=True)
class ChangesBundle:
    path: Path
    digest: str  # "sha256:<64 hex>"
    size: int


class ChangesTooLarge(Exception):
    """The bundle would exceed the bound; nothing was kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        super().__init__(
            f"changes_too_large: the changes bundle exceeds REIN_AHARNESS_CHANGES_MAX_BYTES "
            f"({max_bytes} bytes)"
        )


def bundle_name(digest: str) -> str:
    """`<hex>.bundle` for `sha256:<hex>`."""
    return digest.removeprefix("sha256:") + BUNDLE_SUFFIX


async def _object_format(repo: Path) -> str:
    try:
        return await git_text(repo, "rev-parse", "--show-object-format")
    except GitError:
        return "sha1"


def _zero(sha: str) -> bool:
    return set(sha) == {"0"}


async def bundle_objects(repo: Path, baseline: str, head: str) -> list[tuple[str, str]]:
    """(object id, path) of every object the pack holds, in a fixed order, each once."""
    listed = await git_text(repo, "rev-list", "--reverse", "--first-parent", f"{baseline}..{head}")
    commits = listed.split() if listed else []
    seen: dict[str, str] = {}

    def add(sha: str, path: str = "") -> None:
        if not _zero(sha) and sha not in seen:
            seen[sha] = path

    add(baseline)
    add(await git_text(repo, "rev-parse", f"{baseline}^{{tree}}"))
    for commit in commits:
        add(commit)
        add(await git_text(repo, "rev-parse", f"{commit}^{{tree}}"))
        raw = await git(
            repo,
            "diff-tree",
            "-r",
            "-t",
            "--no-renames",
            "-z",
            "--no-commit-id",
            f"{commit}^",
            commit,
        )
        fields = raw.split(b"\x00")
        index = 0
        while index + 1 < len(fields) and fields[index]:
            meta = fields[index].decode("ascii").lstrip(":").split()
            path = fields[index + 1].decode("utf-8", "surrogateescape")
            old_mode, new_mode, old_sha, new_sha = meta[0], meta[1], meta[2], meta[3]
            # The path goes to pack-objects only as a delta hint: one line, no newline.
            hint = path.replace("\n", " ")
            if old_mode != _GITLINK:
                add(old_sha, hint)
            if new_mode != _GITLINK:
                add(new_sha, hint)
            index += 2
    return list(seen.items())


async def write_changes_bundle(
    repo: Path,
    changes_dir: Path,
    *,
    baseline: str,
    head: str,
    run_id: str,
    attempt: int,
    max_bytes: int = DEFAULT_CHANGES_MAX_BYTES,
) -> ChangesBundle:
    """Write the bundle of `baseline..head` into `changes_dir` durably; ChangesTooLarge
    past `max_bytes` (nothing kept); GitError when git cannot read the objects."""
    ref = landing_ref(run_id, attempt)
    await git(repo, "check-ref-format", ref)
    if await _object_format(repo) == "sha256":
        header = f"# v3 git bundle\n@object-format=sha256\n-{baseline}\n{head} {ref}\n\n"
    else:
        header = f"# v2 git bundle\n-{baseline}\n{head} {ref}\n\n"
    objects = await bundle_objects(repo, baseline, head)
    listing = "".join(f"{sha} {path}\n" if path else f"{sha}\n" for sha, path in objects)
    await anyio.to_thread.run_sync(lambda: changes_dir.mkdir(mode=0o700, exist_ok=True))
    temp = changes_dir / f"{_TEMP_PREFIX}{secrets.token_hex(8)}"
    fd = os.open(temp, _WRITE_FLAGS, _FILE_MODE)
    try:
        try:
            digest, size = await _write_pack(
                repo, fd, header.encode("utf-8", "surrogateescape"), listing, max_bytes
            )
            await anyio.to_thread.run_sync(os.fsync, fd)
        finally:
            os.close(fd)
        target = changes_dir / bundle_name(digest)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    await anyio.to_thread.run_sync(fsync_dir, changes_dir)
    return ChangesBundle(target, digest, size)


async def _write_pack(
    repo: Path, fd: int, header: bytes, listing: str, max_bytes: int
) -> tuple[str, int]:
    hasher = hashlib.sha256(header)
    size = len(header)
    if size > max_bytes:
        raise ChangesTooLarge(max_bytes)
    os.write(fd, header)
    command = [
        "git",
        *_PACK_CONFIG,
        "pack-objects",
        "--stdout",
        "-q",
        "--no-reuse-object",
        "--delta-base-offset",
    ]
    stderr = bytearray()
    too_large = False
    process: Process
    async with await anyio.open_process(command, cwd=repo, env=git_environment()) as process:
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        try:
            async with anyio.create_task_group() as tasks:

                async def feed() -> None:
                    assert process.stdin is not None
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await process.stdin.send(listing.encode("utf-8", "surrogateescape"))
                    await process.stdin.aclose()

                async def drain() -> None:
                    assert process.stderr is not None
                    async for chunk in process.stderr:
                        stderr.extend(chunk[: max(0, 4096 - len(stderr))])

                tasks.start_soon(feed)
                tasks.start_soon(drain)
                async for chunk in process.stdout:
                    size += len(chunk)
                    if size > max_bytes:
                        too_large = True
                        process.kill()
                        tasks.cancel_scope.cancel()
                        break
                    hasher.update(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        returncode = await process.wait()
    if too_large:
        raise ChangesTooLarge(max_bytes)
    if returncode != 0:
        raise GitError(["pack-objects"], returncode, bytes(stderr))
    return f"sha256:{hasher.hexdigest()}", size
