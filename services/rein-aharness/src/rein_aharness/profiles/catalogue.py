"""Load the catalogue file (`REIN_AHARNESS_PROFILES`) and resolve pinned refs strictly.

Resolution never guesses: a ref that is absent, malformed, unpinned (`harness.x`,
`harness.x@1`, `harness.x@^1.0.0`, `harness.x@latest`) or unknown is a `ProfileRefusal`.
There is no default profile, no "newest version" and no fallback to `approach_hint`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ops_contracts import harness_profile_ref_error
from rein_aharness.profiles.model import (
    CatalogueFile,
    HarnessProfile,
    LegacyApproach,
    SandboxProfile,
)

__all__ = [
    "BUILTIN_SANDBOXES",
    "CatalogueError",
    "ProfileCatalogue",
    "ProfileRefusal",
    "load_catalogue",
]

# Present in every catalogue; a catalogue's `sandbox_profiles` may redefine them (to tune
# the bounds, say) and add others (a bwrap profile with `network: true`).
BUILTIN_SANDBOXES: Mapping[str, SandboxProfile] = {
    "profile.bwrap-local": SandboxProfile(kind="bwrap"),
    "profile.none-local": SandboxProfile(kind="none"),
}

MAX_CATALOGUE_BYTES = 1024 * 1024
_SHOWN_REF_CHARS = 80


class CatalogueError(Exception):
    """The catalogue file cannot be used; one line saying where and why."""


class ProfileRefusal(Exception):
    """A run's profile ref cannot be resolved; `reason` is the operator-facing text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a repeated key instead of keeping the last."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _shown(ref: object) -> str:
    text = repr(ref)
    return text if len(text) <= _SHOWN_REF_CHARS else text[: _SHOWN_REF_CHARS - 3] + "..."


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "catalogue"


class ProfileCatalogue:
    """The pinned profiles by ref, the legacy approach table by `approach_hint`, and the
    sandbox profiles they run in (every name a profile uses exists: checked at load)."""

    def __init__(
        self,
        profiles: Mapping[str, HarnessProfile],
        legacy_approaches: Mapping[str, LegacyApproach] | None = None,
        sandboxes: Mapping[str, SandboxProfile] | None = None,
    ) -> None:
        self._profiles = dict(profiles)
        self._legacy = dict(legacy_approaches or {})
        self._sandboxes = {**BUILTIN_SANDBOXES, **(sandboxes or {})}
        for where, name in self._sandbox_uses():
            if name not in self._sandboxes:
                raise CatalogueError(f"{where}: sandbox_profile {name!r} is not defined")

    def _sandbox_uses(self) -> list[tuple[str, str]]:
        uses = [(f"profile {ref}", p.sandbox_profile) for ref, p in self._profiles.items()]
        uses += [
            (f"legacy_approaches.{hint}", a.sandbox_profile) for hint, a in self._legacy.items()
        ]
        return uses

    def sandbox(self, name: str) -> SandboxProfile:
        """The sandbox profile `name` (it exists for every profile of this catalogue)."""
        return self._sandboxes[name]

    def profile_sandbox_names(self) -> frozenset[str]:
        return frozenset(profile.sandbox_profile for profile in self._profiles.values())

    def legacy_sandbox_names(self) -> frozenset[str]:
        return frozenset(approach.sandbox_profile for approach in self._legacy.values())

    @classmethod
    def from_data(cls, data: object) -> ProfileCatalogue:
        """Validate a parsed YAML/JSON document; CatalogueError names the first problem."""
        try:
            parsed = CatalogueFile.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            message = str(first["msg"]).removeprefix("Value error, ").splitlines()[0]
            raise CatalogueError(f"{_location(tuple(first['loc']))}: {message}") from None
        profiles: dict[str, HarnessProfile] = {}
        for index, profile in enumerate(parsed.profiles):
            if profile.ref in profiles:
                raise CatalogueError(f"profiles[{index}]: {profile.ref} is listed twice")
            profiles[profile.ref] = profile
        return cls(profiles, parsed.legacy_approaches, parsed.sandbox_profiles)

    @classmethod
    def from_yaml(cls, text: str) -> ProfileCatalogue:
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or "unparsable"
            raise CatalogueError(f"not valid YAML{where}: {problem}") from None
        return cls.from_data(data)

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(sorted(self._profiles))

    def resolve(self, ref: object) -> HarnessProfile:
        """The profile `ref` names exactly; ProfileRefusal otherwise."""
        if ref is None:
            raise ProfileRefusal("the run carries no harness_profile_ref")
        problem = harness_profile_ref_error(ref)
        if problem is not None:
            raise ProfileRefusal(f"harness_profile_ref {_shown(ref)} refused: {problem}")
        assert isinstance(ref, str)  # harness_profile_ref_error refuses anything else
        profile = self._profiles.get(ref)
        if profile is None:
            raise ProfileRefusal(
                f"harness_profile_ref {_shown(ref)} is not in the profile catalogue"
            )
        return profile

    def legacy_approach(self, approach_hint: str | None) -> LegacyApproach | None:
        if approach_hint is None:
            return None
        return self._legacy.get(approach_hint)


def load_catalogue(path: Path) -> ProfileCatalogue:
    """Read and validate the catalogue file; CatalogueError with one line otherwise."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CATALOGUE_BYTES + 1)
    except OSError as exc:
        raise CatalogueError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_CATALOGUE_BYTES:
        raise CatalogueError(f"larger than {MAX_CATALOGUE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CatalogueError("not UTF-8 text") from None
    return ProfileCatalogue.from_yaml(text)
