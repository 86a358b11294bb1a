"""Child process of the crash-injection tests (not a test module itself).

    python crash_child.py MODE ROOT TARGET WHEN N LOG

Runs one outbox operation against the store at ROOT and SIGKILLs itself at the Nth
call of TARGET (`fsync`, `replace`, `rename`, `unlink` of the `os` module, `syncfs` of
outbox/durable.py, or `callback`), either just `before` or just `after` that call
executes. With TARGET `count` nothing is killed and the number of calls of each target
is printed as JSON. The production code has no hooks for this: the `os` attributes and
`durable.syncfs` are replaced here.

MODE, optionally `@GROUP` (the replay's group_size; default 1, entry by entry):
  enqueue   enqueue three closes, printing each key once enqueue has returned
  replay    replay with a callback that answers `applied`
  failing   replay with a callback that raises an ordinary exception
  refused   replay with a callback that raises a conclusive refusal
  stopping  replay with a callback that raises an exception that ends the pass
Every callback invocation appends the entry key to LOG before anything else.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from ops_contracts import CloseDisposition, RefusalCode
from rein_aharness.outbox import ConclusiveRefusalError, OutboxStore, durable, replay_pending
from rein_aharness.outbox.record import OutboxRecord

OS_TARGETS = ("fsync", "replace", "rename", "unlink")


def enqueue_three(store: OutboxStore) -> Iterator[str]:
    """Enqueues the three closes of the `enqueue` mode (the replay modes' seed), yielding
    each key once its enqueue has returned."""
    for index in range(3):
        yield store.enqueue_close(
            run_id=f"run-{index}",
            transaction_id="txn",
            worker_id="rein-aharness@crash",
            action="complete",
            result={"ok": True, "path": f"briefs/{index}.md"},
        ).record.key


def main() -> None:
    mode_arg, root, target, when, nth, log = sys.argv[1:7]
    mode, _, group = mode_arg.partition("@")
    group_size = int(group or "1")
    n = int(nth)
    store = OutboxStore(Path(root))
    counts = dict.fromkeys((*OS_TARGETS, "syncfs", "callback"), 0)

    def step(name: str, phase: str) -> None:
        if name == target and counts[name] == n and phase == when:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(module: Any, name: str) -> None:
        original = getattr(module, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            step(name, "before")
            result = original(*args, **kwargs)
            step(name, "after")
            return result

        setattr(module, name, patched)

    for name in OS_TARGETS:
        wrap(os, name)
    wrap(durable, "syncfs")
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        os.write(log_fd, f"{record.key}\n".encode())
        counts["callback"] += 1
        step("callback", "before")
        if mode == "failing":
            raise RuntimeError("queue said no")
        if mode == "refused":
            raise ConclusiveRefusalError(RefusalCode.terminal_conflict)
        if mode == "stopping":
            raise ConnectionError("queue unreachable")
        return CloseDisposition.applied

    if mode == "enqueue":
        for key in enqueue_three(store):
            print(key, flush=True)
    else:
        anyio.run(
            lambda: replay_pending(
                store, deliver, group_size=group_size, stop_on=(ConnectionError,)
            )
        )
    if target == "count":
        print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
