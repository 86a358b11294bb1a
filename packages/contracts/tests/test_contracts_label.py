"""The one label grammar: what definitions declare, claims and listings filter by, and the
worker CLI takes (``pydantic.TypeAdapter(ops_contracts.Label)``)."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from ops_contracts import ClaimRequest, Label, label_error
from ops_contracts.queue import _LABEL_SCHEMA_PATTERN, MAX_LABEL_LENGTH

LABEL = TypeAdapter(Label)

ACCEPTED = [
    "automated",
    "research-brief",
    "team:ops/x_1.2",
    "prio#1",
    "needs+review",
    "café",
    "研究/β",
    "a" * MAX_LABEL_LENGTH,
    "x",
]
REFUSED = [
    "",
    "a" * (MAX_LABEL_LENGTH + 1),
    "a,b",  # the worker CLI separates labels with commas
    ",",
    "has space",
    " lead",
    "tab\there",
    "new\nline",
    "nbsp\u00a0here",
    "ctl\x07",
    "del\x7f",
    "c1\x9b",
    "zero\u200bwidth",  # a format character (Cf)
    "bidi\u202eoverride",
    "private\ue000use",
    "nul\x00",
]


@pytest.mark.parametrize("value", ACCEPTED)
def test_labels_the_grammar_accepts(value: str) -> None:
    assert label_error(value) is None
    assert LABEL.validate_python(value) == value
    assert LABEL.validate_json(f'"{value}"') == value


@pytest.mark.parametrize("value", REFUSED)
def test_labels_the_grammar_refuses(value: str) -> None:
    problem = label_error(value)
    assert problem is not None and problem.startswith("a label must")
    with pytest.raises(ValidationError, match="a label must"):
        LABEL.validate_python(value)
    with pytest.raises(ValidationError):
        ClaimRequest.model_validate({"worker_id": "w", "labels": [value]})


def test_a_label_is_a_string_never_a_coerced_value() -> None:
    for value in (1, True, None, ["a"]):
        with pytest.raises(ValidationError):
            ClaimRequest.model_validate({"worker_id": "w", "labels": [value]})


@given(st.text(max_size=MAX_LABEL_LENGTH + 5))
def test_the_schema_pattern_admits_every_label(value: str) -> None:
    """The JSON Schema pattern (OpenAPI) is a necessary condition: whatever the grammar
    accepts matches it, so a client that checks the schema never refuses a good label."""
    if label_error(value) is None:
        assert re.fullmatch(_LABEL_SCHEMA_PATTERN, value)
        assert LABEL.validate_python(value) == value
    else:
        with pytest.raises(ValidationError):
            LABEL.validate_python(value)


def test_the_schema_documents_the_grammar() -> None:
    schema = ClaimRequest.model_json_schema()["properties"]["labels"]["anyOf"][0]["items"]
    assert schema["type"] == "string"
    assert (schema["minLength"], schema["maxLength"]) == (1, MAX_LABEL_LENGTH)
    assert schema["pattern"] == _LABEL_SCHEMA_PATTERN
    assert "comma" in schema["description"]
