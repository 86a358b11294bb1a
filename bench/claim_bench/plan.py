"""What to run: the phases' sizes and durations, the workload, the noise rule, the targets."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ops_evidence import normalize_result

__all__ = [
    "DEFINITION_ID",
    "FULL",
    "LATENCY_ROUNDS",
    "LATENCY_WARMUP",
    "LEASE_SECONDS",
    "MAX_ATTEMPTS",
    "MAX_TRIES",
    "NOISE_LIMIT",
    "QUICK",
    "RESULT",
    "STORED_RESULT",
    "SUSTAIN_TRIES",
    "TARGET_B",
    "TARGET_B_VS_MINIMAL",
    "TARGET_C",
    "TARGET_C_VS_MINIMAL",
    "TARGET_D",
    "TARGET_E",
    "TARGET_RAW_VS_MINIMAL",
    "Plan",
]


@dataclass(frozen=True)
class Plan:
    warmup: float  # seconds run before a throughput window opens
    measure: float  # the throughput window
    sustain: float  # the sustained run of (e)
    window: float  # its first and last windows
    backlog: int  # open rows seeded before each throughput phase
    small_rows: int  # (d), small table
    big_rows: int  # (d), large table
    insert_chunk: int  # rows per INSERT ... generate_series when seeding
    latency_samples: int  # claims timed per table size in (d)
    raw_connections: int = 8
    http_workers: tuple[int, ...] = (8, 32)
    sustain_workers: int = 8
    batch_limit: int = 10
    client: str = "lean"  # the HTTP load generator: "lean" (lean_http.py) or "httpx"
    api_workers: int = 1  # `serve --workers N`


FULL = Plan(
    warmup=2,
    measure=10,
    sustain=60,
    window=10,
    backlog=80_000,
    small_rows=10_000,
    big_rows=1_000_000,
    insert_chunk=250_000,
    latency_samples=2_000,
)
QUICK = Plan(
    warmup=1,
    measure=5,
    sustain=20,
    window=5,
    backlog=25_000,
    small_rows=10_000,
    big_rows=100_000,
    insert_chunk=50_000,
    latency_samples=300,
)

LEASE_SECONDS = 900
MAX_ATTEMPTS = 3
LATENCY_WARMUP = 100
LATENCY_ROUNDS = 3

# The machine is shared: a phase during which other processes used more than this many
# cores is measured again (at most MAX_TRIES times; the sustained run SUSTAIN_TRIES).
NOISE_LIMIT = 0.35
MAX_TRIES = 3
SUSTAIN_TRIES = 2

# The targets the queue is held to, as fractions of (a) (d: a ceiling on the ratio).
TARGET_B = 0.40
TARGET_C = 0.60
TARGET_D = 1.5
TARGET_E = 0.80

# The same phases held to the minimal queue table's rate, (a-ref): the real schema's raw
# cycle, and through HTTP with the most workers one run at a time and `limit: 10`.
TARGET_RAW_VS_MINIMAL = 0.75
TARGET_B_VS_MINIMAL = 0.50
TARGET_C_VS_MINIMAL = 0.60

# A small GatewayResult-shaped result: what a worker sends, normalized as the service would.
RESULT: dict[str, Any] = {
    "ok": True,
    "committed": False,
    "target_repo": "research/briefs",
    "execution_evidence": {
        "outcome": "succeeded",
        "profile_ref": "harness.agent-dev@1.0.0",
        "duration_s": 12.5,
        "tokens_spent": 1200,
        "tool_events_completeness": "complete",
        "tool_events_count": 3,
    },
}
STORED_RESULT = normalize_result(RESULT)

DEFINITION_ID = uuid.UUID("00000000-0000-4000-8000-00000000be01")
