"""One info line when an approach starts in its sandbox and one when it ends.

Operators read which sandbox a run's approach ran in and how it ended without the debug
log (which carries the command's output); the end-to-end suite counts executions by them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from ops_contracts import OpsRun
from rein_aharness.gateway.errors import ApproachFailed
from rein_aharness.sandbox import Sandbox, SandboxUnavailable

__all__ = ["logged_approach"]

log = logging.getLogger("rein_aharness.approach")


@asynccontextmanager
async def logged_approach(run: OpsRun, sandbox: Sandbox) -> AsyncIterator[None]:
    fields: dict[str, object] = {
        "run_id": str(run.id),
        "attempt": run.attempt,
        "sandbox_profile": sandbox.evidence_name,
    }
    log.info("approach started", extra=fields)
    ended = "cancelled"
    try:
        yield
        ended = "exited"
    except SandboxUnavailable:
        ended = "sandbox_unavailable"
        raise
    except ApproachFailed:
        ended = "failed"
        raise
    except anyio.get_cancelled_exc_class():
        raise
    except Exception:
        ended = "error"
        raise
    finally:
        log.info("approach finished", extra={**fields, "ended": ended})
