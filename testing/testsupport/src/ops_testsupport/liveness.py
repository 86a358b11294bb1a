"""The liveness test both workers share: a real process's `/livez` answers 200 while its
event loop runs (also while it idles for longer than the limit), and 503 `stalled` within
the limit once something blocks the loop, while the process is still there.

To block the loop, the process runs its real CLI under `stalling_entry`: a SIGUSR1 handler
that sleeps for a minute. Python runs signal handlers on the main thread, which is the
event loop's, so the handler is exactly a synchronous call that does not return; the
liveness thread is left alone (SIGSTOP would freeze it too, and the probe would fail by
timing out rather than by what it checks).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from dataclasses import dataclass

import httpx

__all__ = ["LivenessWatch", "stall_and_watch", "stalling_entry"]


def stalling_entry(*lines: str) -> str:
    """`python -c` source: the SIGUSR1 handler that blocks the main thread, then `lines`
    (the code that runs the CLI)."""
    handler = "import signal, time\nsignal.signal(signal.SIGUSR1, lambda *_: time.sleep(60))\n"
    return handler + "".join(f"{line}\n" for line in lines)


@dataclass(frozen=True)
class LivenessWatch:
    healthy: list[int]  # the statuses while the loop ran
    stalled: httpx.Response  # the first answer that was not 200
    failed_after: float  # seconds from the block to that answer
    alive: bool  # the process was still there when it came

    def assert_stalled_within(self, max_stall: float) -> None:
        """Healthy all along, then 503 `stalled` within the limit (plus a probe's interval
        and the scheduler's slack), and not by dying."""
        assert len(self.healthy) >= 10 and set(self.healthy) == {200}, self.healthy
        assert self.stalled.status_code == 503, self.stalled.text
        body = self.stalled.json()
        assert body["status"] == "stalled", body
        assert body["seconds_since_loop_ran"] > max_stall, body
        assert max_stall - 1.0 <= self.failed_after <= max_stall + 1.5, self.failed_after
        assert self.alive


async def stall_and_watch(
    http: httpx.AsyncClient,
    url: str,
    process: subprocess.Popen[bytes],
    max_stall: float,
) -> LivenessWatch:
    """Probe `url` for three times the limit, then block `process`'s loop (SIGUSR1) and
    probe until the answer is not 200."""
    healthy = []
    until = time.monotonic() + 3 * max_stall
    while time.monotonic() < until:
        healthy.append((await http.get(url)).status_code)
        await asyncio.sleep(0.2)

    process.send_signal(signal.SIGUSR1)
    blocked_at = time.monotonic()
    answers: list[httpx.Response] = []
    async with asyncio.timeout(max_stall + 5):
        while not answers or answers[-1].status_code == 200:
            answers.append(await http.get(url))
            await asyncio.sleep(0.1)
    return LivenessWatch(
        healthy=healthy,
        stalled=answers[-1],
        failed_after=time.monotonic() - blocked_at,
        alive=process.poll() is None,
    )
