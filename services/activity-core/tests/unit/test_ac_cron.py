"""The 5-field cron validator of definition schedules."""

from __future__ import annotations

import pytest

from activity_core.definitions.cron import CronError, validate_cron


@pytest.mark.parametrize(
    "expression",
    [
        "0 6 * * 1-5",
        "*/15 * * * *",
        "0,30 8-18/2 * * *",
        "0 0 1 jan *",
        "0 0 1 JAN-MAR *",
        "0 6 * * MON-FRI",
        "0 6 * * sun",
        "0 6 * * 7",
        "0 6 * * 0",
        "59 23 31 12 6",
        "  0   6  *  *  1-5 ",
        "0 6 1-31/7 * *",
    ],
)
def test_valid_expressions(expression: str) -> None:
    validate_cron(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "5 fields"),
        ("* * * *", "5 fields"),
        ("0 0 * * * *", "5 fields"),
        ("@hourly", "5 fields"),
        ("-1 * * * *", "not a number"),
        ("60 * * * *", "out of range 0-59"),
        ("* 24 * * *", "out of range 0-23"),
        ("* * 32 * *", "out of range 1-31"),
        ("* * * 0 *", "out of range 1-12"),
        ("* * * * 8", "out of range 0-7"),
        ("* * * * mon-sun", "after its end"),
        ("* * * dec-jan *", "after its end"),
        ("1,,2 * * * *", "empty list item"),
        ("*/0 * * * *", "positive integer"),
        ("*/x * * * *", "positive integer"),
        ("*/99 * * * *", "larger than"),
        ("5/10 * * * *", "needs '*' or a range"),
        ("L * * * *", "not a number"),
        ("* * * * 1#2", "neither a number"),
        ("* * * foo *", "neither a number"),
        ("\u00b2 * * * *", "not a number"),
        ("* * * * mon-", "neither a number"),
    ],
)
def test_invalid_expressions(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=None) as caught:
        validate_cron(expression)
    assert message in str(caught.value)
