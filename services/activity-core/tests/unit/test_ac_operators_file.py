"""The operators file: named operators and viewers, each refusal one line saying where."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from activity_core.http.auth import (
    Authenticator,
    CredentialsFileError,
    OperatorCredential,
    load_operator_credentials,
)
from activity_core.queue.errors import QueueRefusal
from ops_contracts import OperatorRole, RefusalCode


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "operators.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_a_good_file_names_each_operator_with_its_role(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "operators": {
                "alice": {"token": digest("a" * 20), "role": "operator"},
                "bob@example.org": {"token": digest("b" * 20), "role": "viewer"},
            }
        },
    )
    assert load_operator_credentials(path) == {
        "alice": OperatorCredential(digest("a" * 20), OperatorRole.operator),
        "bob@example.org": OperatorCredential(digest("b" * 20), OperatorRole.viewer),
    }


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ("{", "not valid JSON"),
        ({"workers": {}}, 'expected {"operators"'),
        ({"operators": {}}, 'expected {"operators"'),
        ({"operators": {"has space": {"token": digest("x"), "role": "viewer"}}}, "not a valid"),
        ({"operators": {"anonymous": {"token": digest("x"), "role": "viewer"}}}, "reserved"),
        ({"operators": {"a": "sha256:" + "0" * 64}}, 'expected {"token"'),
        ({"operators": {"a": {"token": digest("x"), "role": "viewer", "x": 1}}}, "expected"),
        ({"operators": {"a": {"token": "plain-text", "role": "viewer"}}}, "a.token"),
        ({"operators": {"a": {"token": digest("x"), "role": "admin"}}}, "a.role"),
        ({"operators": {"a": {"token": digest("x")}}}, "a.role"),
        (
            {
                "operators": {
                    "a": {"token": digest("x"), "role": "viewer"},
                    "b": {"token": digest("x"), "role": "operator"},
                }
            },
            "same token",
        ),
    ],
)
def test_a_bad_file_is_one_line_saying_where(tmp_path: Path, data: Any, said: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(CredentialsFileError) as caught:
        load_operator_credentials(path)
    assert said in str(caught.value)
    assert str(caught.value).startswith(str(path))
    assert "\n" not in str(caught.value)


def test_the_token_operator_and_named_ones_side_by_side() -> None:
    auth = Authenticator(
        operator_token="t" * 20,
        workers={"w": digest("w" * 20)},
        allow_unauth=False,
        operators={"vera": OperatorCredential(digest("v" * 20), OperatorRole.viewer)},
    )
    assert auth.operator_names == {"vera": OperatorRole.viewer, "operator": OperatorRole.operator}
    operator = auth.require_operator("t" * 20)
    assert (operator.name, operator.role) == ("operator", OperatorRole.operator)
    viewer = auth.require_viewer("v" * 20)
    assert (viewer.name, viewer.role) == ("vera", OperatorRole.viewer)
    with pytest.raises(QueueRefusal) as caught:
        auth.require_operator("v" * 20)
    assert caught.value.code is RefusalCode.forbidden
    with pytest.raises(QueueRefusal) as caught:
        auth.require_viewer("w" * 20)
    assert caught.value.code is RefusalCode.forbidden
    with pytest.raises(QueueRefusal) as caught:
        auth.authenticate_worker("v" * 20)
    assert caught.value.code is RefusalCode.forbidden


def test_the_file_may_not_name_the_token_operator() -> None:
    with pytest.raises(CredentialsFileError, match=r"operators\.operator"):
        Authenticator(
            operator_token="t" * 20,
            workers={},
            allow_unauth=False,
            operators={"operator": OperatorCredential(digest("x"), OperatorRole.viewer)},
        )
