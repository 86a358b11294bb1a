"""The sandbox: real bwrap, real namespaces, real git, real runs closed on real PostgreSQL.

The escape suite runs each attack as a profile's command, through the whole worker
against activity-core: the attack is contained, the worker stays healthy (its turn ends
normally, its outbox is clean) and the run's outcome is recorded. What the approach could
reach it writes into the one channel it has, a commit in the grant, and the test reads
the landed commit: it must hold none of the secrets.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.profiles import (
    ProfileCatalogue,
    SandboxChoice,
    SandboxLimits,
    SandboxProfile,
)
from rein_aharness.repository import WorkInspection, judge
from rein_aharness.sandbox import SandboxGate, SandboxMounts, probe_sandbox
from rein_aharness.sandbox.bwrap import SystemPaths, bwrap_arguments
from rein_aharness.sandbox.limits import rlimits
from rein_aharness.sandbox.process import Sandbox, SandboxUnavailable
from rein_worker_kit import (
    BWRAP,
    BWRAP_LOCAL,
    NONE_LOCAL,
    PATH,
    UNCONFINED,
    WORKER_TOKEN,
    ActivityCore,
    RecordingTransport,
    Repos,
    RunCommand,
    command_profile,
    git,
    outbox,
    processes_of_run,
    run_profile_once,
    run_worker_once,
    worker_settings,
    write_catalogue,
)

_COMMIT_RESULT = "git add briefs && git commit -qm result"
_SMALL_SANDBOX = (
    "sandbox_profiles:\n"
    "  profile.small:\n"
    "    kind: bwrap\n"
    "    limits: {file_size_mb: 1, address_space_mb: 512, processes: 64}\n"
    "  profile.tight:\n"
    "    kind: bwrap\n"
    "    limits: {file_size_mb: 2, worktree_mb: 3}\n"
)


def _bounded(**limits: int) -> SandboxChoice:
    return SandboxChoice(
        "profile.test", SandboxProfile(kind="bwrap", limits=SandboxLimits(**limits))
    )


def _sandbox(tmp_path: Path, choice: SandboxChoice = BWRAP_LOCAL) -> Sandbox:
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    return Sandbox(choice, BWRAP, SandboxMounts(worktree))


async def _sh(sandbox: Sandbox, script: str, timeout_s: float = 20) -> tuple[int | None, str]:
    outcome = await run_in_sandbox(["sh", "-c", script], timeout_s, sandbox, PATH)
    return outcome.returncode, outcome.output_tail.decode("utf-8", "replace")


# -- what a sandboxed process sees and may do -------------------------------------------


async def test_the_sandbox_shows_the_worktree_and_the_runtime_and_nothing_else(
    tmp_path: Path,
) -> None:
    sandbox = _sandbox(tmp_path)
    (sandbox.mounts.worktree / "mine.txt").write_text("in the worktree\n")
    code, out = await _sh(
        sandbox,
        "pwd; cat mine.txt; echo new > made.txt; ls /; ls /etc | tr '\\n' ' '; echo; "
        "ls /proc | grep -c '^[0-9]'; echo $$",
    )
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "/workspace" and lines[1] == "in the worktree"
    assert (sandbox.mounts.worktree / "made.txt").read_text() == "new\n"
    top = set(lines[2 : lines.index(next(ln for ln in lines if "passwd" in ln))])
    assert {"usr", "bin", "proc", "dev", "tmp", "workspace"} <= top
    assert not top & {"home", "root", "work", "var", "srv", "opt", "run", "mnt"}
    assert "shadow" not in lines[-3] and "passwd" in lines[-3]
    # its own PID namespace: a handful of processes, the shell itself a low pid
    assert int(lines[-2]) <= 5 and int(lines[-1]) <= 5


async def test_the_root_and_the_runtime_are_read_only(tmp_path: Path) -> None:
    code, out = await _sh(
        _sandbox(tmp_path),
        "for p in /x /usr/x /etc/x /bin/x; do (echo x > $p) 2>/dev/null && echo WROTE $p; done; "
        "echo tmp > /tmp/t && cat /tmp/t",
    )
    assert code == 0 and "WROTE" not in out and out.strip().endswith("tmp")


async def test_no_capabilities_and_no_nested_user_namespaces(tmp_path: Path) -> None:
    code, out = await _sh(
        _sandbox(tmp_path),
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; "
        "unshare --user true 2>/dev/null && echo NESTED || echo no-nested",
    )
    assert code == 0, out
    for line in out.splitlines()[:3]:
        assert line.split()[1] == "0000000000000000", line
    assert out.strip().endswith("no-nested")


async def test_no_network_not_even_loopback(tmp_path: Path) -> None:
    accepted: list[object] = []
    with _listener(accepted) as port:
        code, out = await _sh(
            _sandbox(tmp_path),
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\" "
            "2>&1 | tail -1",
        )
    assert code == 0 and ("refused" in out or "unreachable" in out), out
    assert accepted == []


async def test_a_profile_may_grant_the_network(tmp_path: Path) -> None:
    accepted: list[object] = []
    choice = SandboxChoice("profile.net", SandboxProfile(kind="bwrap", network=True))
    with _listener(accepted) as port:
        code, out = await _sh(
            _sandbox(tmp_path, choice),
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
        )
    assert code == 0, out
    assert len(accepted) == 1


@pytest.mark.parametrize(
    ("limits", "script", "expected"),
    [
        ({"file_size_mb": 1}, "head -c 2000000 /dev/zero > big; echo rc=$?", "rc="),
        ({"address_space_mb": 64}, "dd if=/dev/zero of=/dev/null bs=256M count=1", "memory"),
        ({"open_files": 16}, "ulimit -n", "16"),
        ({"cpu_seconds": 1}, "while :; do :; done", ""),
        ({"processes": 16}, "for i in $(seq 40); do sleep 3 & done; wait", "fork"),
    ],
    ids=["file-size", "address-space", "open-files", "cpu-seconds", "processes"],
)
async def test_the_profile_bounds_hold_inside_the_sandbox(
    tmp_path: Path, limits: dict[str, int], script: str, expected: str
) -> None:
    sandbox = _sandbox(tmp_path, _bounded(**limits))
    code, out = await _sh(sandbox, script, timeout_s=20)
    assert code is not None, "bounded, not timed out"
    if "file_size_mb" in limits:
        assert (sandbox.mounts.worktree / "big").stat().st_size <= 1024 * 1024
    elif "open_files" in limits:
        assert code == 0 and out.strip() == expected
    elif "cpu_seconds" in limits:
        assert code != 0  # SIGXCPU, then SIGKILL at the hard limit
    else:
        assert code != 0 and expected in out.lower(), out


def test_the_rlimits_are_the_profile_bounds() -> None:
    import resource

    bounds = dict(rlimits(SandboxLimits(cpu_seconds=7, address_space_mb=100, processes=9)))
    assert bounds[resource.RLIMIT_CPU] == 7
    assert bounds[resource.RLIMIT_AS] == 100 * 1024 * 1024
    assert bounds[resource.RLIMIT_NPROC] == 9
    assert bounds[resource.RLIMIT_CORE] == 0


async def test_a_background_process_dies_with_the_approach(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    code, _ = await _sh(sandbox, "(sleep 2; echo late > late.txt) & echo started")
    assert code == 0
    await anyio.sleep(2.5)
    assert not (sandbox.mounts.worktree / "late.txt").exists()


@pytest.mark.parametrize("choice", [BWRAP_LOCAL, NONE_LOCAL], ids=["bwrap", "none"])
async def test_a_command_that_overruns_is_killed_with_everything_it_started(
    tmp_path: Path, choice: SandboxChoice
) -> None:
    sandbox = _sandbox(tmp_path, choice)
    outcome = await run_in_sandbox(
        ["sh", "-c", "(sleep 1; touch late) & echo working; sleep 3"], 0.3, sandbox, PATH
    )
    assert outcome.timed_out and outcome.returncode is None
    assert outcome.output_tail == b"working\n"
    await anyio.sleep(1.2)
    assert not (sandbox.mounts.worktree / "late").exists()


async def test_command_output_is_bounded(tmp_path: Path) -> None:
    outcome = await run_in_sandbox(
        ["sh", "-c", "head -c 200000 /dev/zero; echo end"], 10, _sandbox(tmp_path), PATH
    )
    assert outcome.returncode == 0 and outcome.output_bytes == 200_004
    assert len(outcome.output_tail) == 64 * 1024 and outcome.output_tail.endswith(b"end\n")


# -- the command line, and a sandbox that cannot be created ------------------------------


def test_the_bwrap_command_line_is_exactly_this() -> None:
    from rein_aharness.sandbox import GitMounts

    system = SystemPaths(
        symlinks=(("/bin", "usr/bin"), ("/lib", "usr/lib")),
        directories=("/lib64",),
        etc=("/etc/passwd", "/etc/group"),
        etc_network=("/etc/resolv.conf",),
    )
    mounts = SandboxMounts(
        Path("/s/worktrees/r.1"),
        GitMounts(
            common_dir=Path("/repos/o/n/.git"),
            admin_dir=Path("/repos/o/n/.git/worktrees/r.1"),
            objects_dir=Path("/s/worktrees/r.1.scratch/objects"),
            dotgit_file=Path("/s/worktrees/r.1.scratch/dotgit"),
            config_file=Path("/s/worktrees/r.1.scratch/config"),
        ),
    )
    args = bwrap_arguments(
        Path("/b/bwrap"),
        SandboxProfile(kind="bwrap"),
        mounts,
        ["make", "docs"],
        system=system,
        block_fd=5,
        status_fd=7,
    )
    common, admin = "/repos/o/n/.git", "/repos/o/n/.git/worktrees/r.1"
    assert " ".join(args) == (
        "/b/bwrap --unshare-user --unshare-all --disable-userns --cap-drop ALL "
        "--die-with-parent --new-session --ro-bind /usr /usr "
        "--symlink usr/bin /bin --symlink usr/lib /lib --ro-bind /lib64 /lib64 "
        "--ro-bind /etc/passwd /etc/passwd --ro-bind /etc/group /etc/group "
        "--proc /proc --dev /dev --size 1073741824 --tmpfs /dev/shm --remount-ro /dev "
        "--size 1073741824 --tmpfs /tmp "
        + "".join(
            f"--ro-bind-try {common}/{entry} /repository.git/{entry} "
            for entry in ("objects", "refs", "HEAD", "packed-refs", "shallow", "info", "reftable")
        )
        + "--ro-bind /s/worktrees/r.1.scratch/config /repository.git/config "
        "--size 65536 --tmpfs /repository.git/worktrees "
        f"--bind {admin} /repository.git/worktrees/r.1 "
        + "".join(
            f"--ro-bind-try {admin}/{name} /repository.git/worktrees/r.1/{name} "
            for name in ("commondir", "gitdir", "config.worktree")
        )
        + "--remount-ro /repository.git/worktrees "
        "--bind /s/worktrees/r.1.scratch/objects /objects "
        "--bind /s/worktrees/r.1 /workspace "
        "--ro-bind /s/worktrees/r.1.scratch/dotgit /workspace/.git "
        "--chdir /workspace --remount-ro / --block-fd 5 --json-status-fd 7 -- make docs"
    )
    networked = bwrap_arguments(
        Path("/b/bwrap"),
        SandboxProfile(kind="bwrap", network=True),
        SandboxMounts(Path("/w")),
        ["true"],
        system=system,
        block_fd=5,
        status_fd=7,
    )
    assert "--share-net" in networked and "/etc/resolv.conf" in networked


def _failing_bwrap(tmp_path: Path, message: str = "No permissions to create new namespace") -> Path:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"#!/bin/sh\necho 'bwrap: {message}' >&2\nexit 1\n")
    fake.chmod(0o755)
    return fake


async def test_a_sandbox_that_cannot_be_created_says_why_and_runs_nothing(
    tmp_path: Path,
) -> None:
    sandbox = Sandbox(BWRAP_LOCAL, _failing_bwrap(tmp_path), SandboxMounts(tmp_path))
    with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace"):
        await run_in_sandbox(["sh", "-c", "touch ran"], 10, sandbox, PATH)
    assert not (tmp_path / "ran").exists()
    assert await probe_sandbox(BWRAP_LOCAL, _failing_bwrap(tmp_path)) == (
        "bwrap failed: bwrap: No permissions to create new namespace"
    )
    assert await probe_sandbox(BWRAP_LOCAL, BWRAP) is None


async def test_a_sandbox_whose_first_process_dies_before_its_bounds_says_bwraps_why(
    tmp_path: Path,
) -> None:
    """bwrap may report its first process and fail setting it up (a refused mount) before
    the worker bounds it: the error is bwrap's, not the bound's "No such process"."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'while [ "$1" != --json-status-fd ]; do shift; done\n'
        "true & gone=$!; wait $gone\n"
        'echo "{\\"child-pid\\": $gone}" > /proc/self/fd/$2\n'
        "echo 'bwrap: Failed to mount tmpfs: Operation not permitted' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    sandbox = Sandbox(BWRAP_LOCAL, fake, SandboxMounts(tmp_path))
    with pytest.raises(SandboxUnavailable) as refused:
        await run_in_sandbox(["sh", "-c", "touch ran"], 10, sandbox, PATH)
    assert (
        str(refused.value) == "bwrap failed: bwrap: Failed to mount tmpfs: Operation not permitted"
    )
    assert not (tmp_path / "ran").exists()


