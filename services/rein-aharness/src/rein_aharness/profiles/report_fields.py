"""The fields an approach may report in its result file, as a profile names them.

A profile's `command.report` lists the ones its approach is trusted to report; anything
else in the file is dropped (sandbox/result_file.py reads it, gateway/report_evidence.py
merges it into the evidence).
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["REPORT_FIELDS", "ReportField"]

ReportField = Literal[
    "resolved_model",
    "tokens_spent",
    "tool_events_count",
    "tool_events_completeness",
    "summary",
]
REPORT_FIELDS: frozenset[str] = frozenset(get_args(ReportField))
