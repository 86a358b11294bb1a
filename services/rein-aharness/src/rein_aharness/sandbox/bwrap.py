"""The bubblewrap command line of one sandboxed approach (pure, given the host's layout).

What the approach gets, in mount order (later mounts cover earlier ones):

| path                       | what                                                        |
| -------------------------- | ----------------------------------------------------------- |
| `/`                        | an empty tmpfs, remounted read-only at the end (bwrap      |
|                            | cannot size it; read-only, it holds nothing the approach   |
|                            | writes)                                                    |
| `/usr`, `/bin`, `/lib*`    | the host's, read-only (symlinks where the host has them)    |
| `/etc/<a few entries>`     | read-only: users, groups, loader cache, time zone,          |
|                            | alternatives; DNS and CA certificates only with network     |
| `/proc`                    | its PID namespace's proc                                    |
| `/dev`                     | a minimal dev, read-only (bwrap cannot size its tmpfs; the  |
|                            | device nodes stay usable); `/dev/shm` a tmpfs of `tmpfs_mb` |
| `/tmp`                     | a tmpfs of `tmpfs_mb`                                       |
| `/repository.git`          | some of the repository's git dir, read-only (gitview.py:    |
|                            | objects, refs, HEAD, packed-refs, shallow, info), and a     |
|                            | config the worker wrote, without remotes or credentials     |
| `.../worktrees`            | a small tmpfs, read-only, showing only this run's entry     |
| `.../worktrees/<name>`     | read-write (HEAD, index, logs); `commondir`, `gitdir`,      |
|                            | `config.worktree` read-only                                 |
| `/objects`                 | the run's private object directory, read-write              |
| `/workspace`               | the run's worktree, read-write; the working directory       |
| `/workspace/.git`          | read-only, pointing at `/repository.git/worktrees/<name>`   |
| `/rein/report`             | the attempt's result directory, read-write (result_file.py) |
| `/rein/secrets`            | the profile's secrets on a private tmpfs, read-only         |
|                            | (secrets.py; only when the profile names some)              |

Nothing else of the host exists inside: no /home, no state directory, no outbox, no
credentials, no other worktree. Every namespace is unshared (user, mount, PID, network,
IPC, UTS, cgroup); `--share-net` only for a profile with `network: true`. A profile with
an allowlist keeps its own network (loopback only) and gets the CA certificates, but no
DNS files, and its egress proxy's socket and relay (egress.py). No capabilities,
no nested user namespaces, a new session (no terminal injection), and the sandbox dies
with the worker. bwrap waits on `block_fd` until the worker has applied the resource
bounds to its first process, and reports that process's pid on `status_fd`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rein_aharness.profiles import SandboxProfile
from rein_aharness.sandbox.egress import EgressMount
from rein_aharness.sandbox.gitview import COMMON_ENTRIES
from rein_aharness.sandbox.layout import OBJECTS, REPOSITORY, WORKSPACE, SandboxMounts
from rein_aharness.sandbox.result_file import result_mount_arguments
from rein_aharness.sandbox.secrets import secret_mount_arguments

__all__ = ["SystemPaths", "bwrap_arguments", "system_paths"]

# A tmpfs that only holds mount points, read-only once they exist.
_MOUNT_POINTS_TMPFS = 64 * 1024

_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC = (
    "passwd",
    "group",
    "nsswitch.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "alternatives",
    "mime.types",
)
_ETC_NETWORK = (
    "resolv.conf",
    "hosts",
    "gai.conf",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
)
# What TLS through the egress proxy needs of _ETC_NETWORK: no resolver, no hosts file.
_ETC_CERTIFICATES = ("ssl", "ca-certificates", "ca-certificates.conf")


@dataclass(frozen=True)
class SystemPaths:
    """The host's runtime paths: top-level symlinks (merged /usr) and directories, and
    which of the /etc entries exist."""

    symlinks: tuple[tuple[str, str], ...]  # (/bin, "usr/bin")
    directories: tuple[str, ...]  # ("/lib64",) where not a symlink
    etc: tuple[str, ...]
    etc_network: tuple[str, ...]


def system_paths(root: Path = Path("/")) -> SystemPaths:
    symlinks: list[tuple[str, str]] = []
    directories: list[str] = []
    for name in _TOP_LEVEL:
        path = root / name
        if path.is_symlink():
            symlinks.append((f"/{name}", os.readlink(path)))
        elif path.is_dir():
            directories.append(f"/{name}")
    etc = root / "etc"
    return SystemPaths(
        symlinks=tuple(symlinks),
        directories=tuple(directories),
        etc=tuple(f"/etc/{n}" for n in _ETC if (etc / n).exists()),
        etc_network=tuple(f"/etc/{n}" for n in _ETC_NETWORK if (etc / n).exists()),
    )


def bwrap_arguments(
    bwrap: Path,
    profile: SandboxProfile,
    mounts: SandboxMounts,
    argv: Sequence[str],
    *,
    system: SystemPaths,
    block_fd: int,
    status_fd: int,
    secret_fds: Sequence[int] = (),
    egress: EgressMount | None = None,
) -> list[str]:
    mode = profile.network_mode
    args = [
        os.fspath(bwrap),
        "--unshare-user",
        "--unshare-all",
        *(["--share-net"] if mode == "open" else []),
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for link, target in system.symlinks:
        args += ["--symlink", target, link]
    for directory in system.directories:
        args += ["--ro-bind", directory, directory]
    network_etc = {
        "open": system.etc_network,
        "allowlist": tuple(e for e in system.etc_network if e[5:] in _ETC_CERTIFICATES),
        "none": (),
    }[mode]
    for entry in system.etc + network_etc:
        args += ["--ro-bind", entry, entry]
    tmpfs = str(profile.limits.tmpfs_bytes)
    # /dev is a tmpfs bwrap cannot size: it is made read-only (its device nodes are
    # mounts of their own and stay usable), and its one writable place is a sized /dev/shm.
    args += ["--proc", "/proc", "--dev", "/dev", "--size", tmpfs, "--tmpfs", "/dev/shm"]
    args += ["--remount-ro", "/dev", "--size", tmpfs, "--tmpfs", "/tmp"]
    git = mounts.git
    if git is not None:
        worktrees = f"{REPOSITORY}/worktrees"
        admin = f"{worktrees}/{git.admin_name}"
        for entry in COMMON_ENTRIES:
            args += ["--ro-bind-try", os.fspath(git.common_dir / entry), f"{REPOSITORY}/{entry}"]
        args += [
            "--ro-bind",
            os.fspath(git.config_file),
            f"{REPOSITORY}/config",
            "--size",
            str(_MOUNT_POINTS_TMPFS),
            "--tmpfs",
            worktrees,
            "--bind",
            os.fspath(git.admin_dir),
            admin,
        ]
        for name in ("commondir", "gitdir", "config.worktree"):
            args += ["--ro-bind-try", os.fspath(git.admin_dir / name), f"{admin}/{name}"]
        args += ["--remount-ro", worktrees, "--bind", os.fspath(git.objects_dir), str(OBJECTS)]
    args += ["--bind", os.fspath(mounts.worktree), str(WORKSPACE)]
    if git is not None:
        args += ["--ro-bind", os.fspath(git.dotgit_file), f"{WORKSPACE}/.git"]
    if mounts.report_dir is not None:
        args += result_mount_arguments(mounts.report_dir)
    args += secret_mount_arguments(mounts.secrets, secret_fds)
    if egress is not None:
        args += egress.bwrap_args()
    args += [
        "--chdir",
        str(WORKSPACE),
        "--remount-ro",
        "/",
        "--block-fd",
        str(block_fd),
        "--json-status-fd",
        str(status_fd),
        "--",
        *argv,
    ]
    return args