async def test_the_gate_closes_while_the_sandbox_fails_and_opens_when_it_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    broken = tmp_path / "broken"
    broken.touch()
    fake = tmp_path / "bwrap"
    fake.write_text(
        f"#!/bin/sh\nif [ -e {broken} ]; then echo 'bwrap: No permissions to create new "
        f'namespace\' >&2; exit 1; fi\nexec {BWRAP} "$@"\n'
    )
    fake.chmod(0o755)
    gate = SandboxGate([BWRAP_LOCAL], fake, retry_seconds=10, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="rein_aharness.sandbox.gate"):
        assert not await gate.ready()
        assert not await gate.ready()  # not probed again before the retry interval
    assert [r.getMessage() for r in caplog.records] == [
        "sandbox profile.bwrap-local unavailable: bwrap failed: bwrap: No permissions to "
        "create new namespace; claiming no run that needs it"
    ]
    broken.unlink()  # the cluster was fixed
    assert not await gate.ready()
    now[0] = 11
    assert await gate.ready() and gate.unavailable is None
    gate.report_failure("bwrap: mount failed")
    assert gate.unavailable == "sandbox failed during a run: bwrap: mount failed"
    assert await gate.ready()  # probed again at once: it works


# -- the catalogue ----------------------------------------------------------------------


