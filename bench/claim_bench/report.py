"""What the bench prints: the environment, each attempt's lines, the API's profile, the summary."""

from __future__ import annotations

import io
import os
import pstats
from pathlib import Path

from claim_bench.api_server import OWN_VARIABLES
from claim_bench.plan import (
    NOISE_LIMIT,
    TARGET_B,
    TARGET_B_VS_MINIMAL,
    TARGET_C,
    TARGET_C_VS_MINIMAL,
    TARGET_D,
    TARGET_E,
    TARGET_RAW_VS_MINIMAL,
    Plan,
)
from claim_bench.records import Measured, Results, ms
from claim_bench.seeding import Database

__all__ = [
    "environment",
    "print_attempt",
    "print_profile",
    "print_summary",
    "rows_label",
    "verdict",
]


async def environment(db: Database) -> None:
    settings = {}
    for name in ("server_version", "synchronous_commit", "autovacuum", "shared_buffers", "fsync"):
        settings[name] = await db.conn.fetchval(f"SHOW {name}")
    overrides = {
        k: v
        for k, v in os.environ.items()
        if (k.startswith(("ACTIVITY_CORE_", "OPS_RUN_"))) and k not in OWN_VARIABLES
    }
    print(
        f"PostgreSQL {settings['server_version']}"
        f" · synchronous_commit={settings['synchronous_commit']}"
        f" · fsync={settings['fsync']} · autovacuum={settings['autovacuum']}"
        f" · shared_buffers={settings['shared_buffers']} · {os.cpu_count()} cores"
        f" · load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"scratch database {db.name} · API server settings: defaults"
        + (f" + {overrides}" if overrides else "")
    )


def print_attempt(attempt: Measured, unit: str) -> None:
    result, log = attempt.result, attempt.log
    print(
        f"  {result.runs_per_s:,.0f} {unit}"
        + (f" ({result.claims_per_s:,.0f} claims/s)" if unit == "runs/s" else "")
        + f" · claim p50 {ms(result.claim_p50)} p99 {ms(result.claim_p99)}"
        + f" · complete p50 {ms(result.close_p50)} p99 {ms(result.close_p99)}"
    )
    print(
        f"  runs completed {len(log.runs_done):,} · double claims {log.double_claims}"
        f" · errors {len(log.errors)} · empty claims {log.empty_claims}"
    )
    print(f"  {result.cpu.note()} · {result.cpu.per_run(result.runs_per_s)}")
    if attempt.server_tx is not None:
        claim_tx, close_tx = attempt.server_tx
        print(
            f"  inside the API (its /metrics): claim transaction mean {ms(claim_tx)},"
            f" close transaction mean {ms(close_tx)}"
        )
    for error in log.errors[:5]:
        print(f"  ! {error}")
    if log.empty_claims:
        print("  ! the backlog ran dry during the phase; the rate is a lower bound")


def print_profile(path: Path) -> None:
    """The API server's hottest functions while it served the HTTP phases."""
    if not path.exists():
        print(f"  ! no profile was written to {path}")
        return
    print(f"\nactivity-core serve under cProfile ({path}), top functions by own time:")
    out = io.StringIO()
    pstats.Stats(str(path), stream=out).sort_stats("tottime").print_stats(30)
    print("\n".join("  " + line for line in out.getvalue().splitlines()[6:]))
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out).sort_stats("cumulative")
    stats.print_stats(r"activity_core|ops_contracts|ops_evidence|fastapi|starlette|pydantic", 40)
    print("  by cumulative time (service and framework code):")
    print("\n".join("  " + line for line in out.getvalue().splitlines()[6:]))


def rows_label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else f"{rows // 1000}k"


def verdict(ok: bool | None, noisy: bool = False) -> str:
    text = "n/a" if ok is None else ("PASS" if ok else "MISS")
    return f"{text} (noisy)" if noisy else text


