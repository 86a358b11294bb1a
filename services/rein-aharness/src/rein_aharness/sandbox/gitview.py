"""What the approach sees of the repository's git dir: an allowlist, and a config of our own.

A repository's git dir holds more than git needs to work in a worktree, and some of it
may carry credentials: `config` (`remote.*.url` with a token, `http.extraHeader`,
`credential.helper`, `url.*.insteadOf`, `include.path` to a file with more of them),
`FETCH_HEAD` and `remotes/` or `branches/` (remote URLs), `logs/` (reflog messages),
`modules/` (submodules' git dirs with their own configs), the main worktree's
`config.worktree`, a stray `.git-credentials`, `hooks/` (scripts an operator wrote).
So the sandbox's `/repository.git` is not the git dir bound whole but only these of its
entries, read-only (`COMMON_ENTRIES`): the objects (an alternate of the run's private
object directory), the refs, `HEAD`, `shallow` and `info/` (excludes, attributes); and at
`/repository.git/config` a config the worker writes for the run (`sandbox_config`), with
only the keys of `CONFIG_KEYS` copied from the real one, never a remote, URL, header,
credential, include or command.
"""

from __future__ import annotations

from pathlib import Path

from rein_aharness.repository.git import git

__all__ = ["COMMON_ENTRIES", "CONFIG_KEYS", "config_text", "sandbox_config"]

# Entries of the git common dir the sandbox shows (read-only), where they exist.
COMMON_ENTRIES = ("objects", "refs", "HEAD", "packed-refs", "shallow", "info", "reftable")

# The only keys copied into the sandbox's config: what decides how git reads the
# repository's format and the worktree's files. Nothing that names a place or a command.
CONFIG_KEYS = (
    "core.repositoryformatversion",
    "core.bare",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.logallrefupdates",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.checkstat",
    "core.trustctime",
    "extensions.objectformat",
    "extensions.compatobjectformat",
    "extensions.refstorage",
    "extensions.worktreeconfig",
)
_MAX_VALUE = 256


def config_text(entries: list[tuple[str, str]]) -> str:
    """The sandbox's config file from the real config's (key, value) list (pure): the
    allowlisted keys only, the last value of each, as git writes them."""
    chosen: dict[str, str] = {}
    for key, value in entries:
        if key.lower() in CONFIG_KEYS and len(value) <= _MAX_VALUE:
            chosen[key.lower()] = value
    chosen.setdefault("core.repositoryformatversion", "0")
    lines: list[str] = []
    for section in ("core", "extensions"):
        names = [k for k in CONFIG_KEYS if k.startswith(f"{section}.") and k in chosen]
        if names:
            lines.append(f"[{section}]")
            lines += [f"\t{k.split('.', 1)[1]} = {_quoted(chosen[k])}" for k in names]
    return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    )
    return f'"{escaped}"'


async def sandbox_config(common_dir: Path, target: Path) -> None:
    """Write the sandbox's config for the repository at `common_dir` to `target`.

    Read with git itself (`--no-includes`: an included file is never read), so the
    values are exactly the ones git would use.
    """
    real = common_dir / "config"
    listed = b""
    if real.is_file():
        listed = await git(
            common_dir, "config", "--file", str(real), "--no-includes", "--null", "-l"
        )
    entries: list[tuple[str, str]] = []
    for item in listed.decode("utf-8", "surrogateescape").split("\0"):
        key, _, value = item.partition("\n")
        if key:
            entries.append((key, value))
    target.write_text(config_text(entries), encoding="utf-8", errors="surrogateescape")
