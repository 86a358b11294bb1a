"""Escape cases for the result directory mounted at /rein/report (real bwrap): the
approach can write its result file and nothing else outside its worktree, cannot swap
the file after it exited, and the worker's reading never follows what it planted."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from ops_contracts import GatewayEvidence
from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.gateway.report_evidence import with_report
from rein_aharness.sandbox import SandboxMounts
from rein_aharness.sandbox.process import Sandbox
from rein_aharness.sandbox.result_file import (
    MAX_REPORT_DEPTH,
    RESULT_FILE,
    Report,
    make_report_dir,
    read_report,
)
from rein_worker_kit import BWRAP, BWRAP_LOCAL, ActivityCore, Repos, RunCommand, git

ENV = {"PATH": "/usr/bin:/bin", "REIN_RESULT_FILE": str(RESULT_FILE)}
ALL = frozenset({"resolved_model", "tokens_spent", "tool_events_count"})


def _sandbox(tmp_path: Path) -> tuple[Sandbox, Path]:
    worktree = tmp_path / "wt"
    worktree.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    report_dir = make_report_dir(scratch)
    return Sandbox(BWRAP_LOCAL, BWRAP, SandboxMounts(worktree, None, report_dir)), report_dir


async def _sh(sandbox: Sandbox, script: str) -> tuple[int | None, str]:
    outcome = await run_in_sandbox(["sh", "-c", script], 20, sandbox, ENV)
    return outcome.returncode, outcome.output_tail.decode("utf-8", "replace")


async def test_the_result_file_is_writable_and_nothing_beside_its_directory(
    tmp_path: Path,
) -> None:
    sandbox, report_dir = _sandbox(tmp_path)
    script = (
        'echo \'{"tool_events_count": 2}\' > "$REIN_RESULT_FILE" && echo wrote; '
        "echo x > /rein/other 2>/dev/null && echo ESCAPED-REIN; "
        "echo x > /rein/report/../../outside 2>/dev/null && echo ESCAPED-DOTDOT; "
        "mkdir /rein/report2 2>/dev/null && echo ESCAPED-MKDIR; "
        "umount /rein/report 2>/dev/null && echo ESCAPED-UMOUNT; "
        "mv /rein/report /rein/moved 2>/dev/null && echo ESCAPED-MOVE; "
        "echo LS; ls -a /rein"
    )
    returncode, output = await _sh(sandbox, script)
    assert returncode == 0, output
    assert "wrote" in output and "ESCAPED" not in output
    assert output.split("LS\n", 1)[1].split() == [".", "..", "report"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["wt", "scratch", "report", "result.json"]
    )
    report = read_report(report_dir, ALL)
    assert (report.status, report.tool_events_count) == ("accepted", 2)


async def test_replacing_the_result_file_by_a_symlink_after_exit_is_impossible(
    tmp_path: Path,
) -> None:
    """A process left behind to swap the good file for a symlink dies with the sandbox,
    before the worker reads: the report read is the one written."""
    sandbox, report_dir = _sandbox(tmp_path)
    good = json.dumps({"resolved_model": "model-a"})
    script = (
        f"printf '%s' '{good}' > \"$REIN_RESULT_FILE\"; "
        '(sleep 1; rm -f "$REIN_RESULT_FILE"; ln -s /etc/passwd "$REIN_RESULT_FILE") & '
        "exit 0"
    )
    returncode, _ = await _sh(sandbox, script)
    assert returncode == 0
    await anyio.sleep(1.5)  # longer than the swapper would have waited
    result = report_dir / "result.json"
    assert result.is_file() and not result.is_symlink()
    assert read_report(report_dir, ALL).resolved_model == "model-a"


async def test_a_symlink_planted_in_the_sandbox_is_never_followed_by_the_worker(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "worker-secret.json"
    secret.write_text(json.dumps({"resolved_model": "LEAKED"}))
    sandbox, report_dir = _sandbox(tmp_path)
    returncode, _ = await _sh(sandbox, f'ln -s {secret} "$REIN_RESULT_FILE"')
    assert returncode == 0
    report = read_report(report_dir, ALL)
    assert (report.status, report.problem, report.resolved_model) == (
        "refused",
        "symlink",
        None,
    )


def test_nesting_at_the_bound_is_read_and_one_deeper_is_refused(tmp_path: Path) -> None:
    report_dir = make_report_dir(tmp_path)
    inner = "[" * (MAX_REPORT_DEPTH - 1) + "]" * (MAX_REPORT_DEPTH - 1)
    (report_dir / "result.json").write_text('{"x": ' + inner + ', "tool_events_count": 1}')
    assert read_report(report_dir, ALL).tool_events_count == 1
    (report_dir / "result.json").write_text('{"x": [' + inner + "]}")
    assert read_report(report_dir, ALL).problem == "too_deep"
    # brackets inside strings are text, not nesting
    (report_dir / "result.json").write_text(json.dumps({"x": "[" * 100, "tool_events_count": 4}))
    assert read_report(report_dir, ALL).tool_events_count == 4


async def test_another_attempts_result_directory_is_not_visible(
    repos: Repos, run_command: RunCommand
) -> None:
    """Each attempt binds only its own directory; the approach finds no other report and
    the worker state (where other attempts' scratch lives) is not in the sandbox."""
    repo = repos.make()
    script = (
        "find / -xdev -name result.json 2>/dev/null > briefs/result.md; "
        "ls /rein >> briefs/result.md; "
        "git add briefs && git commit -qm result"
    )
    await run_command("probe", script)
    [ref] = Repos.landings(repo)
    landed = git(repo, "show", f"{ref}:briefs/result.md")
    assert "result.json" not in landed
    assert landed.splitlines()[0] == "report"


async def test_a_locked_tree_left_in_the_result_directory_is_removed_with_the_attempt(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, run_command: RunCommand
) -> None:
    repos.make()
    script = (
        "mkdir -p /rein/report/a/b && echo x > /rein/report/a/b/f && "
        "chmod 000 /rein/report/a/b /rein/report/a && chmod 500 /rein/report; "
        "echo x > briefs/x.md && git add briefs && git commit -qm result"
    )
    run_id, runtime = await run_command("lock", script)
    [report] = runtime.worker.reports
    assert report.close is not None and report.close.state == "delivered"
    assert (await activity_core.row(run_id))["state"] == "succeeded"
    assert list((tmp_path / "state" / "worktrees").iterdir()) == []


def test_a_report_the_contract_would_refuse_is_refused_not_a_broken_close() -> None:
    """with_report's last check: a value result_file.py let through but the contract
    refuses (here a bool count, which the reader never yields) refuses the report."""
    evidence = GatewayEvidence(
        contract_version="1.0",
        request_id="r",
        profile_ref="harness.x@1.0.0",
        rein_id="rein-aharness",
        rein_version="0.1.0",
        outcome="succeeded",
    )
    bad = Report(status="accepted", tool_events_count=True)
    merged = with_report(evidence, bad)
    assert (merged.result_report, merged.result_report_problem) == ("refused", "out_of_bounds")
    assert merged.tool_events_count is None
    good = with_report(evidence, Report(status="accepted", tool_events_count=3))
    assert (good.result_report, good.tool_events_count) == ("accepted", 3)
