"""The docs name only what exists: links, files, environment variables and commands.

A newcomer follows the README to a page, and the page to a file, a setting or a command.
Each of those is checked against the tree as it is, so a rename or a removed setting that
forgets its docs fails here instead of in front of a reader:

- every relative link (and image) resolves to a tracked file or folder, and its `#anchor`,
  if any, to a heading of the target (GitHub's slugs);
- every backticked repository path (`services/…`, `docs/…`, `./scripts/test`, or any
  `name/…/file.ext`) is a tracked file or folder (a short path such as `queue/claim.py`
  may be the tail of one);
- every environment variable of ours (`ACTIVITY_CORE_*`, `REIN_AHARNESS_*`, `REIN_*`, `OPS_*`,
  `TEMPORAL_*`, …) is read somewhere in the code or the manifests;
- every `activity-core`, `rein-aharness` and `ops-demo` command in a shell block parses:
  its subcommands exist (argparse answers `--help` for them) and each option it passes is
  one that some level of that command offers.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The pages a reader walks: the front page, the docs, and every README beside the code.
DOC_GLOBS = ("README.md", "docs/*.md", "*/README.md", "*/*/README.md")

# Our variables; a trailing `_` (`ACTIVITY_CORE_*`, a family) is a prefix, not a name.
ENV_VAR = re.compile(
    r"(?<![A-Za-z0-9_$])((?:ACTIVITY_CORE|REIN_AHARNESS|REIN|OPS|TEMPORAL|FORGEJO|STATE_HUB)"
    r"_[A-Z0-9_]*[A-Z0-9])(?![A-Za-z0-9_*])"
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
TOP_DIRS = (
    "services/",
    "packages/",
    "deploy/",
    "docs/",
    "demo/",
    "bench/",
    "examples/",
    "scripts/",
    "tests-e2e/",
    ".ci/",
)
FILE_EXTENSIONS = (".py", ".md", ".yaml", ".yml", ".sql", ".sh", ".toml", ".json", ".png")
# Paths the docs name that a running service creates, not files of this repository.
RUNTIME_PATHS = frozenset(
    {
        "close-outbox/outbox.json",
        "close-outbox/ledger",
    }
)


@functools.cache
def tracked_files() -> tuple[str, ...]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return tuple(line for line in out.splitlines() if (REPO / line).exists())


@functools.cache
def tracked_dirs() -> frozenset[str]:
    dirs: set[str] = set()
    for path in tracked_files():
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return frozenset(dirs)


def doc_pages() -> list[Path]:
    pages = {p for pattern in DOC_GLOBS for p in REPO.glob(pattern)}
    tracked = set(tracked_files())
    return sorted(p for p in pages if p.relative_to(REPO).as_posix() in tracked)


def page_id(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def without_code_blocks(text: str) -> str:
    return re.sub(r"(?ms)^```.*?^```", "", text)


def code_blocks(text: str) -> Iterator[str]:
    for match in re.finditer(r"(?ms)^```([a-z]*)\n(.*?)^```", text):
        if match.group(1) in ("", "sh", "bash", "console", "shell"):
            yield match.group(2)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to `-`."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"(?m)^#{1,6} (.+)$", without_code_blocks(page.read_text("utf-8")))
    found: set[str] = set()
    for heading in headings:
        base = slug(heading)
        name, n = base, 1
        while name in found:
            name, n = f"{base}-{n}", n + 1
        found.add(name)
    return found


# --- links ---------------------------------------------------------------------------


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(without_code_blocks(page.read_text("utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: …
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        try:
            inside = resolved.relative_to(REPO).as_posix()
        except ValueError:
            broken.append(f"{target}: outside the repository")
            continue
        if inside not in tracked_files() and inside not in tracked_dirs():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading #{fragment}")
    return broken


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


# --- files ---------------------------------------------------------------------------


def repository_path(token: str) -> str | None:
    """The repository path a code span names, or None when it names none."""
    token = token.strip()
    if token.startswith("./"):
        token = token[2:]
    if any(c in token for c in "<>{}*$ =:,|()[]'\"") or token.startswith(("/", "~", "-")):
        return None
    if "/" not in token or token.startswith("../"):
        return None
    if token.startswith(TOP_DIRS) or token.endswith(FILE_EXTENSIONS):
        return token
    return None


def exists_in_tree(path: str) -> bool:
    path = path.rstrip("/")
    if path in RUNTIME_PATHS:
        return True
    if path in tracked_dirs() or path in tracked_files():
        return True
    if path.startswith(TOP_DIRS):
        return False
    suffix = "/" + path
    return any(f.endswith(suffix) for f in tracked_files()) or any(
        d.endswith(suffix) for d in tracked_dirs()
    )


def missing_files(page: Path) -> list[str]:
    text = page.read_text("utf-8")
    named = {p for span in CODE_SPAN.findall(text) if (p := repository_path(span))}
    for block in code_blocks(text):
        for line in block.splitlines():
            word = line.strip().split(" ")[0]
            if word.startswith("./") and (p := repository_path(word)):
                named.add(p)
    return sorted(p for p in named if not exists_in_tree(p))


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_every_file_named_exists(page: Path) -> None:
    assert missing_files(page) == []


# --- environment variables -----------------------------------------------------------


@functools.cache
def code_text() -> str:
    """Everything that may read a variable: code, scripts, manifests (not the docs)."""
    chunks = []
    for path in tracked_files():
        if path.endswith((".md", ".png", ".lock")) or "/tests/" in f"/{path}":
            continue
        try:
            chunks.append((REPO / path).read_text("utf-8"))
        except UnicodeDecodeError:
            continue
    return "\n".join(chunks).upper()


def unknown_variables(page: Path) -> list[str]:
    names = set(ENV_VAR.findall(page.read_text("utf-8")))
    return sorted(name for name in names if name not in code_text())


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_every_environment_variable_named_is_read_somewhere(page: Path) -> None:
    assert unknown_variables(page) == []


# --- commands ------------------------------------------------------------------------


def _activity_core(argv: Sequence[str]) -> object:
    from activity_core.cli import main

    return main(list(argv))


def _rein_aharness(argv: Sequence[str]) -> object:
    from rein_aharness.cli import main

    return main(argv)


def _ops_demo(argv: Sequence[str]) -> object:
    from ops_demo.cli import main

    return main(argv)


PROGRAMS: dict[str, Callable[[Sequence[str]], object]] = {
    "activity-core": _activity_core,
    "rein-aharness": _rein_aharness,
    "ops-demo": _ops_demo,
}
UV_RUN_OPTIONS_WITH_VALUE = ("--package", "--with", "--python", "--directory", "--project")
SHELL_BREAKS = ("|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "<", "&")


def shell_commands(block: str) -> Iterator[list[str]]:
    """Each command line of one of our programs in a shell block, as argv after the name."""
    joined = re.sub(r"\\\n\s*", " ", block)
    for line in joined.splitlines():
        line = line.split(" # ", 1)[0].strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words[:2] == ["uv", "run"]:
            words = words[2:]
            while words and words[0].startswith("-"):
                option = words.pop(0)
                if option in UV_RUN_OPTIONS_WITH_VALUE and words:
                    words.pop(0)
        if not words or words[0] not in PROGRAMS:
            continue
        argv = []
        for word in words[1:]:
            if word in SHELL_BREAKS or word.startswith(("|", ">", "2>")):
                break
            argv.append(word)
        yield [words[0], *argv]


def help_of(program: str, argv: Sequence[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = PROGRAMS[program]([*argv, "--help"])
        except SystemExit as exc:
            code = exc.code
    return (0 if code is None else int(code) if isinstance(code, int) else 1), (
        out.getvalue() + err.getvalue()
    )


def command_problems(command: list[str]) -> list[str]:
    program, argv = command[0], command[1:]
    problems, helps = [], []
    code, text = help_of(program, [])
    helps.append(text)
    for i, word in enumerate(argv):
        if word.startswith("-"):
            continue
        code, text = help_of(program, argv[: i + 1])
        if code != 0:
            # argparse refuses a subcommand it does not know as an "invalid choice"; any
            # other refusal is a placeholder (`ID`, `$RUN`) that a value's type check
            # rejects, and everything after it is that subcommand's arguments.
            if "invalid choice" in text:
                problems.append(f"{shlex.join(command)}: no subcommand {word!r}")
            break
        helps.append(text)
    offered = "\n".join(helps)
    for word in argv:
        if word.startswith("--") and len(word) > 2:
            option = word.split("=", 1)[0]
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", offered):
                problems.append(f"{shlex.join(command)}: no option {option}")
    return problems


def commands_of(page: Path) -> list[list[str]]:
    return [cmd for block in code_blocks(page.read_text("utf-8")) for cmd in shell_commands(block)]


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_every_command_shown_parses(page: Path) -> None:
    problems = [p for command in commands_of(page) for p in command_problems(command)]
    assert problems == []


def test_the_front_page_is_short_and_reaches_every_concern() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 200
    for page in (
        "queue-api",
        "operator-plane",
        "worker",
        "outbox",
        "deploy",
        "operations",
        "security",
        "configuration",
    ):
        assert f"](docs/{page}.md)" in readme, page
    assert "```sh\n./scripts/test\n```" in readme


# --- the checks themselves -------------------------------------------------------------


def test_the_checks_find_what_is_broken() -> None:
    """Each check refuses a made-up name, so a green run means the names were found."""
    assert not exists_in_tree("services/activity-core/src/activity_core/no_such.py")
    assert exists_in_tree("queue/claim.py")
    assert not exists_in_tree("queue/no_such.py")
    assert "ACTIVITY_CORE_NO_SUCH_SETTING" not in code_text()
    assert "ACTIVITY_CORE_DATABASE_URL" in code_text()
    assert command_problems(["activity-core", "runs", "chnges", "ID"])
    assert command_problems(["activity-core", "serve", "--prot", "1"])
    assert not command_problems(["activity-core", "runs", "--url", "URL", "changes", "ID"])
    heading = "Handing the changes over (docs/changes.md)"
    assert slug(heading) == "handing-the-changes-over-docschangesmd"
    line = "FOO=1 uv run --no-dev --package ops-demo ops-demo --port 1 | cat\n"
    assert list(shell_commands(line)) == [["ops-demo", "--port", "1"]]
