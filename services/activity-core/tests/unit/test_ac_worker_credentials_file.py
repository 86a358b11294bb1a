"""The worker credentials file accepts exactly the contracts' worker ids and digests:
`$` alone would let a trailing newline through (re.match), which the queue then refuses
as a body worker_id, so such a worker could never be served."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from activity_core.http.auth import CredentialsFileError, load_worker_credentials
from ops_contracts import WorkerId

DIGEST = "sha256:" + hashlib.sha256(b"token").hexdigest()


def _file(tmp_path: Path, workers: dict[str, str]) -> Path:
    path = tmp_path / "workers.json"
    path.write_text(json.dumps({"workers": workers}))
    return path


@pytest.mark.parametrize(
    ("worker_id", "digest"),
    [("worker-1\n", DIGEST), ("worker-1", DIGEST + "\n"), ("", DIGEST), ("a b", DIGEST)],
)
def test_a_malformed_id_or_digest_is_refused(tmp_path: Path, worker_id: str, digest: str) -> None:
    with pytest.raises(CredentialsFileError):
        load_worker_credentials(_file(tmp_path, {worker_id: digest}))


@pytest.mark.parametrize("worker_id", ["rein-aharness@railiance01", "w_1.2:3/4+5", "x" * 200])
def test_the_file_accepts_what_the_contract_accepts(tmp_path: Path, worker_id: str) -> None:
    TypeAdapter(WorkerId).validate_python(worker_id)
    assert load_worker_credentials(_file(tmp_path, {worker_id: DIGEST})) == {worker_id: DIGEST}


def test_the_contract_refuses_a_trailing_newline_too() -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(WorkerId).validate_python("worker-1\n")
