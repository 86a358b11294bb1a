"""The worker's changes bundles on disk, as close delivery needs them (docs/changes.md).

A close intent whose result carries `repository_transaction.changes_digest` is sent only
after its bundle is stored by activity-core. Delivery asks `bundle_for` for the bytes:

- from `<state>/changes/<hex>.bundle`, the file the gateway wrote before landing, when
  it is there and still has the digest;
- otherwise written again from the landed branch `rein/<run>/<attempt>` (the bundle is
  deterministic, changes_bundle.py), and handed over only if its digest is the intent's.
  A branch that is gone, or a bundle that comes out different, can never satisfy the
  close: `EntryUndeliverable` (the outbox quarantines the entry with that reason);
- with a remote Glas gateway (`glas`), whose commits are not in any repository here:
  fetched again from Glas (`GET /v1/requests/<run>.<attempt>/changes.bundle`,
  idempotent by the request id, adapters/glas_changes.py), kept, and handed over only if
  its digest is the intent's (`changes_digest_mismatch` otherwise); a conclusive refusal
  or a bundle over the bound is `changes_unavailable`; Glas unreachable raises
  GlasChangesUnavailable, an ordinary failure, so the entry stays pending.

Reading the landed branch is not repository work: nothing in the repository changes;
nor is the GET, which asks Glas for what it already made and runs nothing.

`keep` stores bundle bytes the worker did not write itself (a remote Glas's, checked
by repository/changes_check.py) in the same place and the same durable way.

`discard` removes a bundle once its close is delivered; `prune` (at the worker's start)
removes every bundle no pending close refers to (a crash between writing it and
recording the close, or after the delivery before the removal).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import anyio

from rein_aharness.adapters.close_delivery import changes_digest_of
from rein_aharness.adapters.glas_changes import GlasChangesRefused, GlasChangesTooLarge
from rein_aharness.outbox import EntryUndeliverable, OutboxRecord, QuarantineReason
from rein_aharness.outbox.durable import fsync_dir, read_bounded, write_atomic
from rein_aharness.repository.changes_bundle import (
    BUNDLE_SUFFIX,
    DEFAULT_CHANGES_MAX_BYTES,
    ChangesBundle,
    ChangesTooLarge,
    bundle_name,
    write_changes_bundle,
)
from rein_aharness.repository.git import GitError, git_text
from rein_aharness.repository.landing import landing_ref
from rein_aharness.repository.locate import Repository, RepositoryNotFound, resolve_repository
from rein_aharness.repository.mirror import existing_mirror
from rein_aharness.repository.remote import RemoteSource

__all__ = ["ChangesStore", "GlasBundles"]

log = logging.getLogger(__name__)


class GlasBundles(Protocol):
    """Where a remote Glas request's bundle is fetched (adapters/glas_changes.py)."""

    async def fetch(self, request_id: str) -> bytes: ...


