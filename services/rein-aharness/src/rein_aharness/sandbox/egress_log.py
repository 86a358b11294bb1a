"""What one attempt's egress proxy did: every connection tallied, in bounded memory.

An approach may open a million connections to a million made-up hosts; the log keeps
exact totals (allowed, refused, failed, bytes each way) and per-destination tallies for
the first `MAX_DESTINATIONS` distinct (host, port, outcome, reason), counting the rest
only in the totals. `on_record` sees every connection as it ends (the worker's metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ops_contracts.egress import EgressDestination, EgressOutcome, EgressReason, NetworkEgress

__all__ = ["MAX_DESTINATIONS", "ConnectionRecord", "EgressLog"]

MAX_DESTINATIONS = 16
# The evidence's integer bound (ops_evidence.MAX_INT); a count past it is shown at it.
_MAX_COUNT = 2**53 - 1


def _bounded(count: int) -> int:
    return min(count, _MAX_COUNT)


@dataclass
class ConnectionRecord:
    """One connection to the proxy; the byte counts grow while it relays."""

    outcome: EgressOutcome
    reason: EgressReason | None = None
    host: str | None = None
    port: int | None = None
    bytes_up: int = 0  # from the approach to the destination
    bytes_down: int = 0


@dataclass
class _Tally:
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


_Key = tuple[str | None, int | None, EgressOutcome, EgressReason | None]


@dataclass
class EgressLog:
    on_record: Callable[[ConnectionRecord], None] | None = None
    counts: dict[EgressOutcome, int] = field(
        default_factory=lambda: {"allowed": 0, "refused": 0, "failed": 0}
    )
    bytes_up: int = 0
    bytes_down: int = 0
    _destinations: dict[_Key, _Tally] = field(default_factory=dict)

    def record(self, entry: ConnectionRecord) -> None:
        self.counts[entry.outcome] += 1
        self.bytes_up += entry.bytes_up
        self.bytes_down += entry.bytes_down
        key: _Key = (entry.host, entry.port, entry.outcome, entry.reason)
        tally = self._destinations.get(key)
        if tally is None and len(self._destinations) < MAX_DESTINATIONS:
            tally = self._destinations[key] = _Tally()
        if tally is not None:
            tally.connections += 1
            tally.bytes_up += entry.bytes_up
            tally.bytes_down += entry.bytes_down
        if self.on_record is not None:
            self.on_record(entry)

    def evidence(self) -> NetworkEgress:
        return NetworkEgress(
            mode="allowlist",
            allowed=_bounded(self.counts["allowed"]),
            refused=_bounded(self.counts["refused"]),
            failed=_bounded(self.counts["failed"]),
            bytes_up=_bounded(self.bytes_up),
            bytes_down=_bounded(self.bytes_down),
            destinations=[
                EgressDestination(
                    host=host,
                    port=port,
                    outcome=outcome,
                    reason=reason,
                    connections=_bounded(tally.connections),
                    bytes_up=_bounded(tally.bytes_up),
                    bytes_down=_bounded(tally.bytes_down),
                )
                for (host, port, outcome, reason), tally in self._destinations.items()
            ],
        )
