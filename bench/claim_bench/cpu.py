"""CPU accounting (best effort, Linux /proc): where a phase's time went, and by whom.

The machine is small and shared: rates move with other tenants, CPU per run barely does,
and a phase during which everyone else took more than NOISE_LIMIT cores is measured again.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from claim_bench.plan import NOISE_LIMIT
from claim_bench.sql import BACKEND_PIDS

__all__ = [
    "CpuProbe",
    "CpuSnapshot",
    "CpuUse",
    "machine_busy",
    "process_cpu",
    "process_tree_cpu",
]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int) -> float | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_tree_cpu(pid: int) -> float | None:
    """CPU of a process and its children: `serve --workers N` is a supervisor and N workers."""
    own = process_cpu(pid)
    if own is None:
        return None
    children: list[int] = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            children += [int(child) for child in listing.read_text().split()]
    return own + sum(used for used in map(process_cpu, children) if used is not None)


def machine_busy() -> float | None:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = [int(v) for v in first[1:9]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / CLK_TCK


@dataclass(frozen=True)
class CpuSnapshot:
    at: float
    bench: float | None
    api: float | None
    backends: dict[int, float]
    machine: float | None


@dataclass(frozen=True)
class CpuUse:
    """Cores used on average over an interval, by who; `rest` is everyone else on the box."""

    bench: float | None
    api: float | None
    postgres: float | None
    rest: float | None

    def note(self) -> str:
        parts = [
            f"{name} {value:.2f}"
            for name, value in (
                ("bench", self.bench),
                ("api", self.api),
                ("postgres", self.postgres),
                ("rest of machine", self.rest),
            )
            if value is not None
        ]
        if not parts:
            return "cpu n/a"
        return f"cpu cores used: {', '.join(parts)} (of {os.cpu_count()})"

    def per_run(self, runs_per_s: float) -> str:
        """CPU milliseconds per run: unlike rates, barely moved by other tenants."""
        if not runs_per_s:
            return "cpu per run n/a"
        parts = [
            f"{name} {value * 1000 / runs_per_s:.2f} ms"
            for name, value in (
                ("bench", self.bench),
                ("api", self.api),
                ("postgres", self.postgres),
            )
            if value is not None
        ]
        return "cpu per run: " + ", ".join(parts)

    @property
    def noisy(self) -> bool:
        return self.rest is not None and self.rest > NOISE_LIMIT


class CpuProbe:
    """Core-seconds used by this process, the API server and our PostgreSQL backends."""

    def __init__(self, admin: asyncpg.Connection, database: str, api_pid: int | None) -> None:
        self._admin = admin
        self._database = database
        self._api_pid = api_pid

    async def snapshot(self) -> CpuSnapshot:
        rows = await self._admin.fetch(BACKEND_PIDS, self._database)
        backends = {}
        for r in rows:
            used = process_cpu(int(r["pid"]))
            if used is not None:
                backends[int(r["pid"])] = used
        return CpuSnapshot(
            at=time.perf_counter(),
            bench=process_cpu(os.getpid()),
            api=process_tree_cpu(self._api_pid) if self._api_pid else None,
            backends=backends,
            machine=machine_busy(),
        )

    @staticmethod
    def use(then: CpuSnapshot, now: CpuSnapshot) -> CpuUse:
        wall = max(now.at - then.at, 1e-6)

        def rate(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else (b - a) / wall

        # A backend born during the interval counts from zero; one that ended is lost.
        postgres = (
            sum(used - then.backends.get(pid, 0.0) for pid, used in now.backends.items()) / wall
            if now.backends
            else None
        )
        bench = rate(then.bench, now.bench)
        api = rate(then.api, now.api)
        machine = rate(then.machine, now.machine)
        rest = None
        if machine is not None:
            rest = max(0.0, machine - sum(v for v in (bench, api, postgres) if v is not None))
        return CpuUse(bench, api, postgres, rest)