class ChangesStore:
    def __init__(
        self,
        changes_dir: Path,
        *,
        repositories_root: Path | None,
        source: RemoteSource | None = None,
        max_bytes: int = DEFAULT_CHANGES_MAX_BYTES,
        glas: GlasBundles | None = None,
    ) -> None:
        """`glas`: the worker's remote Glas gateway; lost bundles are fetched from it
        again instead of written from a landed branch."""
        self.directory = changes_dir
        self._root = repositories_root
        self._source = source
        self._max_bytes = max_bytes
        self._glas = glas

    async def bundle_for(self, record: OutboxRecord, digest: str) -> bytes:
        """The bundle bytes of `record`'s close, whose digest is `digest`."""
        path = self.directory / bundle_name(digest)
        data = await anyio.to_thread.run_sync(self._read, path)
        if data is not None and _digest(data) == digest:
            return data
        if self._glas is not None:
            return await self._refetch(self._glas, record, digest)
        return await self._rewrite(record, digest)

    def keep(self, data: bytes) -> ChangesBundle:
        """Store `data` as `<hex>.bundle` durably (temp file, fsync, rename, directory
        fsync); the caller has checked it and bounded its size."""
        digest = _digest(data)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        write_atomic(self.directory, bundle_name(digest), data)
        return ChangesBundle(self.directory / bundle_name(digest), digest, len(data))

    async def _refetch(self, glas: GlasBundles, record: OutboxRecord, digest: str) -> bytes:
        if record.attempt is None:
            raise EntryUndeliverable(QuarantineReason.changes_unavailable.value)
        extra = {"run_id": record.run_id, "attempt": record.attempt}
        # the Glas request id of the attempt (gateway/request.py's request_id_for)
        request_id = f"{record.run_id}.{record.attempt}"
        try:
            data = await glas.fetch(request_id)
        except (GlasChangesRefused, GlasChangesTooLarge) as exc:
            log.warning("changes bundle lost and not fetched again from glas: %s", exc, extra=extra)
            raise EntryUndeliverable(QuarantineReason.changes_unavailable.value) from None
        if _digest(data) != digest:
            log.warning(
                "changes bundle fetched again from glas has another digest",
                extra={**extra, "digest": _digest(data), "expected": digest},
            )
            raise EntryUndeliverable(QuarantineReason.changes_digest_mismatch.value)
        await anyio.to_thread.run_sync(self.keep, data)
        log.info("changes bundle fetched again from glas", extra={**extra, "digest": digest})
        return data

    def _read(self, path: Path) -> bytes | None:
        try:
            return read_bounded(path, self._max_bytes)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("changes bundle unreadable: %s", type(exc).__name__)
            return None

    async def _rewrite(self, record: OutboxRecord, digest: str) -> bytes:
        result = record.intent.result or {}
        transaction = result.get("repository_transaction")
        target_repo = result.get("target_repo")
        head = result.get("head_after")
        baseline = transaction.get("baseline_digest") if isinstance(transaction, dict) else None
        attempt = record.attempt
        if not (
            isinstance(target_repo, str)
            and isinstance(head, str)
            and isinstance(baseline, str)
            and attempt is not None
            and self._root is not None
        ):
            raise EntryUndeliverable(QuarantineReason.changes_unavailable.value)
        extra = {"run_id": record.run_id, "attempt": attempt}
        try:
            repository = await self._repository(target_repo)
            ref = landing_ref(record.run_id, attempt)
            landed = await git_text(repository.path, "rev-parse", "--verify", "-q", ref)
            if landed != head:
                raise GitError(["rev-parse"], 1, b"the landed branch is not at head_after")
            bundle = await write_changes_bundle(
                repository.path,
                self.directory,
                baseline=baseline,
                head=head,
                run_id=record.run_id,
                attempt=attempt,
                max_bytes=self._max_bytes,
            )
        except (RepositoryNotFound, GitError, ChangesTooLarge, OSError) as exc:
            log.warning(
                "changes bundle lost and not written again from the landed branch: %s",
                type(exc).__name__,
                extra=extra,
            )
            raise EntryUndeliverable(QuarantineReason.changes_unavailable.value) from None
        if bundle.digest != digest:
            await anyio.to_thread.run_sync(self._unlink, bundle.path)
            log.warning(
                "changes bundle written again from the landed branch has another digest",
                extra={**extra, "digest": bundle.digest, "expected": digest},
            )
            raise EntryUndeliverable(QuarantineReason.changes_digest_mismatch.value)
        log.info(
            "changes bundle written again from the landed branch",
            extra={**extra, "digest": digest},
        )
        return await anyio.to_thread.run_sync(bundle.path.read_bytes)

    async def _repository(self, target_repo: str) -> Repository:
        assert self._root is not None
        if self._source is None:
            return await resolve_repository(self._root, target_repo)
        return await existing_mirror(self._root, target_repo)

    def discard(self, digest: str) -> None:
        """Remove the bundle of a delivered close (it is no longer needed)."""
        self._unlink(self.directory / bundle_name(digest))

    def _unlink(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            fsync_dir(path.parent)

    def prune(self, pending: Iterable[OutboxRecord]) -> int:
        """Remove every bundle (and temp file) no pending close refers to; how many."""
        if not self.directory.is_dir():
            return 0
        keep = {
            bundle_name(digest)
            for digest in (changes_digest_of(record) for record in pending)
            if digest is not None
        }
        removed = 0
        for entry in os.scandir(self.directory):
            if entry.name in keep:
                continue
            if entry.name.endswith(BUNDLE_SUFFIX) or entry.name.startswith(".tmp-"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed += 1
        if removed:
            fsync_dir(self.directory)
        return removed


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