def test_profiles_default_to_the_bwrap_sandbox_and_names_must_exist() -> None:
    base = {"id": "harness.x", "version": "1.0.0", "approach": "command"}
    command = {"argv": ["true"], "timeout_s": 1}
    rein = {"id": "rein-aharness", "version": "0.1.0"}
    profile = {**base, "command": command, "resolved_model": None, "rein": rein}
    catalogue = ProfileCatalogue.from_data({"profiles": [profile]})
    assert catalogue.profile_sandbox_names() == {"profile.bwrap-local"}
    assert catalogue.sandbox("profile.bwrap-local").kind == "bwrap"
    from rein_aharness.profiles import CatalogueError

    with pytest.raises(CatalogueError, match=r"sandbox_profile 'profile\.gone' is not defined"):
        ProfileCatalogue.from_data({"profiles": [{**profile, "sandbox_profile": "profile.gone"}]})
    tuned = ProfileCatalogue.from_data(
        {
            "profiles": [{**profile, "sandbox_profile": "profile.net"}],
            "sandbox_profiles": {
                "profile.net": {"kind": "bwrap", "network": True, "limits": {"processes": 64}}
            },
        }
    )
    assert (
        tuned.sandbox("profile.net").network and tuned.sandbox("profile.net").limits.processes == 64
    )
    with pytest.raises(CatalogueError, match="kind none confines nothing"):
        ProfileCatalogue.from_data(
            {"profiles": [], "sandbox_profiles": {"x": {"kind": "none", "network": True}}}
        )


