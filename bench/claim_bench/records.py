"""What a phase measured: the workers' event log, its summary, the run's results so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from claim_bench.cpu import CpuUse

__all__ = [
    "Measured",
    "PhaseLog",
    "Results",
    "Sustained",
    "Throughput",
    "ms",
    "percentile",
    "summarize",
]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


@dataclass
class PhaseLog:
    """Timestamps of everything the workers did in one phase (perf_counter seconds)."""

    name: str
    claims: list[tuple[float, float]] = field(default_factory=list)  # (ended, seconds)
    closes: list[tuple[float, float]] = field(default_factory=list)
    runs_done: list[float] = field(default_factory=list)
    empty_claims: int = 0
    errors: list[str] = field(default_factory=list)
    claimed: set[str] = field(default_factory=set)
    double_claims: int = 0

    def record_claimed(self, run_ids: Sequence[str]) -> None:
        for run_id in run_ids:
            if run_id in self.claimed:
                self.double_claims += 1
            self.claimed.add(run_id)

    def rate(self, start: float, end: float) -> float:
        return sum(1 for t in self.runs_done if start <= t < end) / (end - start)

    def claim_rate(self, start: float, end: float) -> float:
        return sum(1 for t, _ in self.claims if start <= t < end) / (end - start)

    @staticmethod
    def latencies(events: list[tuple[float, float]], start: float, end: float) -> list[float]:
        return [d for t, d in events if start <= t < end]


@dataclass
class Throughput:
    label: str
    runs_per_s: float
    claims_per_s: float
    claim_p50: float
    claim_p99: float
    close_p50: float
    close_p99: float
    double_claims: int
    errors: int
    cpu: CpuUse


@dataclass
class Measured:
    """One attempt at a throughput phase."""

    result: Throughput
    log: PhaseLog
    server_tx: tuple[float, float] | None = None  # mean claim / close transaction seconds


def summarize(label: str, log: PhaseLog, start: float, end: float, cpu: CpuUse) -> Throughput:
    claims = PhaseLog.latencies(log.claims, start, end)
    closes = PhaseLog.latencies(log.closes, start, end)
    return Throughput(
        label=label,
        runs_per_s=log.rate(start, end),
        claims_per_s=log.claim_rate(start, end),
        claim_p50=percentile(claims, 0.50),
        claim_p99=percentile(claims, 0.99),
        close_p50=percentile(closes, 0.50),
        close_p99=percentile(closes, 0.99),
        double_claims=log.double_claims,
        errors=len(log.errors),
        cpu=cpu,
    )


@dataclass
class Sustained:
    first: float
    last: float
    noise: float  # the larger "rest of machine" of the first and last windows


@dataclass
class Results:
    ceiling_runs: list[Throughput] = field(default_factory=list)
    # each measured right after the ceiling run of the same index: the machine's speed
    # drifts within a run, so each pair is a ratio taken at one speed
    minimal_runs: list[Throughput] = field(default_factory=list)
    http: dict[int, Throughput] = field(default_factory=dict)
    batch: dict[int, Throughput] = field(default_factory=dict)
    latency_small: float | None = None
    latency_big: float | None = None
    sustained: dict[str, Sustained] = field(default_factory=dict)
    double_claims: int = 0
    errors: int = 0

    @property
    def ceiling(self) -> float:
        return max((t.runs_per_s for t in self.ceiling_runs), default=float("nan"))

    @property
    def minimal(self) -> Throughput | None:
        """The minimal table's best measurement, the reference every figure is held to."""
        return max(self.minimal_runs, key=lambda t: t.runs_per_s, default=None)

    def add(self, result: Throughput) -> Throughput:
        self.double_claims += result.double_claims
        self.errors += result.errors
        return result
