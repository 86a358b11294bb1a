"""Secrets by file (sandbox/secrets.py), through the real worker in real bubblewrap:
readable inside the sandbox at $REIN_SECRETS_DIR/NAME (and as the approach's variable
where the profile says so), and nowhere else: not the approach's own environment
without a mapping, the worktree, its history, the outbox, the state dir, the stored
result, the worker's environment or its DEBUG log, bwrap's argv. A secret that cannot be
used fails the attempt before anything ran, naming the secret, never its value."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from rein_aharness.profiles import BUILTIN_SANDBOXES
from rein_aharness.profiles.model import CommandSpec
from rein_aharness.sandbox import SandboxMounts
from rein_aharness.sandbox.bwrap import SystemPaths, bwrap_arguments
from rein_aharness.sandbox.secrets import MAX_SECRET_BYTES, LoadedSecret, secret_fds
from rein_worker_kit import ActivityCore, Repos, git, run_command_once

COMMIT = "git add briefs && git commit -qm result"


def _value() -> str:
    return f"sk-test-{uuid.uuid4().hex}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def _run(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    name: str,
    script: str,
    secrets: tuple[dict[str, str], ...],
    failures: dict[str, float] | None = None,
) -> dict[str, object]:
    """The run's row; `failures` gets the worker's execution failures by reason."""
    run_id, runtime = await run_command_once(
        activity_core, repos, tmp_path, name, script, secrets=secrets
    )
    if failures is not None:
        registry = runtime.metrics.registry
        for reason in ("secret_unavailable", "gateway_refused"):
            value = registry.get_sample_value(
                "ops_worker_execution_failures_total", {"reason": reason}
            )
            failures[reason] = value or 0.0
    return dict(await activity_core.row(run_id))


async def test_a_secret_is_readable_inside_at_its_path_and_nowhere_else(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repo = repos.make()
    mapped, plain = _value(), _value()
    secret_dir = tmp_path / "mounted"
    secret_dir.mkdir()
    (secret_dir / "mapped").write_text(mapped + "\n")
    (secret_dir / "plain").write_text(plain)
    secrets = (
        {"name": "PROVIDER_KEY", "file": str(secret_dir / "mapped"), "env": "PROVIDER_API_KEY"},
        {"name": "PLAIN", "file": str(secret_dir / "plain")},
    )
    script = (
        "sleep 1; "  # long enough for the host-side scan of every process below
        'd="$REIN_SECRETS_DIR"; '
        'echo "file=$(tr -d "\\n" < "$d/PROVIDER_KEY" | sha256sum | cut -c1-64)" > briefs/r.md; '
        'echo "env=$(printf \'%s\' "$PROVIDER_API_KEY" | sha256sum | cut -c1-64)" '
        ">> briefs/r.md; "
        'echo "dir=$d $(stat -c %a "$d/PLAIN") $(ls "$d" | tr "\\n" " ")" >> briefs/r.md; '
        'v=$(cat "$d/PLAIN"); '
        'env | grep -qF "$v" && echo FOUND-ENV >> briefs/r.md; '
        'grep -qsF "$v" /proc/*/environ && echo FOUND-PROC-ENVIRON >> briefs/r.md; '
        'grep -rqsF "$v" /workspace /repository.git /objects /tmp /rein/report '
        "&& echo FOUND-FS >> briefs/r.md; "
        '{ echo x > "$d/NEW"; } 2>/dev/null && echo WROTE-SECRETS >> briefs/r.md; '
        '{ echo x > "$d/PLAIN"; } 2>/dev/null && echo OVERWROTE >> briefs/r.md; '
        f"{COMMIT}"
    )
    scan = _ProcessScan(argv_values=(mapped, plain), environ_values=(plain,))
    with caplog.at_level(logging.DEBUG, logger="rein_aharness"):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(scan.run)
            row = await _run(activity_core, repos, tmp_path, "secrets", script, secrets)
            tasks.cancel_scope.cancel()
    assert scan.bwrap_seen, "the scan never saw the sandbox's bwrap"
    assert scan.found == []

    assert row["state"] == "succeeded", row["last_error"]
    [ref] = Repos.landings(repo)
    landed = git(repo, "show", f"{ref}:briefs/r.md").splitlines()
    assert landed == [
        f"file={_sha(mapped)}",
        f"env={_sha(mapped)}",  # one trailing newline dropped for the variable
        "dir=/rein/secrets 400 PLAIN PROVIDER_KEY",
    ]
    for value in (mapped, plain):
        assert value not in json.dumps(row["result"]) and value not in str(row["last_error"])
        assert value not in git(repo, "log", "-p", "--all")
        for path in (tmp_path / "state").rglob("*"):
            if path.is_file():
                assert value.encode() not in path.read_bytes(), path
        assert all(value not in v for v in os.environ.values())
        assert value.encode() not in Path("/proc/self/environ").read_bytes()
        for record in caplog.records:
            assert value not in json.dumps(record.__dict__, default=str)
    assert "PROVIDER_API_KEY" not in os.environ


class _ProcessScan:
    """Reads every process's argv and environment on the host while a run is going: no
    secret in bwrap's argv; the unmapped secret in no process's environment."""

    def __init__(self, *, argv_values: tuple[str, ...], environ_values: tuple[str, ...]):
        self.argv_values = [v.encode() for v in argv_values]
        self.environ_values = [v.encode() for v in environ_values]
        self.found: list[str] = []
        self.bwrap_seen = False

    async def run(self) -> None:
        while True:
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                    environ = (proc / "environ").read_bytes()
                except OSError:
                    continue
                # bwrap's argv; the approach's own commands may put what they read in
                # theirs (its probe's grep does), which is theirs to show
                if cmdline.split(b"\0", 1)[0].endswith(b"bwrap"):
                    self.bwrap_seen = True
                    self.found += [f"argv of {proc.name}" for v in self.argv_values if v in cmdline]
                self.found += [f"env of {proc.name}" for v in self.environ_values if v in environ]
            await anyio.sleep(0.05)


def test_bwrap_argv_carries_fd_numbers_never_a_secret() -> None:
    value = _value()
    secret = LoadedSecret("KEY", None, value.encode())
    mounts = SandboxMounts(Path("/wt"), secrets=(secret,))
    with secret_fds(mounts.secrets) as fds:
        args = bwrap_arguments(
            Path("/usr/bin/bwrap"),
            BUILTIN_SANDBOXES["profile.bwrap-local"],
            mounts,
            ["true"],
            system=SystemPaths((), (), (), ()),
            block_fd=3,
            status_fd=4,
            secret_fds=fds,
        )
        assert os.read(fds[0], 1000) == value.encode()  # the memfd holds it, in memory
    assert value not in " ".join(args)
    start = args.index("--tmpfs", args.index("/workspace"))
    assert args[start + 1 : start + 8] == [
        "/rein/secrets",
        "--perms",
        "0400",
        "--file",
        str(fds[0]),
        "/rein/secrets/KEY",
        "--remount-ro",
    ]
    assert value not in repr(secret)


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "absent"


def _directory(tmp_path: Path) -> Path:
    (tmp_path / "adir").mkdir()
    return tmp_path / "adir"


def _oversized(tmp_path: Path) -> Path:
    path = tmp_path / "big"
    path.write_text("SECRETVALUE" * (MAX_SECRET_BYTES // 11 + 1))
    return path


def _fifo(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "fifo")
    return tmp_path / "fifo"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_missing, "its file does not exist"),
        (_directory, "its file is not a regular file"),
        (_oversized, f"its file is over {MAX_SECRET_BYTES} bytes"),
        (_fifo, "its file is not a regular file"),
    ],
    ids=["missing", "directory", "oversized", "fifo"],
)
async def test_an_unusable_secret_fails_the_attempt_before_the_approach_starts(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    make: object,
    problem: str,
) -> None:
    repo = repos.make()
    marker = tmp_path / "ran"
    path = make(tmp_path)  # type: ignore[operator]
    secrets = ({"name": "API_KEY", "file": str(path)},)
    # would leave a commit (and a landing) had it run
    script = f"echo ran > briefs/r.md && {COMMIT}"
    failures: dict[str, float] = {}
    with caplog.at_level(logging.INFO, logger="rein_aharness"):
        row = await _run(activity_core, repos, tmp_path, "nokey", script, secrets, failures)
    assert failures == {"secret_unavailable": 1.0, "gateway_refused": 0.0}
    assert row["state"] == "failed"  # conclusive: not reopened
    assert row["last_error"] == f"secret_unavailable: API_KEY: {problem}"
    assert "SECRETVALUE" not in json.dumps(row["result"])
    assert not any(r.getMessage() == "approach started" for r in caplog.records)
    assert Repos.landings(repo) == {}
    assert not marker.exists()
    assert not (tmp_path / "state" / "worktrees").exists() or not list(
        (tmp_path / "state" / "worktrees").iterdir()
    )


async def test_another_attempts_secrets_are_not_in_the_next_sandbox(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    first, second = _value(), _value()
    (tmp_path / "a").write_text(first)
    (tmp_path / "b").write_text(second)
    a = ({"name": "A_KEY", "file": str(tmp_path / "a")},)
    row = await _run(
        activity_core, repos, tmp_path, "one", f"echo one > briefs/one.md && {COMMIT}", a
    )
    assert row["state"] == "succeeded"
    # the second attempt looks for the first's value in every place of its sandbox that
    # is not the host's read-only runtime (/usr, /lib: the same for every sandbox)
    probe = (
        f'p=$(printf "%s" {first[:20]}; printf "%s" {first[20:]}); '
        'grep -rqsF "$p" /rein /tmp /dev/shm /workspace /objects /repository.git /etc '
        "&& echo FOUND > briefs/two.md || echo clean > briefs/two.md; "
        'ls "$REIN_SECRETS_DIR" >> briefs/two.md; '
        f"{COMMIT}"
    )
    b = ({"name": "B_KEY", "file": str(tmp_path / "b")},)
    row = await _run(activity_core, repos, tmp_path, "two", probe, b)
    assert row["state"] == "succeeded", row["last_error"]
    refs = Repos.landings(repo)
    [two] = [ref for ref in refs if ref.startswith(f"refs/heads/rein/{row['id']}")]
    assert git(repo, "show", f"{two}:briefs/two.md").splitlines() == ["clean", "B_KEY"]


@pytest.mark.parametrize(
    "secrets",
    [
        [{"name": "A", "file": "relative/path"}],
        [{"name": "A", "file": "/x"}, {"name": "A", "file": "/y"}],
        [{"name": "A", "file": "/x", "env": "K"}, {"name": "B", "file": "/y", "env": "K"}],
        [{"name": "A", "file": "/x", "env": "LD_PRELOAD"}],
        [{"name": "A", "file": "/x", "env": "REIN_RESULT_FILE"}],
        [{"name": "A", "file": "/x", "env": "PATH"}],
        [{"name": "A-B", "file": "/x"}],
        [{"name": "A", "file": "/x", "value": "inline"}],
        [{"name": "A", "file": "/x", "env": "HOME_KEY"}],
    ],
)
def test_the_secrets_schema_is_strict(secrets: list[dict[str, str]]) -> None:
    spec = {"argv": ["true"], "timeout_s": 1.0, "secrets": secrets}
    if secrets[0].get("env") == "HOME_KEY":  # allowed alone, refused when also allowlisted
        CommandSpec.model_validate(spec)
        spec["env_allowlist"] = ["HOME_KEY"]
    with pytest.raises(ValidationError):
        CommandSpec.model_validate(spec)
