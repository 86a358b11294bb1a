"""Reading a run's stored changes: the row of its current attempt, the change view, the
patch and the bundle (GET /ops-runs/{id}/changes, .patch, .bundle and the run page).

The row is the current attempt's (queries.GET_CURRENT_CHANGES): a row of an earlier
attempt is work that never closed, never the run's change. No row is 404 `not_found`.

The view and the patch are derived with git from the stored bundle in a scratch
repository (scratch_git.ScratchGit: its pack indexed, no refs, no config or hooks but
ours), each call bounded in time (DEFAULT_TIMEOUT_S) and output. At most
MAX_CONCURRENT_DERIVATIONS run at once per process (git is CPU: a burst of readers
queues here instead of starving the API). The view of a digest is kept in a small cache:
a bundle never changes once stored, so neither does its view.

A stored bundle git cannot read (it was checked when it was stored, so this means the
row was damaged, or git's output bounds were met) is 422 `changes_invalid` with what git
said, never a 500: the bundle itself can still be downloaded.

Time is another matter: a git call past its bound, or a derivation (the scratch
repository, its pack and about six git calls) past the reader's one overall deadline
(ACTIVITY_CORE_CHANGES_VIEW_DEADLINE_SECONDS, default 30 s; the wait for the gate
counts too), says the node is slow, not the bundle bad: 503 `unavailable` with
Retry-After, nothing cached. Cancellation at the deadline kills the running git's
process group (scratch_git.run_git's `finally`) and removes the scratch directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import asyncpg

from activity_core.changes import queries
from activity_core.changes.bundle_format import ChangesInvalid, parse_bundle_header
from activity_core.changes.scratch_git import (
    DEFAULT_TIMEOUT_S,
    GitFailed,
    GitOutputTooLarge,
    GitTimeout,
    ScratchGit,
    git_environment,
)
from activity_core.changes.view import (
    Bounds,
    ChangesUnreadable,
    ChangesView,
    Derived,
    GitOutput,
    derive,
)
from activity_core.db.unavailable import Unit, run_unit
from activity_core.publication import queries as publication_queries
from activity_core.publication.record import project_publication
from activity_core.queue.errors import QueueRefusal
from ops_contracts import RefusalCode

__all__ = [
    "MAX_CONCURRENT_DERIVATIONS",
    "MAX_PATCH_BYTES",
    "ChangesReader",
    "StoredChanges",
]

MAX_CONCURRENT_DERIVATIONS = 2
# The mbox is the bundle's content uncompressed; a bundle within its 8 MiB bound that
# inflates past this is answered with a pointer to the bundle instead.
MAX_PATCH_BYTES = 64 * 1024 * 1024
_VIEW_CACHE_SIZE = 16
T = TypeVar("T")
_READ_CHUNK = 65536
_STDERR_BYTES = 4096
# scratch_git's own settings for every call (its _BASE_CONFIG and the no-transport rule):
# the prefix read below runs git the same way.
_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "protocol.allow=never")


@dataclass(frozen=True)
class StoredChanges:
    run_id: uuid.UUID
    attempt: int
    digest: str
    size: int
    baseline: str
    head_after: str
    stored_at: datetime
    bundle: bytes


def _unreadable(reason: str) -> QueueRefusal:
    return QueueRefusal(
        RefusalCode.changes_invalid,
        f"the stored changes cannot be read with git: {reason}; the bundle can still be "
        "downloaded (changes.bundle)",
    )


class _ScratchOutput:
    """view.Git over a ScratchGit: stdout up to a limit, and whether there was more.

    ScratchGit.run refuses an output past its bound; the diff wants its first bytes
    instead (the files before the cut are shown), so this reads them and then kills git,
    with scratch_git's environment, settings and process-group discipline."""

    def __init__(self, scratch: ScratchGit) -> None:
        self._scratch = scratch

    async def output(self, args: Sequence[str], *, limit: int) -> GitOutput:
        git_dir = self._scratch.git_dir
        command = ["git", f"--git-dir={git_dir}"]
        for setting in _CONFIG:
            command += ["-c", setting]
        process = await asyncio.create_subprocess_exec(
            *command,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=git_environment(git_dir.parent),
            cwd=str(git_dir.parent),
            start_new_session=True,
        )
        # stderr is drained all along (git never blocks on it), its start kept
        stderr_read = asyncio.ensure_future(_drain(process.stderr))
        try:
            async with asyncio.timeout(DEFAULT_TIMEOUT_S):
                data, cut = await _prefix(process.stdout, limit)
                if cut:
                    return GitOutput(data, cut=True)
                code = await process.wait()
                stderr = await stderr_read
        except TimeoutError as exc:
            raise ChangesUnreadable(
                f"git {args[0]} took longer than {DEFAULT_TIMEOUT_S} s"
            ) from exc
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            if not stderr_read.done():
                stderr_read.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await stderr_read
        if code != 0:
            said = stderr.decode("utf-8", "replace").strip()
            raise ChangesUnreadable(f"git {args[0]} exited {code}: {said}")
        return GitOutput(data, cut=False)


