"""Exit codes of the operator commands (also documented in `rein-aharness --help`).

A readiness or recovery probe can run `close-outbox status` (or `replay`) and treat
anything but 0 as "not clean".
"""

from __future__ import annotations

from enum import IntEnum

from rein_aharness.outbox.store import OutboxSnapshot

__all__ = ["EXIT_CODE_HELP", "ExitCode", "exit_code_for"]


class ExitCode(IntEnum):
    CLEAN = 0  # nothing pending, nothing quarantined
    PENDING = 1  # pending entries remain (replay will retry them); no quarantine
    USAGE = 2  # bad arguments, bad or missing environment variable
    QUARANTINED = 3  # quarantined material exists (an operator must inspect it)
    # the outbox state directory cannot be created, read or written, or others could
    # change it (outbox/trust.py)
    STORE_UNUSABLE = 4
    # the outbox lost entries it knew pending, or is not the outbox its state directory
    # recorded (outbox/identity.py, outbox/ledger.py); `close-outbox adopt` after a look
    INTEGRITY = 5
    INTERRUPTED = 130  # SIGINT


EXIT_CODE_HELP = """exit codes:
  0    nothing pending or quarantined
  1    pending entries remain, none quarantined
  2    usage or configuration error
  3    quarantined material exists (with or without pending entries)
  4    the outbox state directory is unusable, or others could change it
  5    the outbox lost entries it knew pending, or was replaced (inspect it,
       then restore it or run `close-outbox adopt`)
  130  interrupted"""


def exit_code_for(snapshot: OutboxSnapshot) -> ExitCode:
    if snapshot.lost:
        return ExitCode.INTEGRITY
    if snapshot.quarantined:
        return ExitCode.QUARANTINED
    if snapshot.pending:
        return ExitCode.PENDING
    return ExitCode.CLEAN
