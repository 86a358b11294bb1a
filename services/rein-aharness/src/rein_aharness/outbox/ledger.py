"""The ledger: which entries the outbox knows to be pending, kept outside pending/.

A pending close must never disappear silently. pending/ alone cannot tell an entry that
was delivered from one that was deleted, nor an emptied directory from one that never
held anything; the ledger can. It is one append-only file beside the directories::

    rein-aharness/close-outbox-ledger/v1 <outbox id>
    +<key>        the entry was enqueued: it is known pending
    -<key>        it left pending/ through the outbox (delivered or quarantined)

A key is *known pending* when its last line is `+`. A key known pending that is in none
of pending/, delivered/ and quarantine/ is *lost*: `close-outbox status` lists it and
exits 5, the worker refuses to start and logs it while running, and only an operator's
`close-outbox adopt` forgets it (naming it).

The order of the steps, and why a crash between two of them is safe either way:

* enqueue makes the entry durable first, then appends `+key` durably, then returns.
  Killed in between, the entry exists but is not known; the next check (opening the
  store for the worker, every replay pass) adds it. No false alarm, and no entry that
  enqueue acknowledged is unknown. (The other order would be a false alarm: a known key
  whose entry never got written.)
* an entry leaves pending/ (is moved to delivered/ or quarantine/) before `-key` is
  appended. Killed in between, the key is known pending and found in delivered/ or
  quarantine/: not lost; the next check appends `-key`. (The other order would leave a
  pending entry that is not known; the next check adds it again: safe as well.)
* `-key` for a delivered entry is not fsynced on its own: pruning, the only thing that
  removes a delivered record, makes the ledger durable first. For a quarantined entry it
  is, since an operator removes quarantined files by hand.

A torn last line (power lost during an append) is ignored when read and cut off before
the next append. The file is rewritten atomically with just the keys known pending once
it has grown beyond twice that plus 1,024 lines.

Cost: one appended line and one fsync per enqueue; nothing per delivery beyond a line
written with the others of its group; reading it (a few bytes per entry) per pass.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rein_aharness.outbox.durable import read_bounded, write_atomic
from rein_aharness.outbox.paths import OutboxPaths
from rein_aharness.outbox.record import key_from_name

__all__ = [
    "LEDGER_FORMAT",
    "Ledger",
    "LedgerProblem",
    "append_ledger",
    "encode_ledger",
    "read_ledger",
    "scan_keys",
    "write_ledger",
]

LEDGER_FORMAT: Final = "rein-aharness/close-outbox-ledger/v1"
_MAX_LEDGER_BYTES = 64 * 1024 * 1024
_HEADER = re.compile(rf"{re.escape(LEDGER_FORMAT)} ([0-9a-f]{{32}})")
_LINE = re.compile(r"([+-])([0-9a-f]{64})")
_QUARANTINED = re.compile(r"([0-9a-f]{64})\.json(?:\.[0-9]+)?")
_COMPACT_SLACK = 1024


class LedgerProblem(Exception):
    """The ledger is missing or is not one this code wrote (the message says which)."""


@dataclass(frozen=True)
class Ledger:
    outbox_id: str
    known: frozenset[str]
    lines: int
    torn: bool = False  # a torn last line was ignored

    def needs_compaction(self) -> bool:
        return self.lines > 2 * len(self.known) + _COMPACT_SLACK


def encode_ledger(outbox_id: str, known: Iterable[str]) -> bytes:
    lines = [f"{LEDGER_FORMAT} {outbox_id}\n", *(f"+{key}\n" for key in sorted(known))]
    return "".join(lines).encode("ascii")


def write_ledger(paths: OutboxPaths, outbox_id: str, known: Iterable[str]) -> None:
    """Durably replace the ledger with `known` (the caller holds the store lock)."""
    write_atomic(paths.root, paths.ledger.name, encode_ledger(outbox_id, known))


def read_ledger(path: Path) -> Ledger:
    try:
        data = read_bounded(path, _MAX_LEDGER_BYTES)
    except FileNotFoundError:
        raise LedgerProblem(f"{path}: missing") from None
    except OSError as exc:
        raise LedgerProblem(f"{path}: unreadable ({exc.strerror})") from exc
    if data is None:
        raise LedgerProblem(f"{path}: larger than {_MAX_LEDGER_BYTES} bytes")
    pieces = data.split(b"\n")
    torn = pieces.pop() != b""
    if not pieces:
        raise LedgerProblem(f"{path}: no header line")
    header = _HEADER.fullmatch(pieces[0].decode("ascii", "replace"))
    if header is None:
        raise LedgerProblem(f"{path}: not a {LEDGER_FORMAT} file")
    known: set[str] = set()
    for number, piece in enumerate(pieces[1:], start=2):
        line = _LINE.fullmatch(piece.decode("ascii", "replace"))
        if line is None:
            raise LedgerProblem(f"{path}: line {number} is not a ledger line")
        if line.group(1) == "+":
            known.add(line.group(2))
        else:
            known.discard(line.group(2))
    return Ledger(header.group(1), frozenset(known), len(pieces), torn)


def append_ledger(
    path: Path, *, added: Iterable[str] = (), removed: Iterable[str] = (), durable: bool
) -> None:
    """Append `+key` / `-key` lines (the caller holds the store lock).

    `durable`: fsync the ledger, even with nothing to append, so that lines appended
    before without it are durable too.
    """
    data = "".join([*(f"+{key}\n" for key in added), *(f"-{key}\n" for key in removed)])
    if not data and not durable:
        return
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        if data:
            _cut_torn_tail(fd)
            view = memoryview(data.encode("ascii"))
            while view:
                view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def _cut_torn_tail(fd: int) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = max(0, size - 4096)
    tail = os.pread(fd, size - start, start)
    newline = tail.rfind(b"\n")
    if newline < 0:
        raise OSError(f"ledger {fd}: no complete line in its last 4096 bytes")
    os.ftruncate(fd, start + newline + 1)


def scan_keys(paths: OutboxPaths) -> tuple[set[str], set[str]]:
    """(keys with a file in pending/, keys settled in delivered/ or quarantine/)."""
    pending = _keys(paths.pending, key_from_name)
    settled = _keys(paths.delivered, key_from_name)
    settled |= _keys(paths.quarantine, _quarantined_key)
    return pending, settled


def _quarantined_key(name: str) -> str | None:
    match = _QUARANTINED.fullmatch(name)
    return match.group(1) if match else None


def _keys(directory: Path, key_of: Callable[[str], str | None]) -> set[str]:
    keys: set[str] = set()
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return keys
    for name in names:
        key = key_of(name)
        if key is not None:
            keys.add(key)
    return keys
