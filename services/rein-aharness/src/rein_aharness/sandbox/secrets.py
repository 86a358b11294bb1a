"""A profile's secrets: read at attempt start, shown only inside the sandbox.

The worker reads each secret's file before the attempt's worktree exists: it must be a
regular file (symlinks are followed, since Kubernetes projects a Secret through
`..data` symlinks, but the file opened must be regular; a FIFO is opened non-blocking
and refused) of at most MAX_SECRET_BYTES. Otherwise the attempt fails with
`SecretUnavailable`, naming the secret and the problem, never its value.

Inside the sandbox the secrets are files `/rein/secrets/NAME` (mode 0400) on a tmpfs of
the sandbox's own (bwrap `--tmpfs`, then `--file FD`, read-only afterwards): bwrap
copies each from a memfd the worker fills, so a secret never touches the worker's disk
(state dir, worktree, scratch), never appears in bwrap's argv (only fd numbers do) and
dies with the sandbox; another attempt's sandbox has its own tmpfs. A secret with `env`
is also a variable of the approach's environment (one trailing newline dropped), never
of the worker's own (os.environ is not touched). `LoadedSecret` never shows its value in
a repr, so it cannot reach a log by accident.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from rein_aharness.profiles.secret_specs import SecretSpec

__all__ = [
    "MAX_SECRET_BYTES",
    "SECRETS_DIR",
    "LoadedSecret",
    "SecretUnavailable",
    "load_secrets",
    "secret_environment",
    "secret_fds",
    "secret_mount_arguments",
]

SECRETS_DIR = PurePosixPath("/rein/secrets")
MAX_SECRET_BYTES = 64 * 1024
# The tmpfs holds at most the 32 secrets a profile may name, each within the bound.
_TMPFS_BYTES = 33 * MAX_SECRET_BYTES


class SecretUnavailable(Exception):
    """A secret's file cannot be used; the approach did not start."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        self.problem = problem
        super().__init__(f"secret_unavailable: {name}: {problem}")


@dataclass(frozen=True)
class LoadedSecret:
    name: str
    env: str | None
    value: bytes = field(repr=False)


def load_secrets(specs: Sequence[SecretSpec]) -> tuple[LoadedSecret, ...]:
    return tuple(
        LoadedSecret(spec.name, spec.env, _read(spec, env=spec.env is not None)) for spec in specs
    )


def _read(spec: SecretSpec, *, env: bool) -> bytes:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(spec.file, flags)
    except FileNotFoundError:
        raise SecretUnavailable(spec.name, "its file does not exist") from None
    except OSError as exc:
        raise SecretUnavailable(spec.name, f"its file cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretUnavailable(spec.name, "its file is not a regular file")
        if info.st_size > MAX_SECRET_BYTES:
            raise SecretUnavailable(spec.name, f"its file is over {MAX_SECRET_BYTES} bytes")
        data = b""
        while len(data) <= MAX_SECRET_BYTES:
            chunk = os.read(fd, MAX_SECRET_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise SecretUnavailable(spec.name, f"its file cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_BYTES:
        raise SecretUnavailable(spec.name, f"its file is over {MAX_SECRET_BYTES} bytes")
    if env and (b"\x00" in data or not _utf8(data)):
        raise SecretUnavailable(spec.name, "an env secret must be UTF-8 text without NUL")
    return data


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def secret_environment(secrets: Sequence[LoadedSecret]) -> dict[str, str]:
    """REIN_SECRETS_DIR and the `env` secrets, for the approach's environment only."""
    if not secrets:
        return {}
    env = {"REIN_SECRETS_DIR": str(SECRETS_DIR)}
    for secret in secrets:
        if secret.env is not None:
            text = secret.value.decode("utf-8")
            env[secret.env] = text[:-1] if text.endswith("\n") else text
    return env


@contextlib.contextmanager
def secret_fds(secrets: Sequence[LoadedSecret]) -> Iterator[list[int]]:
    """One memfd per secret, filled and rewound for bwrap to copy; closed on exit."""
    fds: list[int] = []
    try:
        for secret in secrets:
            fd = os.memfd_create(f"rein-secret-{secret.name}", os.MFD_CLOEXEC)
            fds.append(fd)
            os.write(fd, secret.value)
            os.lseek(fd, 0, os.SEEK_SET)
        yield fds
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def secret_mount_arguments(secrets: Sequence[LoadedSecret], fds: Sequence[int]) -> list[str]:
    """bwrap arguments: a private tmpfs at SECRETS_DIR with each secret copied in."""
    if not secrets:
        return []
    args = ["--size", str(_TMPFS_BYTES), "--tmpfs", str(SECRETS_DIR)]
    for secret, fd in zip(secrets, fds, strict=True):
        args += ["--perms", "0400", "--file", str(fd), f"{SECRETS_DIR}/{secret.name}"]
    return [*args, "--remount-ro", str(SECRETS_DIR)]
