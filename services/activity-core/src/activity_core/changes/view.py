"""What a run changed, as operators read it: its commits, its files with their +/- counts
and each file's unified diff, derived with git from the stored changes bundle.

Every value comes from git's machine formats, never from parsing what a user wrote:
`git log -z` with NUL-separated fields (a name or subject cannot contain a NUL), `git
diff-tree -r -z --raw` and `--numstat` (paths as NUL-terminated bytes). The patch text
is cut into one section per file at the lines that begin `diff --git `: every line of a
hunk begins with ` `, `+`, `-` or `\\`, and git quotes a path with a newline in it, so no
content or name can start a section. The sections come in the order of the raw listing
(one diff queue feeds both), which is how a section finds its file; a type change (a file
that becomes a symlink, say) is two sections, its deletion and its creation, as git
writes it.

Bounded: at most MAX_FILES files, MAX_FILE_DIFF_BYTES of one file's diff and
MAX_TOTAL_DIFF_BYTES of all of them are shown (cut at a line's end); git's own output is
read up to MAX_PATCH_READ_BYTES. Past a bound the file and the view say `truncated` and
the view's `note` says which bound. Text is decoded as UTF-8 with replacement for display
(git's bytes may be any); a path keeps its exact bytes in `FileChange.path_bytes`.

Derivation is git in a scratch repository (scratch_git.py: no hooks, no config but ours,
bounded in time); `derive` is given the `Git` that runs there (operator/changes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

__all__ = [
    "MAX_FILES",
    "MAX_FILE_DIFF_BYTES",
    "MAX_PATCH_READ_BYTES",
    "MAX_TOTAL_DIFF_BYTES",
    "Bounds",
    "ChangeStatus",
    "ChangesUnreadable",
    "ChangesView",
    "Commit",
    "Derived",
    "FileChange",
    "Git",
    "GitOutput",
    "derive",
]

MAX_FILE_DIFF_BYTES = 64 * 1024
MAX_TOTAL_DIFF_BYTES = 1024 * 1024
MAX_FILES = 300
# git's patch output is read this far at most: past it the later files show no diff.
MAX_PATCH_READ_BYTES = 16 * 1024 * 1024
# The listings (log, raw, numstat) of a bundle within its bounds are far smaller; more is a
# bundle that is not what the upload checked.
MAX_LISTING_BYTES = 4 * 1024 * 1024

ChangeStatus = Literal["added", "modified", "deleted", "renamed", "type_changed"]
_STATUS: dict[str, ChangeStatus] = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "R": "renamed",
    "T": "type_changed",
}
_SECTION = b"diff --git "
_HUNK = b"@@ "


class ChangesUnreadable(Exception):
    """git cannot derive the view from the stored bundle (the message says what failed)."""


@dataclass(frozen=True)
class GitOutput:
    data: bytes
    # the output went on past the limit asked for (data holds the first `limit` bytes)
    cut: bool


class Git(Protocol):
    """git in the scratch repository holding the bundle's objects."""

    async def output(self, args: Sequence[str], *, limit: int) -> GitOutput:
        """`git <args>`'s stdout, at most `limit` bytes; ChangesUnreadable if git fails or
        takes too long."""
        ...


@dataclass(frozen=True)
class Bounds:
    file_bytes: int = MAX_FILE_DIFF_BYTES
    total_bytes: int = MAX_TOTAL_DIFF_BYTES
    files: int = MAX_FILES
    patch_read_bytes: int = MAX_PATCH_READ_BYTES


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    author_name: str
    author_email: str
    authored_at: datetime


@dataclass(frozen=True)
class FileChange:
    path: str
    old_path: str | None
    status: ChangeStatus
    additions: int
    deletions: int
    binary: bool
    # the unified diff's hunks (from the first `@@` line); None for a binary file or one
    # past the bounds
    diff: str | None
    truncated: bool
    # the path exactly as git has it (not in the JSON: the display `path` is its UTF-8
    # reading with replacement)
    path_bytes: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class Derived:
    commits: tuple[Commit, ...]
    files: tuple[FileChange, ...]
    truncated: bool
    note: str | None


