"""The result file: an approach in a real bubblewrap sandbox reports its model, tokens and
tool events through REIN_RESULT_FILE, the real worker reads it strictly after the
approach exited, and what passes reaches the close (as sent) and the stored ops_runs
evidence; every hostile report is refused or dropped as sandbox/result_file.py documents,
and the work is judged as before."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from ops_contracts.gateway import ResultReport, ResultReportProblem
from ops_evidence import RESULT_REPORT, RESULT_REPORT_PROBLEMS
from rein_aharness.profiles.model import CommandSpec
from rein_worker_kit import (
    ActivityCore,
    RecordingTransport,
    Repos,
    command_profile,
    run_worker_once,
    worker_settings,
    write_catalogue,
)

ALL_FIELDS = (
    "resolved_model",
    "tokens_spent",
    "tool_events_count",
    "tool_events_completeness",
    "summary",
)
COMMIT = "echo x > briefs/x.md && git add -A && git commit -qm work"
GOOD = {
    "resolved_model": "claude-sonnet-4-6",
    "tokens_spent": {"input": 1200, "output": 345, "total": 1545},
    "tool_events_count": 7,
    "tool_events_completeness": "partial",
    "summary": "wrote the brief",
}


def _write(content: str) -> str:
    """Shell that writes `content` (JSON text) to the result file."""
    return f"printf '%s' {json.dumps(content)} > \"$REIN_RESULT_FILE\""


async def _run(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    script: str,
    *,
    report: tuple[str, ...] = ALL_FIELDS,
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Run `script` as a sandboxed command profile through the worker: the stored row,
    the evidence of the close as sent, and the stored execution evidence."""
    repos.make()
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml", command_profile("agent", script, report=report)
    )
    settings = worker_settings(tmp_path, repos, catalogue)
    run_id: uuid.UUID = await activity_core.granted_run("agent")
    transport = RecordingTransport(activity_core.transport())
    await run_worker_once(settings, transport)
    row = await activity_core.row(run_id)
    [close] = transport.sent("/complete") or transport.sent("/fail")
    result = close["result"]
    sent = result.get("evidence") or result["execution_evidence"]
    return row, sent, row["result"]["execution_evidence"]


