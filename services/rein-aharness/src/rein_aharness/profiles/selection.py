"""Which way a claimed run is executed, decided before anything exists on disk (pure).

| row                                             | selection                              |
| ----------------------------------------------- | -------------------------------------- |
| invalid queued repository grant                 | Refused, closed through the outbox     |
| grant, no profile ref                           | Refused, closed through the outbox     |
| profile ref that is malformed/unpinned/unknown  | Refused, closed through the outbox     |
| `brief` profile without a grant                 | Refused (a brief commits; no authority)|
| sandbox kind `none` without the opt-in          | Refused (outbox, or direct for legacy) |
| resolved profile                                | Profiled (close through the outbox)    |
| no ref, no grant, hint in the legacy table      | Legacy (direct close, not outboxed)    |
| no ref, no grant, no such hint                  | Refused, closed directly               |

The sandbox profile is resolved here too, with the harness profile: a profile whose
sandbox is `none` (profile.none-local) runs only on a worker started with
REIN_AHARNESS_ALLOW_UNSANDBOXED=1, and is otherwise refused before any worktree exists.

`approach_hint` is read only in the last two rows: it never overrides a ref, never
stands in for an absent or invalid one, and never turns into a profile. An empty string
ref counts as present and malformed, not as absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ops_contracts import GrantValidationError, OpsRun, RepositoryGrantV1, parse_repository_grant
from rein_aharness.profiles.catalogue import BUILTIN_SANDBOXES, ProfileCatalogue, ProfileRefusal
from rein_aharness.profiles.model import (
    DEFAULT_SANDBOX,
    HarnessProfile,
    LegacyApproach,
    SandboxProfile,
)

__all__ = [
    "DEFAULT_SANDBOX_CHOICE",
    "ClosePath",
    "Legacy",
    "Profiled",
    "Refused",
    "SandboxChoice",
    "Selection",
    "select_execution",
]

_SHOWN_HINT_CHARS = 80


class ClosePath(StrEnum):
    outbox = "outbox"  # durable close-evidence outbox, replayed until delivered
    direct = "direct"  # profile-absent compatibility close: one request, not outboxed


@dataclass(frozen=True)
class SandboxChoice:
    """The sandbox profile a run's approach is to run in, by its catalogue name."""

    name: str
    profile: SandboxProfile

    @property
    def confined(self) -> bool:
        return self.profile.kind != "none"

    @property
    def evidence_name(self) -> str:
        """What the evidence reports once it has run: the profile's name, or `none`."""
        return self.name if self.confined else "none"


DEFAULT_SANDBOX_CHOICE = SandboxChoice(DEFAULT_SANDBOX, BUILTIN_SANDBOXES[DEFAULT_SANDBOX])


@dataclass(frozen=True)
class Profiled:
    profile: HarnessProfile
    grant: RepositoryGrantV1 | None
    sandbox: SandboxChoice


@dataclass(frozen=True)
class Legacy:
    approach_hint: str
    approach: LegacyApproach
    sandbox: SandboxChoice


@dataclass(frozen=True)
class Refused:
    reason: str
    close_path: ClosePath


Selection = Profiled | Legacy | Refused


def _unsandboxed_refusal(choice: SandboxChoice) -> str:
    return (
        f"sandbox profile {choice.name} runs the approach unconfined (kind none), which this "
        "worker refuses: it is for development only (REIN_AHARNESS_ALLOW_UNSANDBOXED=1)"
    )


def select_execution(
    run: OpsRun, catalogue: ProfileCatalogue, *, allow_unsandboxed: bool = False
) -> Selection:
    grant: RepositoryGrantV1 | None = None
    if run.repository_grant is not None:
        try:
            grant = parse_repository_grant(run.repository_grant)
        except GrantValidationError as exc:
            return Refused(f"the queued repository grant is invalid: {exc}", ClosePath.outbox)

    ref = run.harness_profile_ref
    if ref is None:
        if grant is not None:
            return Refused(
                "the run carries a repository grant but no harness_profile_ref; "
                "granted work needs an authoritative profile and is refused before execution",
                ClosePath.outbox,
            )
        return _legacy(run, catalogue, allow_unsandboxed=allow_unsandboxed)

    try:
        profile = catalogue.resolve(ref)
    except ProfileRefusal as refusal:
        return Refused(refusal.reason, ClosePath.outbox)
    if profile.approach == "brief" and grant is None:
        return Refused(
            f"profile {profile.ref} commits a brief, but the run carries no repository grant",
            ClosePath.outbox,
        )
    choice = SandboxChoice(profile.sandbox_profile, catalogue.sandbox(profile.sandbox_profile))
    if not choice.confined and not allow_unsandboxed:
        return Refused(_unsandboxed_refusal(choice), ClosePath.outbox)
    return Profiled(profile, grant, choice)


def _legacy(run: OpsRun, catalogue: ProfileCatalogue, *, allow_unsandboxed: bool) -> Selection:
    hint = run.approach_hint
    approach = catalogue.legacy_approach(hint)
    if hint is None or approach is None:
        shown = "absent" if hint is None else repr(hint[:_SHOWN_HINT_CHARS])
        return Refused(
            f"the run carries no harness_profile_ref and its approach_hint ({shown}) "
            "is not in the legacy approach table",
            ClosePath.direct,
        )
    choice = SandboxChoice(approach.sandbox_profile, catalogue.sandbox(approach.sandbox_profile))
    if not choice.confined and not allow_unsandboxed:
        return Refused(_unsandboxed_refusal(choice), ClosePath.direct)
    return Legacy(hint, approach, choice)
