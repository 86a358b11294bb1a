"""What the sandbox costs to start, against a plain subprocess measured in the same run.

    uv run python bench/sandbox_overhead.py [--runs 50] [--argv true]

Runs `argv` (default `true`) N times each way, alternating so that machine noise falls
on both alike, through the worker's own code path (`run_in_sandbox`):

* plain: sandbox profile kind `none` (an ordinary child in its own session);
* bwrap: `profile.bwrap-local` (namespaces, mounts, the bounds applied before it runs,
  and for a root worker a pids cgroup created and removed per run);
* bwrap over a worktree: the same, with a real repository's git mounts, as a run has.

Prints the median and p90 of each, and the median overhead of the sandbox in ms and as
a ratio to plain.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anyio

from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.profiles import BUILTIN_SANDBOXES, SandboxChoice
from rein_aharness.repository import open_workspace, resolve_repository
from rein_aharness.sandbox import Sandbox, SandboxMounts, resolve_bwrap, sandbox_over

PATH = {"PATH": "/usr/bin:/bin"}


def _choice(name: str) -> SandboxChoice:
    return SandboxChoice(name, BUILTIN_SANDBOXES[name])


def _repository(root: Path) -> None:
    repo = root / "bench" / "repo"
    repo.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "base"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)


async def _time(sandbox: Sandbox, argv: list[str]) -> float:
    started = time.perf_counter()
    outcome = await run_in_sandbox(argv, 60, sandbox, PATH)
    elapsed = time.perf_counter() - started
    if outcome.returncode != 0:
        raise SystemExit(f"{argv} exited {outcome.returncode}: {outcome.output_tail[-300:]!r}")
    return elapsed


def _row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return (
        f"{name:<24} median {statistics.median(samples) * 1000:7.2f} ms   p90 {p90 * 1000:7.2f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--argv", nargs="+", default=["true"])
    options = parser.parse_args()
    bwrap = resolve_bwrap(None)
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as scratch:
        root = Path(scratch)
        (root / "plain").mkdir()
        _repository(root)
        repository = await resolve_repository(root, "bench/repo")
        workspace = await open_workspace(repository, root / "worktrees", "bench.1")
        plain = Sandbox(_choice("profile.none-local"), bwrap, SandboxMounts(root / "plain"))
        bare = Sandbox(_choice("profile.bwrap-local"), bwrap, SandboxMounts(root / "plain"))
        full = await sandbox_over(workspace, _choice("profile.bwrap-local"), bwrap)
        samples: dict[str, list[float]] = {
            "plain subprocess": [],
            "bwrap": [],
            "bwrap over a worktree": [],
        }
        for _ in range(3):  # warm-up: page cache, the bwrap binary
            await _time(plain, options.argv)
            await _time(full, options.argv)
        for _ in range(options.runs):
            samples["plain subprocess"].append(await _time(plain, options.argv))
            samples["bwrap"].append(await _time(bare, options.argv))
            samples["bwrap over a worktree"].append(await _time(full, options.argv))
    print(
        f"{platform.node()}: {os.cpu_count()} cpus, uid {os.geteuid()}, "
        f"{options.runs} runs of {options.argv}"
    )
    for name, values in samples.items():
        print(_row(name, values))
    base = statistics.median(samples["plain subprocess"])
    for name in ("bwrap", "bwrap over a worktree"):
        median = statistics.median(samples[name])
        print(
            f"overhead {name:<22} +{(median - base) * 1000:6.2f} ms per run "
            f"({median / base:.1f}x plain)"
        )


if __name__ == "__main__":
    anyio.run(main)