async def _drain(stream: asyncio.StreamReader | None) -> bytes:
    kept = b""
    if stream is not None:
        while chunk := await stream.read(_READ_CHUNK):
            kept = (kept + chunk)[:_STDERR_BYTES]
    return kept


async def _prefix(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    if stream is None:
        return b"", False
    kept = bytearray()
    while chunk := await stream.read(_READ_CHUNK):
        if len(kept) + len(chunk) > limit:
            kept += chunk[: limit - len(kept)]
            return bytes(kept), True
        kept += chunk
    return bytes(kept), False


DEFAULT_DEADLINE_S = 30.0


class ChangesReader:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        bounds: Bounds | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        self._pool = pool
        self._bounds = bounds or Bounds()
        self._deadline_s = deadline_s
        self._gate = asyncio.Semaphore(MAX_CONCURRENT_DERIVATIONS)
        self._views: OrderedDict[str, Derived] = OrderedDict()

    async def _row_of_run(self, query: str, run_id: uuid.UUID) -> asyncpg.Record | None:
        """`query`'s one row for the run, a read that is run again when its connection was
        lost."""
        return await run_unit(
            self._pool,
            Unit.READ,
            lambda conn: conn.fetchrow(query, run_id),
            untouched=True,
        )

    async def stored(self, run_id: uuid.UUID) -> StoredChanges | None:
        """The current attempt's row, or None."""
        row = await self._row_of_run(queries.GET_CURRENT_CHANGES, run_id)
        if row is None:
            return None
        return StoredChanges(
            run_id=row["run_id"],
            attempt=row["attempt"],
            digest=row["digest"],
            size=row["size"],
            baseline=row["baseline"],
            head_after=row["head_after"],
            stored_at=row["stored_at"],
            bundle=bytes(row["bundle"]),
        )

    async def require(self, run_id: uuid.UUID) -> StoredChanges:
        stored = await self.stored(run_id)
        if stored is None:
            raise QueueRefusal(
                RefusalCode.not_found, "no changes are stored for this run's current attempt"
            )
        return stored

    async def view(self, run_id: uuid.UUID) -> ChangesView:
        """The view, with the run's publication as it is now (never cached: it changes)."""
        view = await self.view_of(await self.require(run_id))
        row = await self._row_of_run(publication_queries.GET_PUBLICATION, run_id)
        if row is None:
            return view
        return dataclasses.replace(view, publication=project_publication(dict(row)))

    async def view_of(self, stored: StoredChanges) -> ChangesView:
        derived = self._views.get(stored.digest)
        if derived is None:
            derived = await self._in_scratch(stored, self._derive)
            self._views[stored.digest] = derived
            while len(self._views) > _VIEW_CACHE_SIZE:
                self._views.popitem(last=False)
        else:
            self._views.move_to_end(stored.digest)
        return ChangesView(
            run_id=str(stored.run_id),
            attempt=stored.attempt,
            digest=stored.digest,
            size=stored.size,
            baseline=stored.baseline,
            head_after=stored.head_after,
            stored_at=stored.stored_at,
            commits=derived.commits,
            files=derived.files,
            truncated=derived.truncated,
            note=derived.note,
        )

    async def patch(self, run_id: uuid.UUID) -> bytes:
        """`git format-patch --stdout baseline..head_after`: an mbox `git am` applies on the
        baseline."""
        return await self.patch_of(await self.require(run_id))

    async def patch_of(self, stored: StoredChanges) -> bytes:
        return await self._in_scratch(stored, self._format_patch)

    async def _derive(self, scratch: ScratchGit, stored: StoredChanges) -> Derived:
        return await derive(
            _ScratchOutput(scratch), stored.baseline, stored.head_after, self._bounds
        )

    async def _format_patch(self, scratch: ScratchGit, stored: StoredChanges) -> bytes:
        try:
            return await scratch.run(
                "format-patch",
                "--stdout",
                "--no-color",
                "--no-signature",
                f"{stored.baseline}..{stored.head_after}",
                max_output_bytes=MAX_PATCH_BYTES,
            )
        except GitOutputTooLarge as exc:
            raise _unreadable(
                f"its patch is over {MAX_PATCH_BYTES} bytes (fetch the bundle instead)"
            ) from exc

    async def _in_scratch(
        self,
        stored: StoredChanges,
        work: Callable[[ScratchGit, StoredChanges], Awaitable[T]],
    ) -> T:
        try:
            header = parse_bundle_header(stored.bundle)
        except ChangesInvalid as exc:
            raise _unreadable(exc.reason) from exc
        try:
            async with (
                asyncio.timeout(self._deadline_s),
                self._gate,
                ScratchGit(object_format=header.object_format) as scratch,
            ):
                await scratch.index_pack(stored.bundle[header.pack_offset :])
                return await work(scratch, stored)
        except (TimeoutError, GitTimeout) as exc:
            raise QueueRefusal(
                RefusalCode.unavailable,
                f"the changes could not be derived within {self._deadline_s:g} s on this "
                "node; retry",
            ) from exc
        except (GitFailed, GitOutputTooLarge, ChangesUnreadable) as exc:
            raise _unreadable(str(exc)) from exc
