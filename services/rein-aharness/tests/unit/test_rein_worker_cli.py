"""`rein-aharness run`: configuration problems stop it at start with one line and exit 2."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from ops_contracts import Label
from rein_aharness import cli
from rein_aharness.cli import main
from rein_aharness.outbox import OutboxPathError
from rein_aharness.worker.app import hold_worker_lock
from rein_worker_kit import CATALOGUE, cli_environment

# `run` configures the `rein_aharness` logger for the process; undone per test
pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cli_environment(
        monkeypatch,
        tmp_path,
        "rein-aharness@test01",
        REIN_AHARNESS_STATE_DIR=str(tmp_path / "state"),
    )
    return tmp_path


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ACTIVITY_CORE_URL", None, "ACTIVITY_CORE_URL: required for run"),
        ("ACTIVITY_CORE_WORKER_ID", None, "ACTIVITY_CORE_WORKER_ID: required for run"),
        ("REIN_AHARNESS_PROFILES", None, "REIN_AHARNESS_PROFILES: required for run"),
        ("REIN_AHARNESS_REPOSITORIES_ROOT", None, "REIN_AHARNESS_REPOSITORIES_ROOT: required"),
        ("REIN_AHARNESS_REPOSITORIES_ROOT", "relative/dir", "REIN_AHARNESS_REPOSITORIES_ROOT"),
        ("REIN_AHARNESS_LEASE_SECONDS", "2", "REIN_AHARNESS_LEASE_SECONDS"),
        ("REIN_AHARNESS_WAIT_SECONDS", "21", "REIN_AHARNESS_WAIT_SECONDS"),
        ("REIN_AHARNESS_SHUTDOWN_GRACE_SECONDS", "nan", "REIN_AHARNESS_SHUTDOWN_GRACE_SECONDS"),
        ("REIN_AHARNESS_EVENT_SINK_URL", "not a url", "REIN_AHARNESS_EVENT_SINK_URL"),
        ("REIN_AHARNESS_LOG_LEVEL", "LOUD", "REIN_AHARNESS_LOG_LEVEL"),
        ("REIN_AHARNESS_METRICS_ADDRESS", "localhost", "REIN_AHARNESS_METRICS_ADDRESS"),
        ("REIN_AHARNESS_METRICS_ADDRESS", ":9100", "REIN_AHARNESS_METRICS_ADDRESS"),
        ("REIN_AHARNESS_METRICS_ADDRESS", "localhost:70000", "REIN_AHARNESS_METRICS_ADDRESS"),
        ("REIN_AHARNESS_METRICS_ADDRESS", "localhost:http", "REIN_AHARNESS_METRICS_ADDRESS"),
    ],
)
def test_a_bad_or_missing_setting_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str | None,
    message: str,
) -> None:
    if value is None:
        monkeypatch.delenv(variable)
    else:
        monkeypatch.setenv(variable, value)
    assert main(["run", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    ("url", "without_root", "message"),
    [
        (
            "https://git.example/{target_repo}.git",
            True,
            "REIN_AHARNESS_REPOSITORIES_ROOT: required with REIN_AHARNESS_REPOSITORY_URL",
        ),
        (
            "https://bot:hunter2@git.example/{target_repo}",
            False,
            "REIN_AHARNESS_REPOSITORY_URL: Value error, must not carry credentials",
        ),
        (
            "https://git.example/fixed.git",
            False,
            "REIN_AHARNESS_REPOSITORY_URL: Value error, must contain {target_repo} exactly once",
        ),
    ],
)
def test_a_bad_remote_mode_setting_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    url: str,
    without_root: bool,
    message: str,
) -> None:
    if without_root:
        monkeypatch.delenv("REIN_AHARNESS_REPOSITORIES_ROOT")
    monkeypatch.setenv("REIN_AHARNESS_REPOSITORY_URL", url)
    assert main(["run", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert "hunter2" not in err


def test_a_bad_catalogue_names_the_variable_and_where(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (environment / "profiles.yaml").write_text(
        CATALOGUE.replace("version: 1.0.0", "version: latest", 1)
    )
    assert main(["run", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rein-aharness: REIN_AHARNESS_PROFILES: profiles[0]: ")
    assert "pinned" in err and err.count("\n") == 1


@pytest.mark.parametrize("labels", ["", "has space", ",".join(f"l{i}" for i in range(21))])
def test_bad_labels_are_a_usage_error(labels: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--once", "--labels", labels]) == 2
    assert "--labels" in capsys.readouterr().err


def test_one_run_per_state_directory(environment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = environment / "state"
    state.mkdir(mode=0o700)
    with hold_worker_lock(state):
        with (
            pytest.raises(OutboxPathError, match="another rein-aharness run holds"),
            hold_worker_lock(state),
        ):
            pass
        assert main(["run", "--once"]) == 4
    assert "another rein-aharness run holds" in capsys.readouterr().err


# -- the state directory must lie outside the repositories root --------------------------------


@pytest.mark.parametrize(
    "layout", ["state-inside-root", "root-inside-state", "same", "through-a-symlink", "default"]
)
def test_a_state_dir_overlapping_the_repositories_root_stops_run(
    environment: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    layout: str,
) -> None:
    root = environment / "repositories"
    if layout == "state-inside-root":
        state = root / "state"
    elif layout == "root-inside-state":
        state = environment / "state"
        root = state / "repositories"
        root.mkdir(parents=True)
        monkeypatch.setenv("REIN_AHARNESS_REPOSITORIES_ROOT", str(root))
    elif layout == "same":
        state = root
    elif layout == "through-a-symlink":
        (environment / "elsewhere").symlink_to(root)
        state = environment / "elsewhere" / "state"
    else:
        monkeypatch.delenv("REIN_AHARNESS_STATE_DIR")
        monkeypatch.setenv("XDG_STATE_HOME", str(root / "xdg"))
        state = root / "xdg" / "rein-aharness"
    if layout != "default":
        monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(state))

    assert main(["run", "--once"]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("rein-aharness: REIN_AHARNESS_STATE_DIR")
    assert "REIN_AHARNESS_REPOSITORIES_ROOT" in err
    assert "must live outside the repositories" in err
    assert ("(unset: the default)" in err) == (layout == "default")
    assert not (state / "close-outbox").exists() and not (state / "worktrees").exists()


def test_a_state_dir_beside_the_repositories_root_is_fine(
    environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name that merely starts like the root's is not inside it."""
    from rein_aharness.settings import load_settings
    from rein_aharness.worker.app import check_state_outside_repositories

    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(environment / "repositories-state"))
    settings = load_settings()
    assert settings.rein_aharness_state_dir is not None
    check_state_outside_repositories(settings, settings.rein_aharness_state_dir)


