"""Merge what passed of an approach's report (sandbox/result_file.py) into its evidence.

A reported model replaces the catalogue's `resolved_model`; reported tokens fill
`input_tokens`, `output_tokens` and `tokens_spent` (the total), each only if reported (a
missing total is not computed from its parts: that would be a number nobody reported);
`tool_events_completeness` stays `unavailable` unless reported. `result_report` and
`result_report_problem` say how the report was taken. No report: the evidence as before.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from ops_contracts import GatewayEvidence
from rein_aharness.gateway.request import QueuedRequest
from rein_aharness.sandbox import Sandbox
from rein_aharness.sandbox.result_file import Report, read_report

__all__ = ["approach_report", "result_file_env", "with_report"]

log = logging.getLogger(__name__)


def result_file_env(sandbox: Sandbox) -> dict[str, str]:
    """`REIN_RESULT_FILE` for a command approach in `sandbox` (none without a result dir)."""
    path = sandbox.result_file()
    return {} if path is None else {"REIN_RESULT_FILE": path}


def approach_report(request: QueuedRequest, sandbox: Sandbox) -> Report | None:
    """The command approach's report, once it exited; None for a brief approach."""
    spec = request.profile.command
    report_dir = sandbox.mounts.report_dir
    if spec is None or request.profile.brief is not None or report_dir is None:
        return None
    report = read_report(report_dir, frozenset(spec.report))
    if report.status is not None:
        # The summary is the approach's own one line: for operators' logs, never evidence.
        log.info(
            "approach report",
            extra={
                "run_id": request.run_id,
                "result_report": report.status,
                "result_report_problem": report.problem,
                "summary": report.summary,
            },
        )
    return report


def with_report(evidence: GatewayEvidence, report: Report | None) -> GatewayEvidence:
    if report is None or report.status is None:
        return evidence
    update: dict[str, object] = {
        "result_report": report.status,
        "result_report_problem": report.problem,
    }
    if report.resolved_model is not None:
        update["resolved_model"] = report.resolved_model
    for part, key in (("input", "input_tokens"), ("output", "output_tokens")):
        if part in report.tokens:
            update[key] = report.tokens[part]
    if "total" in report.tokens:
        update["tokens_spent"] = report.tokens["total"]
    if report.tool_events_count is not None:
        update["tool_events_count"] = report.tool_events_count
    if report.tool_events_completeness is not None:
        update["tool_events_completeness"] = report.tool_events_completeness
    # Validated again as a whole: the contract's model is the last word on its fields.
    # result_file.py checked every value already; should the two ever disagree, the
    # report is refused rather than the close broken.
    try:
        return GatewayEvidence.model_validate({**evidence.model_dump(), **update})
    except ValidationError:
        return evidence.model_copy(
            update={"result_report": "refused", "result_report_problem": "out_of_bounds"}
        )
