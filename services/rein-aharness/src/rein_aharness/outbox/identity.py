"""Which outbox this is: its identity marker, the state directory's pin, creating the tree.

When an outbox is created it gets a random id, recorded twice::

    <state>/close-outbox/outbox.json   the marker: {"created_at", "format",
                                       "outbox_id", "worker_id"} (canonical JSON, 0600)
    <state>/close-outbox.id            the pin: the same bytes, in the state directory

The tree (directories, lock files, an empty ledger, the marker) is built under a
temporary name in the state directory, made durable, and renamed into place in one
step; the pin is written after that. So close-outbox/ never exists without its marker
and ledger, and a pin never names an outbox that was not completely created.

Opening compares them:

    close-outbox/  marker     pin       outcome
    absent         -          absent    a new outbox is created
    absent         -          present   refused: the outbox this state directory had is gone
    present        absent     absent    adopted (an outbox from before markers existed, or
                                        an empty directory made for it): new marker and
                                        ledger, pinned, logged
    present        absent     present   refused: replaced or emptied
    present        present    absent    pinned (a crash came between the rename and the pin)
    present        = pin      present   opened
    present        != pin     present   refused: another outbox
    present        present    any       ledger missing, unreadable or another outbox's:
                                        refused

Refused is OutboxReplacedError: `run` does not start and `close-outbox status` exits 5,
each with one line naming the path and what is wrong. An operator who has looked
(restored the right directory, or decided to go on with this one) runs
`rein-aharness close-outbox adopt`: it pins the outbox as it now is and writes off the
entries it lost, naming each.

The marker's worker identity is the one that created the outbox (null when an operator
command did). Opening it under another identity is logged, not refused: entries recorded
under another identity are quarantined, never sent (replay.py), as before markers.

Opening, creating and adopting hold an exclusive flock on the state directory itself, so
two processes opening a fresh state directory at once create one outbox between them.

What this cannot see: the whole state directory replaced or emptied (a new volume), pin
included. Nothing on that disk remembers the old one; Activity Core's leases, which
expire without a close, are what bring those runs back.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

import ops_evidence
from ops_contracts import canonical_json
from rein_aharness.outbox.durable import TEMP_PREFIX, fsync_dir, read_bounded, write_atomic
from rein_aharness.outbox.errors import OutboxReplacedError
from rein_aharness.outbox.ledger import LedgerProblem, read_ledger, scan_keys, write_ledger
from rein_aharness.outbox.locking import ensure_lock_file, hold_directory_lock, hold_lock
from rein_aharness.outbox.paths import OutboxPaths
from rein_aharness.outbox.trust import make_private_dir, secure_outbox_dir, secure_state_dir

__all__ = ["MARKER_FORMAT", "Adoption", "OutboxMarker", "adopt_outbox", "open_outbox"]

log = logging.getLogger(__name__)

MARKER_FORMAT: Final = "rein-aharness/close-outbox-marker/v1"
_MAX_MARKER_BYTES = 4096
_ADOPT_HINT = "restore it, or accept it as it is with `rein-aharness close-outbox adopt`"


class OutboxMarker(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format: Literal["rein-aharness/close-outbox-marker/v1"] = MARKER_FORMAT
    outbox_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    worker_id: str | None = Field(max_length=ops_evidence.MAX_IDENTIFIER_CHARS)
    created_at: AwareDatetime


@dataclass(frozen=True)
class Adoption:
    """What `adopt_outbox` did: the outbox now pinned, the keys it wrote off (known
    pending, found nowhere), whether it had to create the outbox, and the outbox the
    state directory had recorded before (None: none, or the same)."""

    marker: OutboxMarker
    written_off: tuple[str, ...]
    created: bool
    replaced: str | None


def encode_marker(marker: OutboxMarker) -> bytes:
    return canonical_json(marker.model_dump(mode="json"))


def open_outbox(
    paths: OutboxPaths, *, identity: str | None, clock: Callable[[], datetime]
) -> OutboxMarker:
    """Check, create or open the outbox at `paths` (see the module docstring)."""
    secure_state_dir(paths.state_dir)
    with hold_directory_lock(paths.state_dir):
        _remove_leftovers(paths)
        pin = _read_identity(paths.pin, "pin")
        if not secure_outbox_dir(paths.root, create=False):
            if pin is not None:
                raise OutboxReplacedError(
                    f"{paths.root}: missing, but {paths.pin} records outbox {pin.outbox_id} "
                    f"there (removed or moved away); {_ADOPT_HINT}"
                )
            created = _create(paths, identity, clock)
            _write_pin(paths, created)
            return created
        # Nothing is created in a directory until it is known to be this outbox.
        marker = _read_identity(paths.marker, "marker")
        if marker is None:
            if pin is not None:
                raise OutboxReplacedError(
                    f"{paths.root}: has no identity marker ({paths.marker.name}), but "
                    f"{paths.pin} records outbox {pin.outbox_id} there (replaced or "
                    f"emptied); {_ADOPT_HINT}"
                )
            _secure_tree(paths)
            marker = _adopt_unmarked(paths, identity, clock)
            _write_pin(paths, marker)
            return marker
        if pin is not None and pin != marker:
            raise OutboxReplacedError(
                f"{paths.root}: is outbox {marker.outbox_id}, but {paths.pin} records outbox "
                f"{pin.outbox_id} there (replaced); {_ADOPT_HINT}"
            )
        _secure_tree(paths)
        try:
            ledger = read_ledger(paths.ledger)
        except LedgerProblem as problem:
            raise OutboxReplacedError(f"{problem}; {_ADOPT_HINT}") from None
        if ledger.outbox_id != marker.outbox_id:
            raise OutboxReplacedError(
                f"{paths.ledger}: belongs to outbox {ledger.outbox_id}, not to "
                f"{marker.outbox_id}; {_ADOPT_HINT}"
            )
        if pin is None:
            _write_pin(paths, marker)
    if identity is not None and marker.worker_id not in (None, identity):
        log.warning(
            "close outbox %s was created by worker identity %s; entries recorded under "
            "another identity than %s are quarantined, not sent",
            paths.root,
            marker.worker_id,
            identity,
        )
    return marker


def adopt_outbox(
    paths: OutboxPaths, *, identity: str | None, clock: Callable[[], datetime]
) -> Adoption:
    """Accept the outbox at `paths` as it now is: pin it (creating it, or a marker for
    it, if missing), and forget the entries it knew pending that are gone."""
    secure_state_dir(paths.state_dir)
    with hold_directory_lock(paths.state_dir):
        _remove_leftovers(paths)
        try:
            pin = _read_identity(paths.pin, "pin")
        except OutboxReplacedError:
            pin = None
        previous = pin.outbox_id if pin is not None else None
        if not secure_outbox_dir(paths.root, create=False):
            marker = _create(paths, identity, clock)
            _write_pin(paths, marker)
            return Adoption(marker, (), created=True, replaced=previous)
        _secure_tree(paths)
        with hold_lock(paths.store_lock):
            try:
                present = _read_identity(paths.marker, "marker")
            except OutboxReplacedError:
                present = None
            try:
                known = read_ledger(paths.ledger).known
            except LedgerProblem:
                known = frozenset()
            pending, settled = scan_keys(paths)
            written_off = tuple(sorted(known - pending - settled))
            adopted = present or _new_marker(identity, clock)
            write_ledger(paths, adopted.outbox_id, pending)
            write_atomic(paths.root, paths.marker.name, encode_marker(adopted))
        _write_pin(paths, adopted)
    for key in written_off:
        log.warning("close outbox %s: written off lost entry %s", paths.root, key)
    same = previous == adopted.outbox_id
    return Adoption(adopted, written_off, created=False, replaced=None if same else previous)


def _new_marker(identity: str | None, clock: Callable[[], datetime]) -> OutboxMarker:
    return OutboxMarker(outbox_id=secrets.token_hex(16), worker_id=identity, created_at=clock())


def _read_identity(path: Path, what: str) -> OutboxMarker | None:
    """The marker (or pin) at `path`; None when absent; OutboxReplacedError when it is
    not one this code wrote."""
    try:
        data = read_bounded(path, _MAX_MARKER_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutboxReplacedError(
            f"{path}: unreadable outbox {what} ({exc.strerror}); {_ADOPT_HINT}"
        ) from exc
    try:
        if data is None:
            raise ValueError("too large")
        marker = OutboxMarker.model_validate_json(data)
        if encode_marker(marker) != data:
            raise ValueError("not canonical")
    except (ValidationError, ValueError):
        raise OutboxReplacedError(
            f"{path}: not an outbox {what} this code wrote; {_ADOPT_HINT}"
        ) from None
    return marker


def _write_pin(paths: OutboxPaths, marker: OutboxMarker) -> None:
    write_atomic(
        paths.state_dir,
        paths.pin.name,
        encode_marker(marker),
        temp_prefix=_pin_temp_prefix(paths),
    )


def _tree_temp_prefix(paths: OutboxPaths) -> str:
    return f"{TEMP_PREFIX}{paths.root.name}-"


def _pin_temp_prefix(paths: OutboxPaths) -> str:
    return f"{TEMP_PREFIX}{paths.root.name}.id-"


def _remove_leftovers(paths: OutboxPaths) -> None:
    """A tree or pin temp file a crash left in the state directory (ours by name; the
    caller holds the state directory's lock, so nobody is still writing them)."""
    tree, pin = _tree_temp_prefix(paths), _pin_temp_prefix(paths)
    uid = os.geteuid()
    for name in os.listdir(paths.state_dir):
        path = paths.state_dir / name
        if name.startswith(tree):
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
                shutil.rmtree(path)
        elif name.startswith(pin) and stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)


