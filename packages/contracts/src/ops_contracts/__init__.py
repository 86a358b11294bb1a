"""Typed contracts shared by activity-core, rein-aharness and other teams.

Depends on pydantic and the standard library only. Everything here is a wire
or digest contract: changing a value changes what another deployed process
accepts, so extend, never rename.
"""

from ops_contracts.canonical import canonical_json, digest_hex
from ops_contracts.close_intent import CloseIntent, close_intent_digest
from ops_contracts.codes import (
    CONCLUSIVE_CLOSE_REFUSALS,
    REFUSAL_HTTP_STATUS,
    TERMINAL_STATES,
    CloseAction,
    CloseDisposition,
    LabelsMode,
    Priority,
    RefusalCode,
    RunState,
    SourceType,
)
from ops_contracts.gateway import (
    AttributionRefs,
    GatewayEvidence,
    GatewayResult,
    RepositoryTransaction,
    gateway_result_payload,
)
from ops_contracts.grant import (
    CommitCount,
    GrantFieldError,
    GrantValidationError,
    RepositoryGrantV1,
    acceptance_policy_id,
    grant_id,
    parse_repository_grant,
    path_allowed,
    path_pattern_error,
    repository_path_error,
)
from ops_contracts.profile_ref import harness_profile_ref_error, parse_harness_profile_ref
from ops_contracts.queue import (
    Attempt,
    ClaimRequest,
    ClaimResponse,
    CloseResponse,
    CompleteRequest,
    ErrorBody,
    ExpireLeasesResponse,
    FailRequest,
    FieldError,
    HeartbeatRequest,
    Label,
    OpsRun,
    RunPage,
    WorkerId,
    label_error,
)
from ops_contracts.refs import ATTRIBUTION_REF_KEYS

__all__ = [
    "ATTRIBUTION_REF_KEYS",
    "CONCLUSIVE_CLOSE_REFUSALS",
    "REFUSAL_HTTP_STATUS",
    "TERMINAL_STATES",
    "Attempt",
    "AttributionRefs",
    "ClaimRequest",
    "ClaimResponse",
    "CloseAction",
    "CloseDisposition",
    "CloseIntent",
    "CloseResponse",
    "CommitCount",
    "CompleteRequest",
    "ErrorBody",
    "ExpireLeasesResponse",
    "FailRequest",
    "FieldError",
    "GatewayEvidence",
    "GatewayResult",
    "GrantFieldError",
    "GrantValidationError",
    "HeartbeatRequest",
    "Label",
    "LabelsMode",
    "OpsRun",
    "Priority",
    "RefusalCode",
    "RepositoryGrantV1",
    "RepositoryTransaction",
    "RunPage",
    "RunState",
    "SourceType",
    "WorkerId",
    "acceptance_policy_id",
    "canonical_json",
    "close_intent_digest",
    "digest_hex",
    "gateway_result_payload",
    "grant_id",
    "harness_profile_ref_error",
    "label_error",
    "parse_harness_profile_ref",
    "parse_repository_grant",
    "path_allowed",
    "path_pattern_error",
    "repository_path_error",
]
