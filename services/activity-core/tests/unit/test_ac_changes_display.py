"""How the run page cuts a diff into marked lines (ui/changes_display.py): at newlines
only, whatever else a line holds; tabs expanded (the page shows no control character);
a file's id from its path's exact bytes."""

from __future__ import annotations

from activity_core.changes.anchors import change_anchor
from activity_core.changes.view import FileChange
from activity_core.ui.changes_display import DiffLine, anchor_of, diff_lines


def test_a_diff_is_cut_at_newlines_only_and_each_line_marked_by_its_first_character() -> None:
    diff = (
        "@@ -1,2 +1,2 @@\n ctx\f-not a deletion\n-old\u2028+not an addition\n+\tnew\n"
        "\\ No newline at end of file\n"
    )
    assert diff_lines(diff) == (
        DiffLine("d-hunk", "@@ -1,2 +1,2 @@"),
        DiffLine("d-ctx", " ctx\f-not a deletion"),
        DiffLine("d-del", "-old\u2028+not an addition"),
        DiffLine("d-add", "+       new"),
        DiffLine("d-note", "\\ No newline at end of file"),
    )
    assert diff_lines(None) == () and diff_lines("") == ()


def test_a_files_id_is_the_anchor_of_its_exact_bytes() -> None:
    raw = b"caf\xe9.txt"
    change = FileChange(
        path="caf\ufffd.txt",
        old_path=None,
        status="added",
        additions=1,
        deletions=0,
        binary=False,
        diff="",
        truncated=False,
        path_bytes=raw,
    )
    assert anchor_of(change) == change_anchor(raw.decode("utf-8", "surrogateescape"))
    assert anchor_of(change) != change_anchor("caf\ufffd.txt")
