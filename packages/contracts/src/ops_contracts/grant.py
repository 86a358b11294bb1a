"""Repository grant v1: the static authority a run has to change a repository.

A grant is declared in an activity definition, validated at definition sync and
again over the whole emission batch, copied unchanged onto the queued run, and
enforced by the worker. It is never template-rendered, never inferred, and
never merged into ``execution_refs``.

Shape (exactly these four fields, at both levels; anything else is refused)::

    {"version": "1",
     "allowed_paths": ["docs/", "README.md"],
     "commit_count": {"min": 1, "max": 1},
     "publish": false}

- ``version`` is the JSON string ``"1"``. A bare ``1`` (what YAML makes of
  ``version: 1``) is an ambiguous scalar type and is refused, not coerced.
- ``allowed_paths`` is a list (not a string) of 1-100 unique patterns.
- ``commit_count`` bounds are integers, never booleans, strings or floats,
  with ``1 <= min <= max <= 32``.
- ``publish`` is the boolean ``false``; v1 grants never permit publication.

Pattern rules (a pattern is a repository-relative POSIX path):

- non-empty and at most 256 characters;
- no leading ``/`` (absolute) or ``~`` (home expansion);
- no ``\\`` (a Windows separator that POSIX tools treat as a name character);
- no control characters (NUL included) and no unpaired surrogates;
- no drive prefix such as ``C:``;
- no empty segment (``a//b``) except the single trailing ``/`` of a directory;
- no ``.`` or ``..`` segment, so a grant can never climb out of the checkout;
- no ``.git`` segment (compared case-insensitively): repository metadata,
  hooks and config are never grantable. ``.gitignore``, ``.gitmodules`` and
  other names that merely start with ``.git`` are ordinary files;
- ``**`` only as a whole segment (``docs/**.md`` would read as recursive but
  is not, so it is refused rather than guessed at).

Pattern semantics:

- a pattern ending in ``/`` is a directory and matches every path beneath it
  (not the directory name itself);
- otherwise ``*`` matches any run of characters and ``?`` exactly one character,
  both within a single segment; a whole-segment ``**`` matches any number of
  segments (zero or more; at the end of a pattern, one or more, so ``docs/**``
  means the same as ``docs/``, and ``**/`` like ``**`` matches everything);
- a pattern without wildcards matches exactly one path;
- matching is case-sensitive, and a path with a ``.git`` segment (in any case)
  is never allowed whatever the patterns say.

A concrete touched path follows the same rules except that it may not end in
``/``; ``*`` and ``?`` in it are ordinary characters.

Identity: the worker reports :func:`grant_id` and :func:`acceptance_policy_id`
in ``result.repository_transaction``; activity-core recomputes both from the
queued grant with these same functions and refuses a mismatch as
``evidence_conflict``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ops_contracts.canonical import digest_hex

__all__ = [
    "GRANT_FIELDS",
    "MAX_ALLOWED_PATHS",
    "MAX_COMMIT_COUNT",
    "MAX_PATH_LENGTH",
    "MIN_COMMIT_COUNT",
    "CommitCount",
    "GrantFieldError",
    "GrantValidationError",
    "RepositoryGrantV1",
    "acceptance_policy_id",
    "grant_id",
    "parse_repository_grant",
    "path_allowed",
    "path_pattern_error",
    "repository_path_error",
]

GRANT_FIELDS: tuple[str, ...] = ("version", "allowed_paths", "commit_count", "publish")
_COMMIT_COUNT_FIELDS: tuple[str, ...] = ("min", "max")
MAX_ALLOWED_PATHS = 100
MAX_PATH_LENGTH = 256
MIN_COMMIT_COUNT = 1
MAX_COMMIT_COUNT = 32

GRANT_ID_PREFIX = "rg1-"
GRANT_ID_DOMAIN = "ops-repository-grant/v1"
ACCEPTANCE_POLICY_ID_PREFIX = "ap1-"
ACCEPTANCE_POLICY_ID_DOMAIN = "ops-acceptance-policy/v1"

# The path that names the grant value itself (when it is not an object at all).
ROOT_PATH = "$"

_DRIVE_PREFIX = re.compile(r"[A-Za-z]:")
_WILDCARD_CHARS = frozenset("*?")


# --- errors -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrantFieldError:
    """One problem with a grant.

    ``path`` locates it: ``version``, ``allowed_paths[2]``, ``commit_count.max``,
    ``publish``, the name of an unknown key (``commit_count.step`` when nested),
    or ``$`` for the grant value itself.
    """

    path: str
    message: str


class GrantValidationError(ValueError):
    """A grant was refused; ``errors`` lists every problem found, not just the first."""

    def __init__(self, errors: Sequence[GrantFieldError]) -> None:
        self.errors: list[GrantFieldError] = list(errors)
        details = "; ".join(f"{error.path}: {error.message}" for error in self.errors)
        super().__init__(f"invalid repository grant v1: {details}")


# --- path rules ---------------------------------------------------------------


def path_pattern_error(pattern: object) -> str | None:
    """Why ``pattern`` is not a valid ``allowed_paths`` entry, or ``None``."""
    return _path_error(pattern, is_pattern=True)


def repository_path_error(path: object) -> str | None:
    """Why ``path`` is not a valid concrete repository-relative file path, or ``None``."""
    return _path_error(path, is_pattern=False)


def _path_error(value: object, *, is_pattern: bool) -> str | None:
    noun = "pattern" if is_pattern else "path"
    if not isinstance(value, str):
        return f"{noun} must be a string"
    if not value:
        return f"{noun} must not be empty"
    if len(value) > MAX_PATH_LENGTH:
        return f"{noun} must be at most {MAX_PATH_LENGTH} characters"
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        return f"{noun} must not contain control characters or unpaired surrogates"
    if value.startswith("/"):
        return f"{noun} must be repository-relative, not start with '/'"
    if value.startswith("~"):
        return f"{noun} must not start with '~'"
    if "\\" in value:
        return f"{noun} must use '/' as separator; '\\' is not allowed"
    if _DRIVE_PREFIX.match(value):
        return f"{noun} must not start with a drive prefix such as 'C:'"
    is_directory = value.endswith("/")
    if is_directory and not is_pattern:
        return "path names a file and must not end with '/'"
    body = value[:-1] if is_directory else value
    for segment in body.split("/"):
        if not segment:
            return f"{noun} must not contain an empty segment"
        if segment in (".", ".."):
            return f"{noun} must not contain a '.' or '..' segment"
        if segment.lower() == ".git":
            return f"{noun} must not contain a .git segment"
        if is_pattern and "**" in segment and segment != "**":
            return "'**' must be a whole path segment"
    return None


# --- the model ------------------------------------------------------------------


class CommitCount(BaseModel):
    """How many commits the run must produce: ``1 <= min <= max <= 32``."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    min: int = Field(ge=MIN_COMMIT_COUNT, le=MAX_COMMIT_COUNT)
    max: int = Field(ge=MIN_COMMIT_COUNT, le=MAX_COMMIT_COUNT)

    @model_validator(mode="after")
    def _ordered(self) -> CommitCount:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class RepositoryGrantV1(BaseModel):
    """An admitted repository grant v1 (see the module docstring for the rules).

    Every way of building one (``parse_repository_grant``, ``model_validate``,
    ``model_validate_json``, the constructor, or use as a field of another
    model) runs the same full rule check, so an instance is always admitted.
    Through pydantic the refusal surfaces as a ``ValidationError`` whose single
    error carries the :class:`GrantValidationError` in ``ctx["error"]``.
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    version: Literal["1"]
    # A tuple keeps the frozen model immutable all the way down; as_admitted()
    # gives the list form back.
    allowed_paths: tuple[str, ...] = Field(min_length=1, max_length=MAX_ALLOWED_PATHS)
    commit_count: CommitCount
    publish: Literal[False]

    @model_validator(mode="before")
    @classmethod
    def _admit(cls, data: Any) -> Any:
        errors = _grant_errors(data)
        if errors:
            raise GrantValidationError(errors)
        return {
            "version": "1",
            "allowed_paths": tuple(data["allowed_paths"]),
            "commit_count": CommitCount(
                min=data["commit_count"]["min"], max=data["commit_count"]["max"]
            ),
            "publish": False,
        }

    def as_admitted(self) -> dict[str, object]:
        """The grant as queued and returned to claimers: plain JSON, input order kept."""
        return {
            "version": self.version,
            "allowed_paths": list(self.allowed_paths),
            "commit_count": {"min": self.commit_count.min, "max": self.commit_count.max},
            "publish": self.publish,
        }


def parse_repository_grant(raw: object) -> RepositoryGrantV1:
    """Admit a parsed JSON/YAML value as a grant, or raise :class:`GrantValidationError`."""
    errors = _grant_errors(raw)
    if errors:
        raise GrantValidationError(errors)
    return RepositoryGrantV1.model_validate(raw)


def _grant_errors(raw: object) -> list[GrantFieldError]:
    # Hand-written rather than left to pydantic so that every problem is
    # reported at once, with a path a definition author can find, and so that
    # "bool is not an int" and "str is not an int" hold regardless of mode.
    if not isinstance(raw, Mapping):
        return [GrantFieldError(ROOT_PATH, "grant must be an object")]
    errors = _key_errors(raw, GRANT_FIELDS, prefix="")
    if "version" in raw:
        errors.extend(_version_errors(raw["version"]))
    if "allowed_paths" in raw:
        errors.extend(_allowed_paths_errors(raw["allowed_paths"]))
    if "commit_count" in raw:
        errors.extend(_commit_count_errors(raw["commit_count"]))
    if "publish" in raw:
        errors.extend(_publish_errors(raw["publish"]))
    return errors


def _key_errors(
    raw: Mapping[Any, Any], expected: tuple[str, ...], *, prefix: str
) -> list[GrantFieldError]:
    errors = [
        GrantFieldError(f"{prefix}{key}", "unknown field")
        for key in raw
        if not isinstance(key, str) or key not in expected
    ]
    errors.extend(
        GrantFieldError(f"{prefix}{name}", "required field is missing")
        for name in expected
        if name not in raw
    )
    return errors


def _version_errors(version: object) -> list[GrantFieldError]:
    if isinstance(version, str) and version == "1":
        return []
    if isinstance(version, int | float) and not isinstance(version, bool) and version == 1:
        message = 'must be the string "1"; a bare number is ambiguous, quote it'
    else:
        message = 'unsupported version; only "1" is accepted'
    return [GrantFieldError("version", message)]


def _allowed_paths_errors(allowed_paths: object) -> list[GrantFieldError]:
    # A str is a Sequence too, and "docs/" would otherwise read as five patterns.
    if isinstance(allowed_paths, str) or not isinstance(allowed_paths, list | tuple):
        return [GrantFieldError("allowed_paths", "must be a list of path patterns")]
    if not allowed_paths:
        return [GrantFieldError("allowed_paths", "must contain at least one pattern")]
    if len(allowed_paths) > MAX_ALLOWED_PATHS:
        # Item checks are skipped: the work stays bounded however long the list.
        return [
            GrantFieldError("allowed_paths", f"must contain at most {MAX_ALLOWED_PATHS} patterns")
        ]
    errors: list[GrantFieldError] = []
    first_seen: dict[str, int] = {}
    for index, pattern in enumerate(allowed_paths):
        path = f"allowed_paths[{index}]"
        problem = path_pattern_error(pattern)
        if problem is not None:
            errors.append(GrantFieldError(path, problem))
        elif pattern in first_seen:
            errors.append(
                GrantFieldError(path, f"duplicate of allowed_paths[{first_seen[pattern]}]")
            )
        else:
            first_seen[pattern] = index
    return errors


def _commit_count_errors(commit_count: object) -> list[GrantFieldError]:
    if not isinstance(commit_count, Mapping):
        return [GrantFieldError("commit_count", "must be an object with min and max")]
    errors = _key_errors(commit_count, _COMMIT_COUNT_FIELDS, prefix="commit_count.")
    bounds: dict[str, int] = {}
    for name in _COMMIT_COUNT_FIELDS:
        if name not in commit_count:
            continue
        value = commit_count[name]
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(GrantFieldError(f"commit_count.{name}", "must be an integer"))
        elif not MIN_COMMIT_COUNT <= value <= MAX_COMMIT_COUNT:
            errors.append(
                GrantFieldError(
                    f"commit_count.{name}",
                    f"must be between {MIN_COMMIT_COUNT} and {MAX_COMMIT_COUNT}",
                )
            )
        else:
            bounds[name] = value
    if len(bounds) == 2 and bounds["min"] > bounds["max"]:
        errors.append(
            GrantFieldError(
                "commit_count", f"min ({bounds['min']}) must not exceed max ({bounds['max']})"
            )
        )
    return errors


def _publish_errors(publish: object) -> list[GrantFieldError]:
    if publish is False:
        return []
    if publish is True:
        return [GrantFieldError("publish", "publication is not permitted by grant v1")]
    return [GrantFieldError("publish", "must be the boolean false")]


# --- identity -------------------------------------------------------------------


def grant_id(grant: RepositoryGrantV1) -> str:
    """``"rg1-"`` + digest of the admitted grant, exactly as queued.

    ``digest_hex(grant.as_admitted(), domain="ops-repository-grant/v1")``: the
    canonical JSON sorts object keys, so key order in the definition file does
    not matter, but ``allowed_paths`` order does, because the admitted grant is
    copied unchanged and this id names that exact copy.
    """
    return GRANT_ID_PREFIX + digest_hex(grant.as_admitted(), domain=GRANT_ID_DOMAIN)


def acceptance_policy_id(grant: RepositoryGrantV1) -> str:
    """``"ap1-"`` + digest of what the grant permits, independent of how it is written.

    ``digest_hex({"allowed_paths": sorted(set(allowed_paths)), "commit_count":
    {"min": m, "max": n}, "publish": False}, domain="ops-acceptance-policy/v1")``,
    sorting by code point. Two grants that list the same patterns in another
    order have different grant ids but the same acceptance policy.
    """
    policy = {
        "allowed_paths": sorted(set(grant.allowed_paths)),
        "commit_count": {"min": grant.commit_count.min, "max": grant.commit_count.max},
        "publish": False,
    }
    return ACCEPTANCE_POLICY_ID_PREFIX + digest_hex(policy, domain=ACCEPTANCE_POLICY_ID_DOMAIN)


# --- matching -------------------------------------------------------------------

# Internal segment token for "any number of segments"; a real path segment can
# equal "**" only literally, and then it is matched by it like anything else.
_ANY_SEGMENTS = "**"


def path_allowed(grant: RepositoryGrantV1, path: str) -> bool:
    """Whether the grant lets a run touch ``path``.

    ``False`` for any path that is not a valid concrete repository path, which
    includes every path with a ``.git`` segment.
    """
    if repository_path_error(path) is not None:
        return False
    segments = tuple(path.split("/"))
    return any(_segments_match(_pattern_segments(p), segments) for p in grant.allowed_paths)


@lru_cache(maxsize=4096)
def _pattern_segments(pattern: str) -> tuple[str, ...]:
    is_directory = pattern.endswith("/")
    segments = (pattern[:-1] if is_directory else pattern).split("/")
    if is_directory:
        segments.append(_ANY_SEGMENTS)
    if segments[-1] == _ANY_SEGMENTS:
        # A trailing ** needs at least one segment: "docs/**" is what is inside
        # docs, not a file called docs.
        segments[-1:] = ["*", _ANY_SEGMENTS]
    return tuple(segments)


def _segments_match(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return _star_match(pattern, path, _ANY_SEGMENTS, _glob_segment)


def _glob_segment(pattern: str, segment: str) -> bool:
    # One level down, over characters: "*" is the star, "?" any one character.
    if _WILDCARD_CHARS.isdisjoint(pattern):
        return pattern == segment
    return _star_match(pattern, segment, "*", _glob_character)


def _glob_character(pattern: str, character: str) -> bool:
    return pattern in ("?", character)


def _star_match(
    pattern: Sequence[str],
    subject: Sequence[str],
    star: str,
    matches: Callable[[str, str], bool],
) -> bool:
    """Whether `subject` matches `pattern`, item by item: `star` stands for any run of
    items (none included), any other pattern item for one item it `matches`.

    Greedy matching with backtracking to the last star only: O(len * len) however the
    pattern is written, unlike a regex translation, which can backtrack exponentially on
    patterns such as "**/a/**/a/**/a/…".
    """
    p = i = 0
    last_star = -1
    resume = 0
    while i < len(subject):
        if p < len(pattern) and pattern[p] == star:
            last_star, resume = p, i
            p += 1
        elif p < len(pattern) and matches(pattern[p], subject[i]):
            p += 1
            i += 1
        elif last_star >= 0:
            p = last_star + 1
            resume += 1
            i = resume
        else:
            return False
    while p < len(pattern) and pattern[p] == star:
        p += 1
    return p == len(pattern)
