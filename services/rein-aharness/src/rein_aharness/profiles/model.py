"""The catalogue file's shape: pinned harness profiles and the legacy approach table.

Strict everywhere: unknown keys, wrong scalar types (`timeout_s: "300"`, `version: 1.0`)
and missing keys are refused, never coerced or defaulted, so what an operator reads in
the file is exactly what runs.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from ops_contracts import harness_profile_ref_error
from rein_aharness.profiles.network import (
    MAX_ALLOW_ENTRIES,
    EgressTarget,
    parse_target,
    target_error,
)
from rein_aharness.profiles.report_fields import ReportField
from rein_aharness.profiles.secret_specs import SecretSpec, unique_secrets
from rein_aharness.profiles.templates import template_error

__all__ = [
    "DEFAULT_SANDBOX",
    "MAX_OUTPUT_BYTES",
    "BriefSpec",
    "CatalogueFile",
    "CommandSpec",
    "HarnessProfile",
    "LegacyApproach",
    "NetworkAllowlist",
    "ReinIdentity",
    "SandboxLimits",
    "SandboxProfile",
]

# What the command approach keeps of a command's combined output, for the worker's own
# debug log only; it never reaches a result, the outbox or Activity Core.
MAX_OUTPUT_BYTES = 64 * 1024

_STRICT = ConfigDict(frozen=True, strict=True, extra="forbid")

# The evidence allowlist keeps only identifiers of this shape (ops_evidence.identifier);
# anything else would be dropped silently from the close, so it is refused here.
Identifier = Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,256}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
LegacyHint = Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,256}$")]

# Never passed to an approach, whatever the allowlist says: the worker's own credentials
# and configuration, and git variables that would point git at another repository or
# object store than the run's worktree.
_RESERVED_ENV = re.compile(r"^(ACTIVITY_CORE_|REIN_AHARNESS_|GIT_)", re.IGNORECASE)


def _argv_item(value: str) -> str:
    if not value:
        raise ValueError("argv items must not be empty")
    if "\x00" in value:
        raise ValueError("argv items must not contain NUL")
    return value


def _env_allowlist(names: list[str]) -> list[str]:
    reserved = [name for name in names if _RESERVED_ENV.match(name)]
    if reserved:
        raise ValueError(
            f"{', '.join(reserved)}: ACTIVITY_CORE_*, REIN_AHARNESS_* and GIT_* variables "
            "are never passed to an approach"
        )
    if len(set(names)) != len(names):
        raise ValueError("names must be unique")
    return names


def _unique(names: list[str]) -> list[str]:
    if len(set(names)) != len(names):
        raise ValueError("names must be unique")
    return names


def _output_template(value: str) -> str:
    problem = template_error(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# The sandbox every shipped profile runs in, unless the profile names another.
DEFAULT_SANDBOX = "profile.bwrap-local"

SandboxName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$")]


class SandboxLimits(BaseModel):
    """Resource bounds applied to the approach inside its sandbox (setrlimit on its first
    process, inherited by everything it starts; with a root worker the process bound is a
    pids cgroup, since the kernel exempts root from RLIMIT_NPROC).

    `address_space_mb` is the memory bound: each process's address space, and, where the
    node gives the worker a memory cgroup, the whole sandbox's memory, its tmpfs files
    included. `tmpfs_mb` is the size of each writable tmpfs (`/tmp`, `/dev/shm`): files
    there are memory, so it defaults to a quarter of the memory bound and may not exceed
    it. `worktree_mb` bounds how much the worktree, its git entry and the private objects
    may grow while the approach runs (the worker measures them; over it, the sandbox is
    killed and the run fails).
    """

    model_config = _STRICT

    cpu_seconds: int = Field(default=600, ge=1, le=86_400)
    address_space_mb: int = Field(default=4096, ge=64, le=1_048_576)
    processes: int = Field(default=256, ge=8, le=65_536)
    file_size_mb: int = Field(default=1024, ge=1, le=1_048_576)
    open_files: int = Field(default=1024, ge=16, le=65_536)
    tmpfs_mb: int | None = Field(default=None, ge=1, le=1_048_576)
    worktree_mb: int = Field(default=4096, ge=1, le=1_048_576)

    @model_validator(mode="after")
    def _tmpfs_within_memory(self) -> SandboxLimits:
        if self.tmpfs_mb is not None and self.tmpfs_mb > self.address_space_mb:
            raise ValueError(
                f"tmpfs_mb ({self.tmpfs_mb}) may not exceed address_space_mb "
                f"({self.address_space_mb}): tmpfs files are memory"
            )
        return self

    @property
    def tmpfs_bytes(self) -> int:
        """The size of each writable tmpfs: `tmpfs_mb`, else a quarter of the memory bound."""
        mb = self.tmpfs_mb if self.tmpfs_mb is not None else self.address_space_mb // 4
        return mb * 1024 * 1024


def _allow_entry(value: str) -> str:
    problem = target_error(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _unique_targets(entries: list[str]) -> list[str]:
    if len({parse_target(entry) for entry in entries}) != len(entries):
        raise ValueError("entries must be unique")
    return entries


class NetworkAllowlist(BaseModel):
    """`network: {allow: [host:port, ...]}`: no network of the sandbox's own; the listed
    destinations only, through the worker's egress proxy (profiles/network.py)."""

    model_config = _STRICT

    allow: Annotated[
        list[Annotated[str, Field(max_length=300), AfterValidator(_allow_entry)]],
        Field(min_length=1, max_length=MAX_ALLOW_ENTRIES),
        AfterValidator(_unique_targets),
    ]

    @property
    def targets(self) -> tuple[EgressTarget, ...]:
        return tuple(t for t in map(parse_target, self.allow) if t is not None)


