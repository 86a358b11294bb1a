"""A run's changes as the run page shows them: each file's diff as lines, each line with
the class the stylesheet marks it by (added, deleted, hunk header, context).

The page autoescapes every line and display_text replaces every control character, a tab
included; so tabs are expanded here, before, and a line is one element, never text with
newlines in it. The id of a file's diff is changes.anchors.change_anchor of its path's
exact bytes (surrogateescape), the id the artefact links point at.
"""

from __future__ import annotations

from dataclasses import dataclass

from activity_core.changes.anchors import change_anchor
from activity_core.changes.view import ChangesView, FileChange

__all__ = ["DiffLine", "FileDisplay", "file_displays"]

TAB_WIDTH = 8


@dataclass(frozen=True)
class DiffLine:
    kind: str  # the CSS class: d-add, d-del, d-hunk, d-note, d-ctx
    text: str


@dataclass(frozen=True)
class FileDisplay:
    change: FileChange
    anchor: str
    lines: tuple[DiffLine, ...]


def _kind(line: str) -> str:
    if line.startswith("+"):
        return "d-add"
    if line.startswith("-"):
        return "d-del"
    if line.startswith("@@"):
        return "d-hunk"
    if line.startswith("\\"):
        return "d-note"  # "\ No newline at end of file"
    return "d-ctx"


def diff_lines(diff: str | None) -> tuple[DiffLine, ...]:
    """One DiffLine per line of `diff`: split at "\n" only (str.splitlines would also split
    at a form feed or U+2028 inside a line, and the rest would be read as a line of its own,
    "-" and all)."""
    if not diff:
        return ()
    lines = diff.split("\n")
    if lines[-1] == "":
        lines.pop()
    return tuple(DiffLine(_kind(line), line.expandtabs(TAB_WIDTH)) for line in lines)


def anchor_of(change: FileChange) -> str:
    path = (
        change.path_bytes.decode("utf-8", "surrogateescape") if change.path_bytes else change.path
    )
    return change_anchor(path)


def file_displays(view: ChangesView) -> list[FileDisplay]:
    return [FileDisplay(f, anchor_of(f), diff_lines(f.diff)) for f in view.files]