@dataclass(frozen=True)
class ChangesView:
    """`GET /ops-runs/{id}/changes`."""

    run_id: str
    attempt: int
    digest: str
    size: int
    baseline: str
    head_after: str
    stored_at: datetime
    commits: tuple[Commit, ...]
    files: tuple[FileChange, ...]
    truncated: bool
    note: str | None
    # the run's publication (POST /ops-runs/{id}/publish): null until one is asked for;
    # the run's `publication` object otherwise (publication/record.py)
    publication: dict[str, Any] | None = None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


async def _listing(git: Git, args: Sequence[str]) -> bytes:
    out = await git.output(args, limit=MAX_LISTING_BYTES)
    if out.cut:
        raise ChangesUnreadable(f"git {args[0]}: more than {MAX_LISTING_BYTES} bytes of listing")
    return out.data


async def _commits(git: Git, baseline: str, head_after: str) -> tuple[Commit, ...]:
    raw = await _listing(
        git,
        [
            "log",
            "-z",
            "--reverse",
            "--first-parent",
            "--no-color",
            "--no-decorate",
            "--format=tformat:%H%x00%an%x00%ae%x00%aI%x00%s",
            f"{baseline}..{head_after}",
        ],
    )
    fields = raw.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) % 5:
        raise ChangesUnreadable("git log: a commit record without its five fields")
    commits = []
    for i in range(0, len(fields), 5):
        sha, name, email, when, subject = fields[i : i + 5]
        try:
            authored_at = datetime.fromisoformat(when.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ChangesUnreadable(f"git log: an author date that is no date: {when!r}") from exc
        commits.append(Commit(_text(sha), _text(subject), _text(name), _text(email), authored_at))
    return tuple(commits)


@dataclass(frozen=True)
class _Entry:
    status: ChangeStatus
    path: bytes
    old_path: bytes | None


def _raw_entries(raw: bytes) -> list[_Entry]:
    """`diff-tree -r -z --raw`: `:<modes> <shas> <status>\\0<path>\\0`, two paths for a
    rename."""
    tokens = raw.split(b"\0")
    entries = []
    i = 0
    while i < len(tokens) and tokens[i]:
        meta = tokens[i]
        parts = meta.split(b" ")
        if not meta.startswith(b":") or len(parts) != 5 or not parts[4]:
            raise ChangesUnreadable(f"git diff-tree --raw: not an entry: {meta[:80]!r}")
        letter = parts[4][:1].decode("ascii", errors="replace")
        status = _STATUS.get(letter)
        if status is None:
            raise ChangesUnreadable(f"git diff-tree --raw: an unexpected status {letter!r}")
        if status == "renamed":
            if i + 2 >= len(tokens):
                raise ChangesUnreadable("git diff-tree --raw: a rename without its paths")
            entries.append(_Entry(status, tokens[i + 2], tokens[i + 1]))
            i += 3
        else:
            if i + 1 >= len(tokens):
                raise ChangesUnreadable("git diff-tree --raw: an entry without its path")
            entries.append(_Entry(status, tokens[i + 1], None))
            i += 2
    return entries


def _numstat(raw: bytes) -> list[tuple[int, int, bool, bytes]]:
    """`diff-tree -r -z --numstat`: `<added>\\t<deleted>\\t<path>\\0`, or for a rename
    `<added>\\t<deleted>\\t\\0<old>\\0<new>\\0`; `-` counts for a binary file."""
    tokens = raw.split(b"\0")
    out = []
    i = 0
    while i < len(tokens) and tokens[i]:
        parts = tokens[i].split(b"\t", 2)
        if len(parts) != 3:
            raise ChangesUnreadable(f"git diff-tree --numstat: not an entry: {tokens[i][:80]!r}")
        added, deleted, path = parts
        i += 1
        if path == b"":
            if i + 1 >= len(tokens):
                raise ChangesUnreadable("git diff-tree --numstat: a rename without its paths")
            path = tokens[i + 1]
            i += 2
        binary = added == b"-" and deleted == b"-"
        try:
            counts = (0, 0) if binary else (int(added), int(deleted))
        except ValueError as exc:
            raise ChangesUnreadable(f"git diff-tree --numstat: counts {parts[:2]!r}") from exc
        out.append((counts[0], counts[1], binary, path))
    return out


def _sections(patch: bytes) -> list[bytes]:
    """The patch cut at each line that begins `diff --git ` (see the module's docstring)."""
    starts = [0] if patch.startswith(_SECTION) else []
    at = patch.find(b"\n" + _SECTION)
    while at != -1:
        starts.append(at + 1)
        at = patch.find(b"\n" + _SECTION, at + 1)
    if patch and not starts:
        raise ChangesUnreadable("git diff-tree -p: output that is no patch")
    ends = [*starts[1:], len(patch)]
    return [patch[s:e] for s, e in zip(starts, ends, strict=True)]


def _file_hunks(sections: list[bytes], entries: list[_Entry]) -> list[bytes]:
    """Each entry's hunks, in order: a type change's two sections (deletion, creation)
    joined. Shorter than `entries` when the patch was cut."""
    out = []
    at = 0
    for entry in entries:
        if at >= len(sections):
            break
        take = 2 if entry.status == "type_changed" else 1
        out.append(b"".join(_hunks(section) for section in sections[at : at + take]))
        at += take
    return out


def _hunks(section: bytes) -> bytes:
    """A file's section from its first hunk on (its header lines are the listing's)."""
    if section.startswith(_HUNK):
        return section
    at = section.find(b"\n" + _HUNK)
    return b"" if at == -1 else section[at + 1 :]


def _cut(data: bytes, limit: int) -> bytes:
    """`data` cut to at most `limit` bytes, at the end of a line when there is one."""
    if len(data) <= limit:
        return data
    head = data[:limit]
    end = head.rfind(b"\n")
    return head[: end + 1] if end != -1 else head


async def derive(git: Git, baseline: str, head_after: str, bounds: Bounds | None = None) -> Derived:
    """The commits `baseline..head_after` (oldest first) and the files they change, with
    their diffs within `bounds`."""
    bounds = bounds or Bounds()
    commits = await _commits(git, baseline, head_after)
    span = [baseline, head_after]
    entries = _raw_entries(await _listing(git, ["diff-tree", "-r", "-z", "-M", "--raw", *span]))
    counts = _numstat(await _listing(git, ["diff-tree", "-r", "-z", "-M", "--numstat", *span]))
    if len(counts) != len(entries) or any(
        e.path != c[3] for e, c in zip(entries, counts, strict=True)
    ):
        raise ChangesUnreadable("git diff-tree: --raw and --numstat list different files")
    notes = []
    if len(entries) > bounds.files:
        notes.append(f"{len(entries)} files changed: the first {bounds.files} are shown")
        entries = entries[: bounds.files]
    patch = await git.output(
        ["diff-tree", "-r", "-M", "-p", "--no-color", "--no-ext-diff", "--no-textconv", *span],
        limit=bounds.patch_read_bytes,
    )
    sections = _file_hunks(_sections(patch.data), entries)
    if not patch.cut and len(sections) != len(entries):
        raise ChangesUnreadable("git diff-tree -p: not the files of its listing")
    if patch.cut:
        notes.append(
            f"git's patch is over {bounds.patch_read_bytes} bytes: the diffs of the later "
            "files are not shown"
        )
    budget = bounds.total_bytes
    files = []
    over_file = over_total = False
    for index, entry in enumerate(entries):
        added, deleted, binary, _ = counts[index]
        diff: str | None = None
        truncated = False
        if not binary:
            # the last section of a cut read may be partial: it is shown as cut
            whole = index < len(sections) and not (patch.cut and index == len(sections) - 1)
            hunks = sections[index] if index < len(sections) else b""
            shown = _cut(hunks, min(bounds.file_bytes, budget))
            if len(shown) < len(hunks):
                truncated = True
                if len(hunks) > bounds.file_bytes and budget >= bounds.file_bytes:
                    over_file = True
                else:
                    over_total = True
            if not whole:
                truncated = True
            # once the total is reached no later diff is begun (not even its first line)
            budget = 0 if over_total else budget - len(shown)
            diff = _text(shown) if shown or not truncated else None
        files.append(
            FileChange(
                path=_text(entry.path),
                old_path=None if entry.old_path is None else _text(entry.old_path),
                status=entry.status,
                additions=added,
                deletions=deleted,
                binary=binary,
                diff=diff,
                truncated=truncated,
                path_bytes=entry.path,
            )
        )
    if over_file:
        notes.insert(0, f"a file's diff is shown up to {bounds.file_bytes} bytes")
    if over_total:
        notes.insert(0, f"the diffs are shown up to {bounds.total_bytes} bytes in all")
    truncated_view = bool(notes) or any(f.truncated for f in files)
    return Derived(tuple(commits), tuple(files), truncated_view, "; ".join(notes) or None)