def test_acceptance_refuses_changed_git_metadata() -> None:
    inspection = WorkInspection(
        baseline="a" * 40,
        head_after="b" * 40,
        descends=True,
        commit_count=1,
        commits=("b" * 40,),
        merges=False,
        paths=("briefs/x.md",),
        ref_changes=(),
        refs_after={},
        metadata_changes=("$GIT_DIR/hooks/post-commit",),
    )
    verdict = judge(inspection, None)
    assert not verdict.accepted and verdict.reason is not None
    assert "changed the repository's git metadata" in verdict.reason
    assert "'$GIT_DIR/hooks/post-commit'" in verdict.reason


# -- the escape suite: real runs through the worker --------------------------------------


@pytest.fixture
def secrets(tmp_path: Path) -> dict[str, Path]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "secret-marker").write_text("SECRET-STATE\n")
    credentials = tmp_path / "credentials.env"
    credentials.write_text(f"ACTIVITY_CORE_WORKER_TOKEN={WORKER_TOKEN}\n")
    credentials.chmod(0o600)
    return {"state": state, "credentials": credentials}


Attack = Callable[..., Awaitable[dict[str, object]]]


@pytest.fixture
def attack(activity_core: ActivityCore, repos: Repos, tmp_path: Path) -> Attack:
    """`attack(script, ...)` runs `script` as a profile's command through the whole worker
    and checks the worker stayed healthy (its turn ended normally, its outbox and its
    worktrees are clean): the run's row."""

    async def run(
        script: str,
        *,
        timeout_s: float = 30,
        sandbox: str = "profile.bwrap-local",
        **settings_overrides: object,
    ) -> dict[str, object]:
        catalogue = write_catalogue(
            tmp_path / "profiles.yaml",
            command_profile("attack", script, timeout_s=timeout_s, sandbox=sandbox),
            sandboxes=_SMALL_SANDBOX,
        )
        settings = worker_settings(tmp_path, repos, catalogue, **settings_overrides)
        run_id, runtime = await run_profile_once(activity_core, settings, "attack")
        [report] = runtime.worker.reports  # the worker's turn ended normally
        assert report.close is not None and report.close.state == "delivered"
        snapshot = outbox(settings).snapshot()
        assert snapshot.pending == () and snapshot.quarantined == ()
        assert list((tmp_path / "state" / "worktrees").iterdir()) == []
        row = await activity_core.row(run_id)
        return dict(row)

    return run


