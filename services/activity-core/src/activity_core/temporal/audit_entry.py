"""What an action of this layer needs of its audit entry (the operator plane writes it:
operator/audit.py's AuditedAction fits this).

A pause, resume or fire changes another system (a Temporal Schedule, a started workflow):
it writes its entry in the database transaction that stays open across that call, before
the call, so a failed write means the call was never made, and a failed call rolls the
entry back. `resolved` names the target once the action has found it (an automation
addressed by its UUID is audited under its slug).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import asyncpg
from asyncpg.pool import PoolConnectionProxy

__all__ = ["ActionAudit", "Unaudited"]


class ActionAudit(Protocol):
    def resolved(self, kind: str, value: object) -> None: ...

    async def write(
        self,
        conn: PoolConnectionProxy[asyncpg.Record],
        details: Mapping[str, Any],
        *,
        repeated: bool = False,
    ) -> None: ...


class Unaudited:
    """For a caller outside the operator plane (a test, a maintenance script): records
    nothing."""

    def resolved(self, kind: str, value: object) -> None:
        return None

    async def write(
        self,
        conn: PoolConnectionProxy[asyncpg.Record],
        details: Mapping[str, Any],
        *,
        repeated: bool = False,
    ) -> None:
        return None