async def test_a_good_report_reaches_the_close_and_the_stored_evidence_exactly(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    row, sent, stored = await _run(
        activity_core, repos, tmp_path, f"{_write(json.dumps(GOOD))} && {COMMIT}"
    )
    assert row["state"] == "succeeded"
    expected = {
        "resolved_model": "claude-sonnet-4-6",
        "input_tokens": 1200,
        "output_tokens": 345,
        "tokens_spent": 1545,
        "tool_events_count": 7,
        "tool_events_completeness": "partial",
        "result_report": "accepted",
    }
    for evidence in (sent, stored):
        assert {k: evidence.get(k) for k in expected} == expected
        assert "result_report_problem" not in evidence
        assert "summary" not in json.dumps(evidence)  # the summary is log-only


async def test_fields_the_profile_does_not_allow_are_dropped_and_nothing_is_invented(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    report = {**GOOD, "prompt": "secret prompt", "api_key": "sk-123"}
    _, sent, stored = await _run(
        activity_core,
        repos,
        tmp_path,
        f"{_write(json.dumps(report))} && {COMMIT}",
        report=("tokens_spent",),
    )
    for evidence in (sent, stored):
        assert evidence["resolved_model"] == "model.test"  # the catalogue's, not reported
        assert evidence["tokens_spent"] == 1545
        assert "tool_events_count" not in evidence
        assert evidence["tool_events_completeness"] == "unavailable"
        assert evidence["result_report"] == "accepted"
        assert "sk-123" not in json.dumps(evidence) and "prompt" not in json.dumps(evidence)


async def test_no_report_leaves_the_evidence_as_before(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    _, sent, stored = await _run(activity_core, repos, tmp_path, COMMIT)
    for evidence in (sent, stored):
        assert evidence["resolved_model"] == "model.test"
        assert evidence["tool_events_completeness"] == "unavailable"
        for key in ("tokens_spent", "input_tokens", "tool_events_count", "result_report"):
            assert key not in evidence


HOSTILE = {
    "nan": (_write('{"tool_events_count": NaN}'), "refused", "not_finite"),
    "infinity": (_write('{"tokens_spent": {"total": 1e999}}'), "refused", "not_finite"),
    "duplicate_key": (
        _write('{"resolved_model": "a", "resolved_model": "b"}'),
        "refused",
        "duplicate_key",
    ),
    "deep_nesting": (
        'python3 -c \'import os; open(os.environ["REIN_RESULT_FILE"], "w")'
        '.write("[" * 5000 + "]" * 5000)\'',
        "refused",
        "too_deep",
    ),
    "ten_mib": ('head -c 10485760 /dev/zero > "$REIN_RESULT_FILE"', "refused", "too_large"),
    "not_json": (_write("model=claude"), "refused", "not_json"),
    "not_an_object": (_write("[1, 2, 3]"), "refused", "not_an_object"),
    "symlink_to_etc_passwd": ('ln -s /etc/passwd "$REIN_RESULT_FILE"', "refused", "symlink"),
    "fifo": ('mkfifo "$REIN_RESULT_FILE"', "refused", "not_a_regular_file"),
    "directory": ('mkdir "$REIN_RESULT_FILE"', "refused", "not_a_regular_file"),
    "huge_numbers": (
        _write(
            json.dumps(
                {
                    "resolved_model": "m-1",
                    "tokens_spent": {"input": 2**53, "output": 10**400, "total": -1},
                    "tool_events_count": 1.5,
                }
            )
        ),
        "partial",
        "out_of_bounds",
    ),
    "bad_strings": (
        _write(
            json.dumps(
                {
                    "resolved_model": "has spaces\u202e",
                    "tool_events_completeness": "everything",
                    "tokens_spent": {"total": 3},
                }
            )
        ),
        "partial",
        "out_of_bounds",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_hostile_report_is_refused_as_documented_and_the_run_still_closes(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, case: str
) -> None:
    script, status, problem = HOSTILE[case]
    row, sent, stored = await _run(activity_core, repos, tmp_path, f"{script}; {COMMIT}")
    assert row["state"] == "succeeded"  # the work is judged as before
    for evidence in (sent, stored):
        assert evidence["result_report"] == status
        assert evidence["result_report_problem"] == problem
        assert evidence["tool_events_completeness"] == "unavailable"
        assert "tool_events_count" not in evidence
        if status == "refused":
            assert evidence["resolved_model"] == "model.test"
            assert "tokens_spent" not in evidence and "input_tokens" not in evidence
    if case == "huge_numbers":
        assert sent["resolved_model"] == "m-1"
        assert "input_tokens" not in sent and "output_tokens" not in sent
        assert "tokens_spent" not in sent
    if case == "bad_strings":
        assert sent["resolved_model"] == "model.test" and sent["tokens_spent"] == 3


async def test_a_symlink_to_a_worker_file_is_refused(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    worker_file = tmp_path / "profiles.yaml"
    _, sent, stored = await _run(
        activity_core, repos, tmp_path, f'ln -s {worker_file} "$REIN_RESULT_FILE"; {COMMIT}'
    )
    for evidence in (sent, stored):
        assert (evidence["result_report"], evidence["result_report_problem"]) == (
            "refused",
            "symlink",
        )


async def test_a_failed_approach_still_carries_its_report(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    row, sent, _ = await _run(activity_core, repos, tmp_path, f"{_write(json.dumps(GOOD))}; exit 3")
    assert row["state"] == "failed"
    assert row["last_error"] == "the command exited with status 3"
    assert sent["outcome"] == "failed"
    assert sent["tokens_spent"] == 1545 and sent["result_report"] == "accepted"


@pytest.mark.parametrize(
    "report",
    [["resolved_model", "prompt"], ["tokens_spent", "tokens_spent"], "tokens_spent", [1]],
)
def test_a_profile_report_list_is_strict(report: object) -> None:
    with pytest.raises(ValidationError):
        CommandSpec.model_validate({"argv": ["true"], "timeout_s": 1.0, "report": report})


def test_the_report_literals_of_the_contract_are_the_evidence_allowlists() -> None:
    assert set(get_args(ResultReport)) == RESULT_REPORT
    assert set(get_args(ResultReportProblem)) == RESULT_REPORT_PROBLEMS
