"""`rein-aharness run ARGS...` that SIGKILLs itself at one step of the changes hand-over
(not a test module itself).

    python changes_crash_child.py POINT run --once

POINT: `before_intent` (the attempt landed, its close is not yet in the outbox),
`before_upload` (the close intent is durable, the bundle not yet uploaded) or
`before_close` (the bundle is stored by activity-core, the close not yet sent). The
production code has no hooks for this: the methods are replaced here, and each step
appends its name to `$CHANGES_CRASH_LOG` (the approach's runs are counted by the tests
from the repository). `none`: nothing is killed.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.cli import main
from rein_aharness.outbox import OutboxStore


def _note(step: str) -> None:
    with open(os.environ["CHANGES_CRASH_LOG"], "a") as log:
        log.write(step + "\n")


def _patch(point: str) -> None:
    enqueue = OutboxStore.enqueue
    put_changes = ActivityCoreQueueClient.put_changes
    complete = ActivityCoreQueueClient.complete

    def patched_enqueue(self: OutboxStore, prepared: Any) -> Any:
        _note("enqueue")
        if point == "before_intent":
            os.kill(os.getpid(), signal.SIGKILL)
        return enqueue(self, prepared)

    async def patched_put(self: ActivityCoreQueueClient, *args: Any, **kwargs: Any) -> Any:
        _note("upload")
        if point == "before_upload":
            os.kill(os.getpid(), signal.SIGKILL)
        return await put_changes(self, *args, **kwargs)

    async def patched_complete(self: ActivityCoreQueueClient, *args: Any, **kwargs: Any) -> Any:
        _note("complete")
        if point == "before_close":
            os.kill(os.getpid(), signal.SIGKILL)
        return await complete(self, *args, **kwargs)

    OutboxStore.enqueue = patched_enqueue  # type: ignore[method-assign]
    ActivityCoreQueueClient.put_changes = patched_put  # type: ignore[method-assign]
    ActivityCoreQueueClient.complete = patched_complete  # type: ignore[method-assign]


if __name__ == "__main__":
    _patch(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