# An approach outside any sandbox, which the worker runs only when told it may.
_UNCONFINED: dict[str, object] = {"sandbox": UNCONFINED, "rein_aharness_allow_unsandboxed": True}


def _landed(repo: Path, path: str = "briefs/result.md") -> str:
    [ref] = Repos.landings(repo)
    return git(repo, "show", f"{ref}:{path}")


async def test_escape_writes_outside_the_worktree_by_absolute_path_and_dotdot(
    repos: Repos, tmp_path: Path, attack: Attack, secrets: dict[str, Path]
) -> None:
    repo = repos.make()
    target = tmp_path / "outside.txt"
    dotdots = " ".join("../" * n + "dotdot.txt" for n in range(1, 8))
    script = (
        f"(echo pwned > {target}) 2>/dev/null; (echo pwned > {secrets['state']}/planted) "
        f"2>/dev/null; for p in {dotdots}; do (echo pwned > $p) 2>/dev/null; done; "
        f"(echo pwned > {repo}/README.md) 2>/dev/null; "
        f"echo tried > briefs/result.md && {_COMMIT_RESULT}"
    )
    row = await attack(script)
    assert row["state"] == "succeeded"
    assert not target.exists() and not (secrets["state"] / "planted").exists()
    assert not list(tmp_path.rglob("dotdot.txt"))
    assert (repo / "README.md").read_text() == "# briefs\n"
    assert _landed(repo) == "tried"


async def test_escape_through_a_symlink_committed_in_the_repository(
    repos: Repos, tmp_path: Path, attack: Attack, secrets: dict[str, Path]
) -> None:
    repo = repos.make()
    (repo / "briefs" / "abs").symlink_to(tmp_path)
    (repo / "briefs" / "rel").symlink_to("../../../..")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "links out of the repository")
    script = (
        "(echo pwned > briefs/abs/planted-abs) 2>/dev/null; "
        "(echo pwned > briefs/rel/planted-rel) 2>/dev/null; "
        "(cat briefs/abs/state/secret-marker; cat briefs/abs/credentials.env) "
        f"> briefs/result.md 2>/dev/null; echo tried >> briefs/result.md && {_COMMIT_RESULT}"
    )
    row = await attack(script)
    assert row["state"] == "succeeded"
    assert not list(tmp_path.rglob("planted-*"))
    assert _landed(repo) == "tried"


