"""The worker's credentials from files: ACTIVITY_CORE_WORKER_TOKEN_FILE and
REIN_AHARNESS_GLAS_TOKEN_FILE name files whose contents are the value (a mounted
Kubernetes Secret), one trailing newline dropped. A file that cannot be used, or the
variable set as well, stops every command at start with one line naming the `_FILE`
variable (exit 2), never the contents."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from ops_devsupport.processes import run_console_script
from rein_aharness.cli import main
from rein_aharness.outbox import OutboxStore
from rein_aharness.settings import SettingsError, load_settings

BASE = "http://activity-core.test"
RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
WORKER = "rein-aharness@railiance01"
TOKEN = "worker-token-from-a-file-0123"
WORKER_TOKEN_FILE = "ACTIVITY_CORE_WORKER_TOKEN_FILE"
GLAS_TOKEN_FILE = "REIN_AHARNESS_GLAS_TOKEN_FILE"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.upper().startswith(("ACTIVITY_CORE_", "REIN_AHARNESS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(tmp_path / "state"))


def _secret(tmp_path: Path, name: str, content: bytes) -> str:
    path = tmp_path / "secrets" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return str(path)


# -- what is read ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "value"),
    [
        (TOKEN.encode(), TOKEN),
        (TOKEN.encode() + b"\n", TOKEN),  # kubectl create secret --from-file keeps it
        (TOKEN.encode() + b"\r\n", TOKEN),
    ],
)
def test_the_credentials_are_read_from_their_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes, value: str
) -> None:
    monkeypatch.setenv(WORKER_TOKEN_FILE, _secret(tmp_path, "worker", content))
    monkeypatch.setenv(GLAS_TOKEN_FILE, _secret(tmp_path, "glas", b"glas-" + content))
    settings = load_settings()
    assert settings.activity_core_worker_token is not None
    assert settings.activity_core_worker_token.get_secret_value() == value
    assert settings.rein_aharness_glas_token is not None
    assert settings.rein_aharness_glas_token.get_secret_value() == "glas-" + value
    assert value not in repr(settings)


def test_a_file_of_64_kib_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(WORKER_TOKEN_FILE, _secret(tmp_path, "worker", b"t" * 64 * 1024))
    settings = load_settings()
    assert settings.activity_core_worker_token is not None
    assert len(settings.activity_core_worker_token.get_secret_value()) == 64 * 1024


def test_each_credential_comes_from_where_it_is_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # an empty `_FILE` counts as unset, like every empty variable
    monkeypatch.setenv(WORKER_TOKEN_FILE, "")
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_TOKEN", TOKEN)
    monkeypatch.setenv(GLAS_TOKEN_FILE, _secret(tmp_path, "glas", b"glas-token\n"))
    settings = load_settings()
    assert settings.activity_core_worker_token is not None
    assert settings.activity_core_worker_token.get_secret_value() == TOKEN
    assert settings.rein_aharness_glas_token is not None
    assert settings.rein_aharness_glas_token.get_secret_value() == "glas-token"


def test_replay_sends_the_token_the_file_holds(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_close: Callable[..., dict[str, Any]],
    projection: Callable[..., Any],
) -> None:
    monkeypatch.setenv("ACTIVITY_CORE_URL", BASE)
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_ID", WORKER)
    monkeypatch.setenv(WORKER_TOKEN_FILE, _secret(tmp_path, "worker", TOKEN.encode() + b"\n"))
    OutboxStore(tmp_path / "state" / "close-outbox").enqueue_close(**make_close())
    body = {**projection(state="succeeded"), "close_disposition": "applied"}
    with respx.mock(base_url=BASE) as router:
        route = router.post(f"/ops-runs/{RUN}/complete").mock(
            return_value=httpx.Response(200, json=body)
        )
        assert main(["close-outbox", "replay"]) == 0, capsys.readouterr().err
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {TOKEN}"


# -- what is refused ---------------------------------------------------------------------------

SECRET_PART = "SECRET-PART-0123"


def _problem(tmp_path: Path, case: str) -> tuple[str, str]:
    """(the _FILE variable's value, what the message must say) for one unusable file."""
    if case == "missing":
        path = str(tmp_path / "secrets" / "rein-aharness-3")
        return path, f"cannot read {path} (No such file or directory)"
    if case == "directory":
        (tmp_path / "secrets").mkdir(exist_ok=True)
        path = str(tmp_path / "secrets")
        return path, f"cannot read {path} (Is a directory)"
    contents = {
        "empty": (b"", "is empty"),
        "only a newline": (b"\n", "is empty"),
        "only blanks": (b"   \n", "is empty"),
        "not UTF-8": (b"\xff\xfe" + SECRET_PART.encode(), "is not UTF-8 text"),
        "over 64 KiB": (SECRET_PART.encode() * 5000, "is larger than 64 KiB"),
        "two lines": (f"line-one\n{SECRET_PART}\n".encode(), "must be one line"),
        "two newlines": (f"{SECRET_PART}\n\n".encode(), "must be one line"),
    }
    content, says = contents[case]
    path = _secret(tmp_path, "token", content)
    return path, says if says == "must be one line" else f"{path} {says}"


CASES = [
    "missing",
    "directory",
    "empty",
    "only a newline",
    "only blanks",
    "not UTF-8",
    "over 64 KiB",
    "two lines",
    "two newlines",
]


@pytest.mark.parametrize("file_variable", [WORKER_TOKEN_FILE, GLAS_TOKEN_FILE])
@pytest.mark.parametrize("case", CASES)
def test_an_unusable_file_is_named_on_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, file_variable: str, case: str
) -> None:
    path, says = _problem(tmp_path, case)
    monkeypatch.setenv(file_variable, path)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"invalid setting {file_variable}: ")
    assert says in message
    assert "\n" not in message and SECRET_PART not in message


