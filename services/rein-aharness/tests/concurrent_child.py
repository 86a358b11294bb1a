"""Child process of the concurrency tests (not a test module itself).

    python concurrent_child.py ROOT MARKERS GO SLEEP

Waits until the file GO exists, then replays the store at ROOT. The callback claims
MARKERS/<key>.inflight with O_CREAT|O_EXCL for the time it runs (SLEEP seconds); if the
marker already exists another process is inside the same entry's callback, and an
`overlap-<key>` file is written. Each invocation appends the key to MARKERS/calls.log.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio

from ops_contracts import CloseDisposition
from rein_aharness.outbox import OutboxStore, replay_pending
from rein_aharness.outbox.record import OutboxRecord


def main() -> None:
    root, markers_arg, go, pause = sys.argv[1:5]
    markers = Path(markers_arg)
    store = OutboxStore(Path(root))
    while not os.path.exists(go):
        time.sleep(0.005)

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        marker = markers / f"{record.key}.inflight"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            (markers / f"overlap-{record.key}").write_text(str(os.getpid()))
        else:
            os.close(fd)
        with open(markers / "calls.log", "a") as log:
            log.write(f"{record.key} {os.getpid()}\n")
        await anyio.sleep(float(pause))
        marker.unlink(missing_ok=True)
        return CloseDisposition.applied

    anyio.run(replay_pending, store, deliver)


if __name__ == "__main__":
    main()