async def test_escape_reads_of_state_outbox_credentials_and_the_worker_environment(
    repos: Repos, attack: Attack, secrets: dict[str, Path]
) -> None:
    repo = repos.make()
    os.environ["REIN_TEST_SECRET_IN_WORKER"] = WORKER_TOKEN  # the worker process's env
    try:
        script = (
            f"(cat {secrets['state']}/secret-marker; ls -R {secrets['state']}; "
            f"cat {secrets['credentials']}; cat /proc/{os.getpid()}/environ; "
            "cat /proc/*/environ; cat /proc/1/root/proc/1/environ) > briefs/result.md 2>/dev/null; "
            f"ls /proc >> briefs/result.md; echo tried >> briefs/result.md && {_COMMIT_RESULT}"
        )
        row = await attack(script)
    finally:
        del os.environ["REIN_TEST_SECRET_IN_WORKER"]
    assert row["state"] == "succeeded"
    leaked = _landed(repo)
    assert leaked.endswith("tried")
    for secret in ("SECRET-STATE", WORKER_TOKEN, "close-outbox", "ACTIVITY_CORE"):
        assert secret not in leaked


async def test_escape_plants_a_hook_and_changes_the_git_config(
    repos: Repos, attack: Attack
) -> None:
    repo = repos.make()
    config_before = (repo / ".git" / "config").read_bytes()
    hooks_before = sorted(p.name for p in (repo / ".git" / "hooks").iterdir())
    script = (
        "gd=$(git rev-parse --git-common-dir); "
        "(printf '#!/bin/sh\\ntouch /tmp/hooked\\n' > $gd/hooks/post-checkout) 2>/dev/null; "
        "(git config core.fsmonitor 'touch /tmp/fsmonitor') 2>/dev/null; "
        "(git config --worktree core.hooksPath /workspace) 2>/dev/null; "
        "(echo 'gitdir: /tmp/evil' > .git) 2>/dev/null; "
        "(echo /tmp/objects > $gd/objects/info/alternates) 2>/dev/null; "
        f"echo tried > briefs/result.md && {_COMMIT_RESULT}"
    )
    row = await attack(script)
    assert row["state"] == "succeeded"  # contained: nothing changed, the work itself is fine
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert sorted(p.name for p in (repo / ".git" / "hooks").iterdir()) == hooks_before
    assert not (repo / ".git" / "objects" / "info" / "alternates").exists()
    assert _landed(repo) == "tried"


async def test_an_unconfined_approach_that_plants_a_hook_is_rejected(
    repos: Repos, attack: Attack
) -> None:
    # Without a sandbox the write succeeds; acceptance is what refuses the run.
    repo = repos.make()
    script = (
        "gd=$(git rev-parse --git-common-dir); printf '#!/bin/sh\\n' > $gd/hooks/post-commit; "
        f"echo x > briefs/result.md && {_COMMIT_RESULT}"
    )
    row = await attack(script, **_UNCONFINED)
    assert row["state"] == "failed"
    assert "changed the repository's git metadata" in str(row["last_error"])
    assert "hooks/post-commit" in str(row["last_error"])
    assert Repos.landings(repo) == {}


async def test_escape_connects_to_a_port_on_the_loopback(repos: Repos, attack: Attack) -> None:
    repo = repos.make()
    accepted: list[object] = []
    with _listener(accepted) as port:
        script = (
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
            f'{port}), 2)" > briefs/result.md 2>&1; '
            f"(curl -sS -m 2 http://127.0.0.1:{port}/ops-runs) >> briefs/result.md 2>&1; "
            f"echo tried >> briefs/result.md && {_COMMIT_RESULT}"
        )
        row = await attack(script)
    assert row["state"] == "succeeded"
    assert accepted == []
    assert "refused" in _landed(repo).lower()


