"""The changes bundle's header (activity_core.changes.bundle_format): exactly the shape of
docs/changes.md, everything else refused with a reason."""

from __future__ import annotations

import pytest

from activity_core.changes.anchors import change_anchor
from activity_core.changes.bundle_format import (
    MAX_HEADER_BYTES,
    ChangesInvalid,
    parse_bundle_header,
)

A = "a" * 40
B = "b" * 40
REF = "refs/heads/rein/0b9e7a52-64a1-4bd6-9f39-0d3c3b1e2f10/1"
PACK = b"PACK\x00\x00\x00\x02"


def _bundle(*lines: str, pack: bytes = PACK) -> bytes:
    return ("\n".join(lines) + "\n\n").encode() + pack


def test_a_v2_header() -> None:
    data = _bundle("# v2 git bundle", f"-{A}", f"{B} {REF}")
    header = parse_bundle_header(data)
    assert (header.version, header.object_format) == (2, "sha1")
    assert header.prerequisites == (A,)
    assert header.refs == ((B, REF),)
    assert (header.baseline, header.tip, header.ref_name) == (A, B, REF)
    assert data[header.pack_offset :] == PACK


def test_a_v3_sha256_header() -> None:
    a, b = "a" * 64, "b" * 64
    header = parse_bundle_header(
        _bundle("# v3 git bundle", "@object-format=sha256", f"-{a}", f"{b} {REF}")
    )
    assert (header.version, header.object_format, header.baseline, header.tip) == (
        3,
        "sha256",
        a,
        b,
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not a git bundle"),
        (b"PK\x03\x04 a zip", "not a git bundle"),
        (_bundle("# v4 git bundle", f"-{A}", f"{B} {REF}"), "not a git bundle"),
        (_bundle("# v3 git bundle", f"-{A}", f"{B} {REF}"), "without @object-format"),
        (_bundle("# v3 git bundle", "@filter=blob:none", f"-{A}", f"{B} {REF}"), "capability"),
        (_bundle("# v3 git bundle", "@object-format=md5", f"-{A}", f"{B} {REF}"), "format"),
        (_bundle("# v2 git bundle", f"{B} {REF}"), "0 prerequisites"),
        (_bundle("# v2 git bundle", f"-{A}", f"-{B}", f"{B} {REF}"), "2 prerequisites"),
        (_bundle("# v2 git bundle", f"-{A} subject", f"{B} {REF}"), "comment"),
        (_bundle("# v2 git bundle", f"-{A}"), "0 refs"),
        (_bundle("# v2 git bundle", f"-{A}", f"{B} {REF}", f"{A} refs/x"), "2 refs"),
        (_bundle("# v2 git bundle", f"-{A.upper()}", f"{B} {REF}"), "lowercase"),
        (_bundle("# v2 git bundle", f"-{A[:-1]}", f"{B} {REF}"), "lowercase"),
        (_bundle("# v2 git bundle", f"-{'a' * 64}", f"{B} {REF}"), "lowercase"),
        (_bundle("# v2 git bundle", f"-{A}", f"{B} HEAD"), "ref line"),
        (_bundle("# v2 git bundle", f"-{A}", f"{B}"), "ref line"),
        (_bundle("# v2 git bundle", f"-{A}", f"{B} refs/a\tb"), "ref line"),
        (_bundle("# v2 git bundle", f"{B} {REF}", f"-{A}"), "after a ref"),
        (_bundle("# v2 git bundle", f"-{A}", f"{B} {REF}", pack=b"NOPE"), "PACK"),
        (b"# v2 git bundle\n" + b"x" * MAX_HEADER_BYTES, "does not end"),
        (b"# v2 git bundle\n-" + b"a" * 40, "does not end"),
    ],
)
def test_anything_else_is_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ChangesInvalid) as caught:
        parse_bundle_header(data)
    assert reason in caught.value.reason


def test_change_anchor_is_a_short_hash_of_the_path_bytes() -> None:
    assert change_anchor("docs/a.md") == change_anchor("docs/a.md")
    assert change_anchor("docs/a.md") != change_anchor("docs/b.md")
    anchor = change_anchor("weird/\udcff<name>.md")  # a surrogate-escaped byte is fine
    assert anchor.startswith("change-")
    assert len(anchor) == len("change-") + 12
    assert all(c in "0123456789abcdef" for c in anchor.removeprefix("change-"))
