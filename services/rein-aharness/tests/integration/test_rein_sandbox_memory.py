"""The sandbox's memory bound covers its tmpfs files: sized tmpfs mounts, a read-only /dev,
and a memory cgroup where the node offers one. Real bwrap, real writers.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.profiles import SandboxChoice, SandboxLimits, SandboxProfile
from rein_aharness.sandbox import SandboxMounts, resolve_bwrap
from rein_aharness.sandbox.cgroups import SandboxCgroups, cgroup_places
from rein_aharness.sandbox.limits import SandboxLimitError
from rein_aharness.sandbox.process import Sandbox

BWRAP = resolve_bwrap(None)
MIB = 1024 * 1024


def _sandbox(tmp_path: Path, **limits: int) -> Sandbox:
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    choice = SandboxChoice(
        "profile.test", SandboxProfile(kind="bwrap", limits=SandboxLimits(**limits))
    )
    return Sandbox(choice, BWRAP, SandboxMounts(worktree))


async def _sh(sandbox: Sandbox, script: str) -> tuple[int | None, str]:
    outcome = await run_in_sandbox(["sh", "-c", script], 60, sandbox, {"PATH": "/usr/bin:/bin"})
    return outcome.returncode, outcome.output_tail.decode("utf-8", "replace")


@pytest.mark.parametrize("place", ["/tmp", "/dev/shm"])
async def test_a_writer_of_1_gib_into_a_tmpfs_is_stopped_at_its_size(
    tmp_path: Path, place: str
) -> None:
    # 4 files of 256 MiB: each within file_size_mb (1024), 1 GiB in all, under a 256 MiB
    # memory bound whose tmpfs size is a quarter of it (64 MiB).
    sandbox = _sandbox(tmp_path, address_space_mb=256)
    code, out = await _sh(
        sandbox,
        f"for i in 1 2 3 4; do head -c 256M /dev/zero > {place}/f$i 2>/dev/null || echo "
        f"refused-$i; done; du -sk {place} | cut -f1",
    )
    assert code == 0, out
    lines = out.split()
    assert "refused-1" in lines, out  # ENOSPC at 64 MiB: already the first file
    assert int(lines[-1]) <= 64 * 1024, out


async def test_dev_is_read_only_but_its_devices_work(tmp_path: Path) -> None:
    code, out = await _sh(
        _sandbox(tmp_path, address_space_mb=256),
        "(echo x > /dev/planted) 2>&1; echo ok > /dev/null && head -c 3 /dev/zero | wc -c",
    )
    assert code == 0, out
    assert "Read-only file system" in out and out.split()[-1] == "3", out


async def test_the_memory_cgroup_bounds_the_whole_sandbox_tmpfs_files_included(
    tmp_path: Path,
) -> None:
    """Each tmpfs may hold 256 MiB, but both together are the sandbox's memory: 400 MiB
    under a 256 MiB bound is stopped (the kernel's OOM killer in the sandbox's cgroup)."""
    places = cgroup_places()
    assert places.parent_for("memory") is not None, "this machine kind offers a memory cgroup"
    sandbox = _sandbox(tmp_path, address_space_mb=256, tmpfs_mb=256)
    code, out = await _sh(
        sandbox,
        "head -c 200M /dev/zero > /tmp/a && echo wrote-tmp; "
        "head -c 200M /dev/zero > /dev/shm/b && echo wrote-shm",
    )
    assert "wrote-shm" not in out, out
    assert code != 0, out  # killed, and the worker (this process) goes on


def _v1_tree(root: Path, relative: str) -> Path:
    proc = root / "proc-self-cgroup"
    proc.write_text(f"8:pids:/\n4:memory:/{relative}\n1:cpu:/\n0::/\n")
    (root / "fs" / "pids").mkdir(parents=True)
    (root / "fs" / "memory" / relative).mkdir(parents=True)
    return proc


def test_a_v1_memory_hierarchy_is_found_and_bounded(tmp_path: Path) -> None:
    proc = _v1_tree(tmp_path, "jobs/42")
    places = cgroup_places(proc, tmp_path / "fs")
    assert places.v1 == {"pids": tmp_path / "fs/pids", "memory": tmp_path / "fs/memory/jobs/42"}
    made = SandboxCgroups.create(
        SandboxLimits(address_space_mb=256, processes=32), pids=True, places=places
    )
    pids, memory = made.paths  # one per v1 hierarchy (a plain directory tree here)
    assert pids.parent == tmp_path / "fs/pids" and (pids / "pids.max").read_text() == "32"
    assert memory.parent == tmp_path / "fs/memory/jobs/42" and made.memory
    assert (memory / "memory.limit_in_bytes").read_text() == str(256 * MIB)


def test_a_v2_cgroup_is_bounded_only_where_memory_is_delegated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("0::/worker.service\n")
    fs = tmp_path / "fs"
    (fs / "worker.service").mkdir(parents=True)
    (fs / "cgroup.controllers").write_text("cpu memory pids\n")
    (fs / "worker.service" / "cgroup.subtree_control").write_text("pids memory\n")
    limits = SandboxLimits(address_space_mb=128, processes=16)

    delegated = SandboxCgroups.create(limits, pids=True, places=cgroup_places(proc, fs))
    [one] = delegated.paths  # v2: one cgroup holds both bounds
    assert (one / "pids.max").read_text() == "16"
    assert (one / "memory.max").read_text() == str(128 * MIB) and delegated.memory

    (fs / "worker.service" / "cgroup.subtree_control").write_text("pids\n")
    with caplog.at_level(logging.WARNING, logger="rein_aharness.sandbox.cgroups"):
        undelegated = SandboxCgroups.create(limits, pids=True, places=cgroup_places(proc, fs))
        again = SandboxCgroups.create(limits, pids=False, places=cgroup_places(proc, fs))
    [two] = undelegated.paths
    assert not undelegated.memory and not (two / "memory.max").exists()
    assert again.paths == [] and not again.memory
    [line] = caplog.messages  # said once, not for every sandbox
    assert "no memory cgroup for the sandbox" in line
    assert "does not delegate the memory controller" in line


def test_no_pids_cgroup_for_a_root_worker_is_fatal_no_memory_cgroup_is_not(
    tmp_path: Path,
) -> None:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("1:cpu:/\n")
    places = cgroup_places(proc, tmp_path / "fs")
    with pytest.raises(SandboxLimitError, match="no pids controller"):
        SandboxCgroups.create(SandboxLimits(), pids=True, places=places)
    assert SandboxCgroups.create(SandboxLimits(), pids=False, places=places).paths == []


def test_the_tmpfs_size_defaults_to_a_quarter_of_the_memory_bound_and_may_not_exceed_it() -> None:
    assert SandboxLimits(address_space_mb=256).tmpfs_bytes == 64 * MIB
    assert SandboxLimits(address_space_mb=256, tmpfs_mb=100).tmpfs_bytes == 100 * MIB
    with pytest.raises(ValidationError, match=r"tmpfs_mb \(300\) may not exceed address_space_mb"):
        SandboxLimits(address_space_mb=256, tmpfs_mb=300)
    for bad in (0, -1, 2_000_000):
        with pytest.raises(ValidationError):
            SandboxLimits(tmpfs_mb=bad)