def print_summary(results: Results, plan: Plan) -> None:
    a = results.ceiling
    rows: list[tuple[str, str, str, str, str]] = []
    print(
        f"\nHTTP phases: activity-core serve --workers {plan.api_workers}, "
        f"load generator {plan.client}, {os.cpu_count()} cores shared by everything"
    )

    def vs_a(value: float) -> str:
        return f"{value / a:.0%}" if a else "n/a"

    rows.append(
        (
            "(a) raw SQL ceiling, real schema, 8 conns",
            f"{a:,.0f} cycles/s",
            "100%",
            "baseline",
            "",
        )
    )
    for i, run in enumerate(results.ceiling_runs, 1):
        rows.append(
            (
                f"    measurement {i}",
                f"{run.runs_per_s:,.0f} cycles/s",
                vs_a(run.runs_per_s),
                "",
                "",
            )
        )
    m = results.minimal.runs_per_s if results.minimal else 0.0
    fleet = max(plan.http_workers)

    def vs_minimal(label: str, value: float, target: float | None, noisy: bool) -> None:
        """A row of the figure against the minimal table (a verdict where one is held)."""
        if m:
            rows.append(
                (
                    label,
                    f"{value / m:.0%} of {m:,.0f}",
                    "",
                    f">= {target:.0%} of minimal" if target is not None else "",
                    verdict(value >= target * m, noisy) if target is not None else "",
                )
            )

    if m:
        rows.append(("    ref: minimal queue table", f"{m:,.0f} cycles/s", vs_a(m), "", ""))
        for i, ref in enumerate(results.minimal_runs, 1):
            rows.append((f"      measurement {i}", f"{ref.runs_per_s:,.0f} cycles/s", "", "", ""))
        best = max(results.ceiling_runs, key=lambda t: t.runs_per_s)
        vs_minimal("(a) vs minimal table", a, TARGET_RAW_VS_MINIMAL, best.cpu.noisy)
        # each real measurement against the minimal one taken right after it
        pairs = zip(results.ceiling_runs, results.minimal_runs, strict=True)
        for i, (real, ref) in enumerate(pairs, 1):
            rows.append(
                (
                    f"    measurement {i} vs the minimal right after",
                    f"{real.runs_per_s / ref.runs_per_s:.0%}",
                    "",
                    "",
                    "",
                )
            )
    for workers, run in sorted(results.http.items()):
        rows.append(
            (
                f"(b) HTTP, {workers} workers",
                f"{run.runs_per_s:,.0f} cycles/s",
                vs_a(run.runs_per_s),
                f">= {TARGET_B:.0%} of (a)",
                verdict(run.runs_per_s >= TARGET_B * a, run.cpu.noisy),
            )
        )
        target_b = TARGET_B_VS_MINIMAL if workers == fleet else None
        vs_minimal("    vs minimal table", run.runs_per_s, target_b, run.cpu.noisy)
        rows.append(
            (
                "    claim p50 / p99",
                f"{ms(run.claim_p50)} / {ms(run.claim_p99)}",
                "",
                "",
                "",
            )
        )
        rows.append(
            (
                "    complete p50 / p99",
                f"{ms(run.close_p50)} / {ms(run.close_p99)}",
                "",
                "",
                "",
            )
        )
    for workers, run in sorted(results.batch.items()):
        rows.append(
            (
                f"(c) HTTP limit {plan.batch_limit}, {workers} workers",
                f"{run.runs_per_s:,.0f} runs/s",
                vs_a(run.runs_per_s),
                f">= {TARGET_C:.0%} of (a)",
                verdict(run.runs_per_s >= TARGET_C * a, run.cpu.noisy),
            )
        )
        target_c = TARGET_C_VS_MINIMAL if workers == fleet else None
        vs_minimal("    vs minimal table", run.runs_per_s, target_c, run.cpu.noisy)
    if results.latency_small is not None and results.latency_big is not None:
        ratio = results.latency_big / results.latency_small
        rows.append(
            (
                f"(d) claim p50, {rows_label(plan.small_rows)} -> {rows_label(plan.big_rows)} open",
                f"{ms(results.latency_small)} -> {ms(results.latency_big)}",
                f"{ratio:.2f}x",
                f"<= {TARGET_D}x",
                verdict(ratio <= TARGET_D),
            )
        )
    for kind, sustained in results.sustained.items():
        first, last = sustained.first, sustained.last
        ratio = last / first if first else float("nan")
        if kind == "HTTP":
            target = f"last >= {TARGET_E:.0%} of first ({ratio:.0%})"
            result = verdict(ratio >= TARGET_E, sustained.noise > NOISE_LIMIT)
        else:
            # The claim path under test is the service's; this run has no service in the
            # loop, so nothing but the server's autovacuum cleans up after it.
            target, result = f"reference: no activity-core ({ratio:.0%})", ""
        rows.append(
            (
                f"(e) sustained {kind} {plan.sustain:.0f} s, first/last {plan.window:.0f} s",
                f"{first:,.0f} -> {last:,.0f} cycles/s",
                f"{first / a:.0%} -> {last / a:.0%}",
                target,
                result,
            )
        )
    rows.append(
        (
            "double claims, all phases",
            str(results.double_claims),
            "",
            "0",
            verdict(results.double_claims == 0),
        )
    )
    rows.append(("errors, all phases", str(results.errors), "", "0", verdict(results.errors == 0)))
    header = ("figure", "value", "vs (a)", "target", "result")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    print("\nSummary")
    for r in [header, *rows]:
        print("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