class SandboxProfile(BaseModel):
    """How an approach is confined: `bwrap` (bubblewrap, namespaces, no network unless
    `network: true`, or only the named hosts with `network: {allow: [...]}`) or `none`
    (development only: refused unless the worker is started with
    REIN_AHARNESS_ALLOW_UNSANDBOXED=1)."""

    model_config = _STRICT

    kind: Literal["bwrap", "none"]
    network: bool | NetworkAllowlist = False
    limits: SandboxLimits = Field(default_factory=SandboxLimits)

    @model_validator(mode="after")
    def _consistent(self) -> SandboxProfile:
        if self.kind == "none" and self.network is not False:
            raise ValueError("`network` is for bwrap sandboxes; kind none confines nothing")
        return self

    @property
    def network_mode(self) -> Literal["none", "open", "allowlist"]:
        """`open`: the host's network (`network: true`); `allowlist`: the egress proxy."""
        if self.network is True:
            return "open"
        return "none" if self.network is False else "allowlist"


class ReinIdentity(BaseModel):
    """The rein that executes the profile, reported as `rein_id` / `rein_version`."""

    model_config = _STRICT

    id: Identifier
    version: Identifier


class CommandSpec(BaseModel):
    """`command`: run `argv` in the run's worktree (no shell), within `timeout_s`.

    The environment is exactly the `env_allowlist` variables the worker has, plus the
    run's identity (`REIN_RUN_ID`, `REIN_RUN_ATTEMPT`, `REIN_TARGET_REPO`) and a git
    committer identity; the output is bounded and never part of the result.
    """

    model_config = _STRICT

    argv: list[Annotated[str, Field(max_length=4096), AfterValidator(_argv_item)]] = Field(
        min_length=1, max_length=256
    )
    timeout_s: float = Field(gt=0, le=86_400, allow_inf_nan=False)
    env_allowlist: Annotated[
        list[EnvName], Field(max_length=64), AfterValidator(_env_allowlist)
    ] = Field(default_factory=list)
    # The result-file fields the approach may report (sandbox/result_file.py); none by
    # default, so a profile that says nothing keeps its catalogue evidence.
    report: Annotated[list[ReportField], AfterValidator(_unique)] = Field(default_factory=list)
    # Files the worker reads at attempt start and shows only inside the sandbox
    # (sandbox/secrets.py).
    secrets: Annotated[list[SecretSpec], Field(max_length=32), AfterValidator(unique_secrets)] = (
        Field(default_factory=list)
    )

    @model_validator(mode="after")
    def _secret_env_not_allowlisted(self) -> CommandSpec:
        clash = {s.env for s in self.secrets} & set(self.env_allowlist)
        if clash:
            raise ValueError(
                f"{', '.join(sorted(str(n) for n in clash))}: both allowlisted and a secret's env"
            )
        return self


class BriefSpec(BaseModel):
    """`brief`: render the run's title and description as markdown at `output_path`
    (a template, see templates.py) inside the grant, and commit it."""

    model_config = _STRICT

    output_path: Annotated[
        str, Field(min_length=1, max_length=256), AfterValidator(_output_template)
    ]


class HarnessProfile(BaseModel):
    """One pinned profile: `<id>@<version>` and everything that executes it."""

    model_config = _STRICT

    id: str
    version: str
    approach: Literal["command", "brief"]
    command: CommandSpec | None = None
    brief: BriefSpec | None = None
    sandbox_profile: SandboxName = DEFAULT_SANDBOX
    resolved_model: Identifier | None
    rein: ReinIdentity

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    @model_validator(mode="after")
    def _consistent(self) -> HarnessProfile:
        problem = harness_profile_ref_error(self.ref)
        if problem is not None:
            raise ValueError(f"{self.ref!r}: {problem}")
        wanted, other = ("command", "brief") if self.approach == "command" else ("brief", "command")
        if getattr(self, wanted) is None:
            raise ValueError(f"approach {self.approach} needs its `{wanted}` parameters")
        if getattr(self, other) is not None:
            raise ValueError(f"approach {self.approach} takes no `{other}` parameters")
        return self


class LegacyApproach(BaseModel):
    """An entry of the legacy approach table (profile-absent, grant-less rows only).

    Only `command`, and read-only: a legacy row has no repository grant, so any commit or
    ref change it makes is rejected and discarded.
    """

    model_config = _STRICT

    approach: Literal["command"]
    command: CommandSpec
    sandbox_profile: SandboxName = DEFAULT_SANDBOX


class CatalogueFile(BaseModel):
    model_config = _STRICT

    profiles: list[HarnessProfile] = Field(max_length=1000)
    sandbox_profiles: dict[SandboxName, SandboxProfile] = Field(
        default_factory=dict, max_length=100
    )
    legacy_approaches: dict[LegacyHint, LegacyApproach] = Field(default_factory=dict)