@pytest.mark.parametrize(
    ("script", "timeout_s", "status"),
    [
        ("b() { b | b & }; b; sleep 2; exit 3", 20, 3),
        ("dd if=/dev/zero of=/dev/null bs=1G count=1", 30, 1),
    ],
    ids=["a-fork-bomb-is-bounded", "memory-past-the-bound"],
)
async def test_escape_past_the_small_bounds(
    repos: Repos, attack: Attack, script: str, timeout_s: float, status: int
) -> None:
    repos.make()
    row = await attack(script, timeout_s=timeout_s, sandbox="profile.small")
    assert (row["state"], row["last_error"]) == (
        "failed",
        f"the command exited with status {status}",
    )


async def test_escape_a_file_past_the_size_bound(repos: Repos, attack: Attack) -> None:
    repos.make()
    row = await attack("head -c 2M /dev/zero > briefs/big.bin", sandbox="profile.small")
    assert row["state"] == "failed"
    assert "exited with status" in str(row["last_error"])


@pytest.mark.parametrize(
    "then",
    ["sleep 30", "true"],
    ids=["stopped-while-it-runs", "caught-after-it-exits"],
)
async def test_escape_a_worktree_grown_past_its_bound_fails_the_run(
    repos: Repos, attack: Attack, then: str
) -> None:
    # 6 files of 1 MiB, each within file_size_mb (2), 6 MiB in all past worktree_mb (3).
    repo = repos.make()
    script = (
        "for i in 1 2 3 4 5 6; do head -c 1M /dev/urandom > briefs/f$i.bin; done; "
        f"{then}; echo done > briefs/result.md && {_COMMIT_RESULT}"
    )
    row = await attack(script, timeout_s=60, sandbox="profile.tight")
    assert (row["state"], row["last_error"]) == (
        "failed",
        "the approach grew its worktree and objects by more than worktree_mb (3 MiB) of "
        "sandbox profile profile.tight; it was stopped",
    )
    assert Repos.landings(repo) == {}
    assert not processes_of_run(str(row["id"]))


def test_worktree_use_counts_blocks_each_entry_and_hard_links_once(tmp_path: Path) -> None:
    from rein_aharness.sandbox.growth import used_bytes

    root = tmp_path / "wt"
    root.mkdir()
    assert used_bytes([root], 2**40) == 4096  # the directory itself
    for i in range(10):
        (root / f"empty{i}").touch()
    assert used_bytes([root], 2**40) == 11 * 4096  # an empty file still costs an entry
    (root / "data").write_bytes(b"x" * 100_000)
    with_data = used_bytes([root], 2**40)
    assert with_data >= 11 * 4096 + 100_000
    for i in range(20):
        os.link(root / "data", root / f"link{i}")
    assert used_bytes([root], 2**40) == with_data  # 20 more names of one inode: counted once
    hidden = root / "hidden"
    hidden.mkdir()
    (hidden / "more").write_bytes(b"y" * 50_000)
    hidden.chmod(0)
    assert used_bytes([root], 2**40) >= with_data + 4096 + 50_000  # made readable, measured
    assert 10_000 < used_bytes([root], 10_000) < with_data  # stops once past the limit


async def test_escape_a_process_left_running_after_the_approach_exits(
    repos: Repos, attack: Attack
) -> None:
    repo = repos.make()
    script = (
        "(sleep 2; echo late > /workspace/briefs/late.md) & "
        f"echo done > briefs/result.md && {_COMMIT_RESULT}"
    )
    row = await attack(script)
    assert row["state"] == "succeeded"
    assert not processes_of_run(str(row["id"]))
    assert _landed(repo) == "done"


async def test_the_happy_path_lands_exactly_as_before_and_reports_the_sandbox(
    repos: Repos, attack: Attack
) -> None:
    repo = repos.make()
    refs_before = Repos.refs_outside_landings(repo)
    row = await attack(f"echo brief > briefs/result.md && {_COMMIT_RESULT}")
    assert row["state"] == "succeeded"
    result = json.loads(str(row["result"])) if isinstance(row["result"], str) else row["result"]
    assert isinstance(result, dict)
    assert result["execution_evidence"]["sandbox_profile"] == "profile.bwrap-local"
    assert _landed(repo) == "brief"
    assert Repos.refs_outside_landings(repo) == refs_before
    assert Repos.status(repo) == ""
    # the landed objects live in the repository itself, checked by git
    git(repo, "fsck", "--no-dangling")