@pytest.mark.parametrize(
    ("variable", "set_as"),
    [
        ("ACTIVITY_CORE_WORKER_TOKEN", "ACTIVITY_CORE_WORKER_TOKEN"),
        ("REIN_AHARNESS_GLAS_TOKEN", "REIN_AHARNESS_GLAS_TOKEN"),
        # pydantic-settings would read this one too
        ("ACTIVITY_CORE_WORKER_TOKEN", "activity_core_worker_token"),
    ],
)
def test_the_variable_and_its_file_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, set_as: str
) -> None:
    monkeypatch.setenv(f"{variable}_FILE", _secret(tmp_path, "token", TOKEN.encode()))
    monkeypatch.setenv(set_as, SECRET_PART)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting {variable}_FILE: {variable} is set as well; set only one"
    )


def test_every_problem_is_named_on_the_same_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(WORKER_TOKEN_FILE, str(tmp_path / "absent"))
    monkeypatch.setenv(GLAS_TOKEN_FILE, _secret(tmp_path, "glas", b""))
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", "relative")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    for variable in (WORKER_TOKEN_FILE, GLAS_TOKEN_FILE, "REIN_AHARNESS_STATE_DIR"):
        assert f"{variable}: " in message
    assert "\n" not in message


@pytest.mark.parametrize("case", ["missing", "two lines"])
def test_every_command_stops_with_exit_2(tmp_path: Path, case: str) -> None:
    path, says = _problem(tmp_path, case)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ACTIVITY_CORE_")},
        WORKER_TOKEN_FILE: path,
    }
    for argv in (["close-outbox", "status"], ["close-outbox", "replay"], ["run", "--once"]):
        done = run_console_script("rein-aharness", *argv, env=env)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stdout == ""
        assert done.stderr.startswith(f"rein-aharness: invalid setting {WORKER_TOKEN_FILE}: ")
        assert says in done.stderr and SECRET_PART not in done.stderr
        assert len(done.stderr.splitlines()) == 1
