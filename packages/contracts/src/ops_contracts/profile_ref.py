"""Structural validation of ``harness_profile_ref`` (``<id>@<version>``).

activity-core does not mirror the glas-harness profile catalogue, so it can
only check shape. The version pin is what matters: Glas treats an unpinned ref
as matching every version and refuses it as ambiguous, but only at execution
time. Requiring a pinned semantic version here turns that late refusal into an
error at definition sync and emission. A well-formed but unknown profile is
still caught by Glas; that gap is accepted (ACT-ADR-006).

Ranges (``^1.0.0``), wildcards (``1.0.*``), partial versions (``1``, ``1.x``)
and tags (``latest``) are all unpinned and therefore refused.
"""

from __future__ import annotations

import re

__all__ = ["harness_profile_ref_error", "parse_harness_profile_ref"]

# Bounded so a ref stays a ref, not a payload, in rows and logs.
MAX_PROFILE_REF_LENGTH = 256

_PROFILE_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}", re.ASCII)
# Pinned MAJOR.MINOR.PATCH with optional pre-release/build suffix.
_PINNED_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]+)?", re.ASCII)


def harness_profile_ref_error(ref: object) -> str | None:
    """Why ``ref`` is not a pinned profile ref, or ``None`` when it is one."""
    if not isinstance(ref, str):
        return "harness profile ref must be a string"
    if not ref:
        return "harness profile ref must not be empty"
    if len(ref) > MAX_PROFILE_REF_LENGTH:
        return f"harness profile ref is longer than {MAX_PROFILE_REF_LENGTH} characters"
    if any(ch.isspace() for ch in ref):
        return "harness profile ref must not contain whitespace"
    if ref.count("@") != 1:
        return "harness profile ref must be <id>@<version> with exactly one '@'"
    profile_id, version = ref.split("@")
    if _PROFILE_ID.fullmatch(profile_id) is None:
        return (
            "harness profile id must be 1-128 characters of a-z, 0-9, '.', '_', '-' "
            "starting with a letter or digit"
        )
    if _PINNED_VERSION.fullmatch(version) is None:
        return "harness profile version must be pinned as MAJOR.MINOR.PATCH (e.g. 1.0.0)"
    return None


def parse_harness_profile_ref(ref: str) -> tuple[str, str]:
    """Split a valid ref into ``(profile_id, version)``; ``ValueError`` otherwise."""
    error = harness_profile_ref_error(ref)
    if error is not None:
        raise ValueError(error)
    profile_id, version = ref.split("@")
    return profile_id, version
