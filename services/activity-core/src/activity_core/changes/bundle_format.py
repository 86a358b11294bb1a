"""The header of a changes bundle (docs/changes.md), read without git.

A git bundle is a text header and a pack. The header this service takes is narrower than
what git accepts, and everything outside it is refused before git sees a byte:

    # v2 git bundle                  (SHA-1)   |  # v3 git bundle
                                               |  @object-format=sha256
    -<baseline>                      exactly one prerequisite, no comment
    <head_after> <ref>               exactly one ref
    <empty line>
    PACK...                          the pack, from `pack_offset` on

Ids are lowercase hex of the object format's length. The header is bounded
(`MAX_HEADER_BYTES`): a bundle without its empty line within it is not one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MAX_HEADER_BYTES",
    "BundleHeader",
    "ChangesInvalid",
    "ObjectFormat",
    "parse_bundle_header",
]

# The longest header this format can have is about 250 bytes (a v3 signature, its
# capability, a SHA-256 prerequisite and a ref line naming a run and an attempt).
MAX_HEADER_BYTES = 1024

ObjectFormat = Literal["sha1", "sha256"]

_V2 = b"# v2 git bundle"
_V3 = b"# v3 git bundle"
_HEX_LENGTH: dict[ObjectFormat, int] = {"sha1": 40, "sha256": 64}
_LOWER_HEX = re.compile(rb"[0-9a-f]+")
# A ref name as git would write it for us: printable ASCII, no space; the verifier then
# compares it with the one ref name the run's attempt may have.
_REF_NAME = re.compile(rb"refs/[\x21-\x7e]{1,250}")


class ChangesInvalid(Exception):
    """A changes bundle that is not what a run may hand over; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class BundleHeader:
    version: Literal[2, 3]
    object_format: ObjectFormat
    prerequisites: tuple[str, ...]
    refs: tuple[tuple[str, str], ...]  # (object id, ref name)
    pack_offset: int

    @property
    def baseline(self) -> str:
        return self.prerequisites[0]

    @property
    def tip(self) -> str:
        return self.refs[0][0]

    @property
    def ref_name(self) -> str:
        return self.refs[0][1]


def parse_bundle_header(data: bytes) -> BundleHeader:
    """The header of `data`, or ChangesInvalid naming the first thing wrong with it."""
    end = data.find(b"\n\n", 0, MAX_HEADER_BYTES + 1)
    if end < 0:
        if data.startswith((_V2 + b"\n", _V3 + b"\n")):
            raise ChangesInvalid("the bundle's header does not end within 1024 bytes")
        raise ChangesInvalid("not a git bundle (no `# v2 git bundle` or `# v3` signature)")
    lines = data[:end].split(b"\n")
    signature, rest = lines[0], lines[1:]
    if signature == _V2:
        version: Literal[2, 3] = 2
        object_format: ObjectFormat = "sha1"
    elif signature == _V3:
        version = 3
        object_format, rest = _capabilities(rest)
    else:
        raise ChangesInvalid("not a git bundle (no `# v2 git bundle` or `# v3` signature)")
    prerequisites: list[str] = []
    refs: list[tuple[str, str]] = []
    for line in rest:
        if line.startswith(b"-"):
            if refs:
                raise ChangesInvalid("a prerequisite after a ref line")
            if b" " in line:
                raise ChangesInvalid("the prerequisite line has a comment; it must be -<baseline>")
            prerequisites.append(_object_id(line[1:], object_format, "prerequisite"))
        elif line.startswith(b"@"):
            raise ChangesInvalid("a capability line after the signature's capabilities")
        else:
            oid, sep, name = line.partition(b" ")
            if not sep or _REF_NAME.fullmatch(name) is None:
                raise ChangesInvalid("a ref line is not `<id> refs/...`")
            refs.append((_object_id(oid, object_format, "ref"), name.decode("ascii")))
    if len(prerequisites) != 1:
        raise ChangesInvalid(
            f"the bundle has {len(prerequisites)} prerequisites; it must have exactly one "
            "(the baseline)"
        )
    if len(refs) != 1:
        raise ChangesInvalid(f"the bundle has {len(refs)} refs; it must have exactly one")
    pack_offset = end + 2
    if not data.startswith(b"PACK", pack_offset):
        raise ChangesInvalid("the bundle's pack does not start with a PACK signature")
    return BundleHeader(
        version=version,
        object_format=object_format,
        prerequisites=tuple(prerequisites),
        refs=tuple(refs),
        pack_offset=pack_offset,
    )


def _capabilities(lines: list[bytes]) -> tuple[ObjectFormat, list[bytes]]:
    """A v3 bundle's capability lines: exactly `@object-format=sha1|sha256`, nothing else
    (a `@filter` bundle is partial, so it could not be diffed)."""
    object_format: ObjectFormat | None = None
    index = 0
    while index < len(lines) and lines[index].startswith(b"@"):
        key, _, value = lines[index][1:].partition(b"=")
        if key != b"object-format" or object_format is not None:
            raise ChangesInvalid(f"unknown bundle capability {_show(lines[index])}")
        if value == b"sha256":
            object_format = "sha256"
        elif value == b"sha1":
            object_format = "sha1"
        else:
            raise ChangesInvalid(f"unknown object format {_show(value)}")
        index += 1
    if object_format is None:
        raise ChangesInvalid("a v3 bundle without @object-format")
    return object_format, lines[index:]


def _object_id(raw: bytes, object_format: ObjectFormat, what: str) -> str:
    if len(raw) != _HEX_LENGTH[object_format] or _LOWER_HEX.fullmatch(raw) is None:
        raise ChangesInvalid(f"the {what}'s object id is not a lowercase {object_format} id")
    return raw.decode("ascii")


def _show(raw: bytes) -> str:
    """A bounded, printable rendering of bytes from a hostile header, for a reason."""
    return repr(raw[:64].decode("ascii", "backslashreplace"))