def _secure_tree(paths: OutboxPaths) -> None:
    for directory in paths.directories():
        secure_outbox_dir(directory)
    for lock in (paths.store_lock, paths.replay_lock):
        ensure_lock_file(lock)


def _create(
    paths: OutboxPaths, identity: str | None, clock: Callable[[], datetime]
) -> OutboxMarker:
    marker = _new_marker(identity, clock)
    temp = OutboxPaths(paths.state_dir / f"{_tree_temp_prefix(paths)}{secrets.token_hex(8)}")
    make_private_dir(temp.root)
    try:
        for directory in temp.directories()[1:]:
            make_private_dir(directory)
        for lock in (temp.store_lock, temp.replay_lock):
            ensure_lock_file(lock)
        write_ledger(temp, marker.outbox_id, ())
        # The last write fsyncs the temp root: every entry above is durable with it.
        write_atomic(temp.root, temp.marker.name, encode_marker(marker))
        os.rename(temp.root, paths.root)
    except BaseException:
        shutil.rmtree(temp.root, ignore_errors=True)
        raise
    fsync_dir(paths.state_dir)
    return marker


def _adopt_unmarked(
    paths: OutboxPaths, identity: str | None, clock: Callable[[], datetime]
) -> OutboxMarker:
    """Give an unpinned outbox without a marker one, and a ledger of its pending keys.

    The ledger is written before the marker: killed in between, the directory still
    has no marker and is adopted again.
    """
    with hold_lock(paths.store_lock):
        pending, _ = scan_keys(paths)
        held = bool(pending) or any(os.listdir(directory) for directory in paths.directories()[2:])
        marker = _new_marker(identity, clock)
        write_ledger(paths, marker.outbox_id, pending)
        write_atomic(paths.root, paths.marker.name, encode_marker(marker))
    if held:
        log.warning(
            "close outbox %s had no identity marker (written before markers existed): "
            "adopted as outbox %s with %d pending entries",
            paths.root,
            marker.outbox_id,
            len(pending),
        )
    return marker
