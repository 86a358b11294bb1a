"""Secrets from files: ACTIVITY_CORE_DATABASE_URL_FILE, ACTIVITY_CORE_OPERATOR_TOKEN_FILE and
ACTIVITY_CORE_WORKER_TOKEN_FILE name files whose contents are the value (as a mounted
Kubernetes Secret hands them over). A real `serve` reads its database URL and tokens from
files; a file that cannot be used stops every command with one line naming the `_FILE`
variable (never the value), exit 2."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from ac_serve import assert_stopped_naming, clean_env, run_cli, serve_env, serve_process
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN
from activity_core.settings import SECRET_VARIABLES, SettingsError, secrets_from_files


def secret(tmp_path: Path, name: str, value: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(value.encode() if isinstance(value, str) else value)
    path.chmod(0o600)
    return str(path)


async def test_serve_takes_its_database_url_and_tokens_from_files(
    db_dsn: str, tmp_path: Path
) -> None:
    env = serve_env(
        "",
        ACTIVITY_CORE_DATABASE_URL_FILE=secret(tmp_path, "db", db_dsn + "\n"),
        ACTIVITY_CORE_OPERATOR_TOKEN_FILE=secret(tmp_path, "operator", OPERATOR_TOKEN + "\n"),
        ACTIVITY_CORE_WORKER_TOKEN_FILE=secret(tmp_path, "worker", WORKER_TOKEN),
        ACTIVITY_CORE_WORKER_ID=WORKER_ID,
    )
    del env["ACTIVITY_CORE_DATABASE_URL"]
    async with (
        serve_process(env) as (_, url),
        httpx.AsyncClient(base_url=url, trust_env=False) as http,
    ):
        read = await http.get("/ops-runs", headers={"authorization": f"Bearer {OPERATOR_TOKEN}"})
        assert read.status_code == 200, read.text
        claim = await http.post(
            "/ops-runs/claim",
            json={"worker_id": WORKER_ID},
            headers={"authorization": f"Bearer {WORKER_TOKEN}"},
        )
        assert claim.status_code == 200, claim.text
        # the newline the file ended with is not part of the token
        wrong = await http.get("/ops-runs", headers={"authorization": f"Bearer {OPERATOR_TOKEN}x"})
        assert wrong.status_code == 401
    await asyncio.sleep(0)


@pytest.mark.parametrize("variable", SECRET_VARIABLES)
def test_a_secret_file_that_cannot_be_used_stops_the_command(variable: str, tmp_path: Path) -> None:
    file_variable = f"{variable}_FILE"
    cases = {
        "missing": str(tmp_path / "nope"),
        "empty": secret(tmp_path, "empty", "\n"),
        "not-utf8": secret(tmp_path, "binary", b"\xff\xfe\x00"),
        "too-large": secret(tmp_path, "large", "x" * 70_000),
        "a-directory": str(tmp_path),
    }
    for case, path in cases.items():
        completed = run_cli("migrate", env=clean_env(**{file_variable: path}))
        line = assert_stopped_naming(completed, file_variable)
        assert "x" * 100 not in line, case
    both = run_cli(
        "migrate",
        env=clean_env(**{file_variable: secret(tmp_path, "s", "a" * 20), variable: "b" * 20}),
    )
    assert "set only one" in assert_stopped_naming(both, file_variable)


def test_a_secret_read_from_a_file_is_checked_like_the_variable(tmp_path: Path) -> None:
    completed = run_cli(
        "migrate",
        env=clean_env(ACTIVITY_CORE_OPERATOR_TOKEN_FILE=secret(tmp_path, "short", "too-short\n")),
    )
    line = assert_stopped_naming(completed, "ACTIVITY_CORE_OPERATOR_TOKEN")
    assert "too-short" not in line
    assert "at least 16 characters" in line


def test_secrets_from_files_reads_only_what_is_named(tmp_path: Path) -> None:
    assert secrets_from_files({}) == {}
    path = secret(tmp_path, "t", "token-with-crlf-0123456\r\n")
    assert secrets_from_files({"ACTIVITY_CORE_WORKER_TOKEN_FILE": path}) == {
        "ACTIVITY_CORE_WORKER_TOKEN": "token-with-crlf-0123456"
    }
    # a blank variable is unset: the file stands
    assert secrets_from_files(
        {"ACTIVITY_CORE_WORKER_TOKEN_FILE": path, "ACTIVITY_CORE_WORKER_TOKEN": " "}
    ) == {"ACTIVITY_CORE_WORKER_TOKEN": "token-with-crlf-0123456"}
    with pytest.raises(SettingsError, match=r"^ACTIVITY_CORE_DATABASE_URL_FILE: "):
        secrets_from_files({"ACTIVITY_CORE_DATABASE_URL_FILE": str(tmp_path / "absent")})
