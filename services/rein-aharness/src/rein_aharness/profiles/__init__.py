"""The harness profile catalogue and execution selection.

`harness_profile_ref` is authoritative: a run is executed by the pinned catalogue profile
it names, or refused before any worktree or sandbox exists. `approach_hint` only selects
an entry of the legacy approach table, and only for rows with neither a profile ref nor a
repository grant.
"""

from rein_aharness.profiles.catalogue import (
    BUILTIN_SANDBOXES,
    CatalogueError,
    ProfileCatalogue,
    ProfileRefusal,
    load_catalogue,
)
from rein_aharness.profiles.model import (
    BriefSpec,
    CommandSpec,
    HarnessProfile,
    LegacyApproach,
    ReinIdentity,
    SandboxLimits,
    SandboxProfile,
)
from rein_aharness.profiles.selection import (
    DEFAULT_SANDBOX_CHOICE,
    ClosePath,
    Legacy,
    Profiled,
    Refused,
    SandboxChoice,
    Selection,
    select_execution,
)
from rein_aharness.profiles.templates import BRIEF_PLACEHOLDERS, render_output_path

__all__ = [
    "BRIEF_PLACEHOLDERS",
    "BUILTIN_SANDBOXES",
    "DEFAULT_SANDBOX_CHOICE",
    "BriefSpec",
    "CatalogueError",
    "ClosePath",
    "CommandSpec",
    "HarnessProfile",
    "Legacy",
    "LegacyApproach",
    "ProfileCatalogue",
    "ProfileRefusal",
    "Profiled",
    "Refused",
    "ReinIdentity",
    "SandboxChoice",
    "SandboxLimits",
    "SandboxProfile",
    "Selection",
    "load_catalogue",
    "render_output_path",
    "select_execution",
]