async def test_an_unconfined_run_reports_none(repos: Repos, attack: Attack) -> None:
    repos.make()
    row = await attack(f"echo brief > briefs/result.md && {_COMMIT_RESULT}", **_UNCONFINED)
    assert row["state"] == "succeeded"
    result = row["result"]
    assert isinstance(result, dict)
    assert result["execution_evidence"]["sandbox_profile"] == "none"


# -- fail closed ------------------------------------------------------------------------


async def test_none_local_without_the_opt_in_is_refused_before_a_worktree_exists(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, run_command: RunCommand
) -> None:
    repo = repos.make()
    transport = RecordingTransport(activity_core.transport())
    run_id, _ = await run_command("dev", "touch ran", sandbox=UNCONFINED, transport=transport)
    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert "REIN_AHARNESS_ALLOW_UNSANDBOXED" in row["last_error"]
    assert transport.paths("/heartbeat") == []
    assert not (tmp_path / "state" / "worktrees").exists()
    assert len(Repos.worktrees(repo)) == 1


async def test_a_worker_without_a_usable_sandbox_claims_nothing_and_says_why(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repos.make()
    settings = worker_settings(tmp_path, repos, rein_aharness_bwrap=_failing_bwrap(tmp_path))
    run_id = await activity_core.granted_run("brief")
    transport = RecordingTransport(activity_core.transport())
    with caplog.at_level(logging.ERROR):
        runtime = await run_worker_once(settings, transport)
    assert runtime.worker.reports == []
    assert transport.paths("/claim") == []
    assert (await activity_core.row(run_id))["state"] == "open"
    assert (
        "sandbox profile.bwrap-local unavailable: bwrap failed: bwrap: No permissions to "
        "create new namespace; claiming no run that needs it"
    ) in caplog.messages


async def test_a_sandbox_failing_during_a_run_fails_the_attempt_reopened_and_closes_the_gate(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    assert BWRAP is not None
    # passes the start-up probe (no repository mounted), fails once a run mounts one
    flaky = tmp_path / "bin" / "bwrap"
    flaky.parent.mkdir()
    flaky.write_text(
        "#!/bin/sh\n"
        'case "$*" in *repository.git*) echo "bwrap: Can\'t mount tmpfs: EPERM" >&2; exit 1;; '
        f'esac\nexec {BWRAP} "$@"\n'
    )
    flaky.chmod(0o755)
    refs_before = Repos.refs(repo)
    settings = worker_settings(tmp_path, repos, rein_aharness_bwrap=flaky)
    run_id, runtime = await run_profile_once(activity_core, settings, "brief")
    row = await activity_core.row(run_id)
    assert (row["state"], row["attempt"]) == ("open", 1)  # reopened: nothing of it ran
    assert "the sandbox could not be created: bwrap failed: bwrap: Can't mount" in row["last_error"]
    assert Repos.refs(repo) == refs_before
    assert list((tmp_path / "state" / "worktrees").iterdir()) == []
    [report] = runtime.worker.reports
    assert report.close is not None and report.close.state == "delivered"


# -- helpers ----------------------------------------------------------------------------


class _Accepting(threading.Thread):
    def __init__(self, server: socket.socket, accepted: list[object]) -> None:
        super().__init__(daemon=True)
        self.server, self.accepted = server, accepted

    def run(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(connection)
            connection.close()


class _listener:
    """A TCP listener on 127.0.0.1 that records every connection it accepts."""

    def __init__(self, accepted: list[object]) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.thread = _Accepting(self.server, accepted)

    def __enter__(self) -> int:
        self.thread.start()
        return int(self.server.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.server.close()


def test_sandbox_cgroups_of_dead_workers_are_removed(tmp_path: Path) -> None:
    from rein_aharness.sandbox.cgroups import remove_stale

    dead = tmp_path / "rein-aharness-sandbox-999999999-0"
    mine = tmp_path / f"rein-aharness-sandbox-{os.getpid()}-0"
    other = tmp_path / "unrelated"
    for path in (dead, mine, other):
        path.mkdir()
    remove_stale(tmp_path)
    assert not dead.exists() and mine.exists() and other.exists()