# -- labels: exactly what contracts (and so activity-core) accepts -----------------------------

LABEL_SAMPLES = [
    "automated",
    "research-brief",
    "a/b:c.d_e-f",
    "a+b",
    "team@ops",
    "ünïcødé",
    "日本語",
    "emoji-\U0001f600",
    "x" * 100,
    "x" * 101,
    "has space",
    "tab\tinside",
    "bell\x07",
    "zero\u200bwidth",
    "no\u00a0break",
    'quote"d',
    "semi;colon",
    "[brackets]",
]


@pytest.mark.parametrize("label", LABEL_SAMPLES)
def test_labels_are_accepted_exactly_when_contracts_accepts_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    try:
        TypeAdapter(Label).validate_python(label)
    except ValidationError:
        accepted = False
    else:
        accepted = True
    # stop right after the arguments are parsed
    monkeypatch.delenv("REIN_AHARNESS_PROFILES")

    assert main(["run", "--once", "--labels", f"automated,{label}"]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    if accepted:
        assert err == "rein-aharness: REIN_AHARNESS_PROFILES: required for run\n"
    else:
        assert err.startswith("rein-aharness run: argument --labels: not a label: ")


def test_labels_are_comma_separated_and_reach_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    async def fake_run_worker(settings: Any, catalogue: Any, **options: Any) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(cli, "run_worker", fake_run_worker)
    assert main(["run", "--once", "--labels", " automated , a.b,,research/briefs "]) == 0
    [options] = seen
    assert options["labels"] == ("automated", "a.b", "research/briefs")


def test_a_metrics_address_in_use_stops_run_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("REIN_AHARNESS_METRICS_ADDRESS", f"127.0.0.1:{port}")
        assert main(["run", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        f"rein-aharness: REIN_AHARNESS_METRICS_ADDRESS: cannot listen on 127.0.0.1:{port}: "
    )
