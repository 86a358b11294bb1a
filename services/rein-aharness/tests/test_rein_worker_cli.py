"""`rein-aharness run`: configuration problems stop it at start with one line and exit 2."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rein_aharness.cli import main
from rein_aharness.outbox import OutboxPathError
from rein_aharness.worker.app import hold_worker_lock
from rein_worker_kit import CATALOGUE


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    # `run` configures the `rein_aharness` logger for the process; undo it per test.
    logger = logging.getLogger("rein_aharness")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("ACTIVITY_CORE_", "REIN_AHARNESS_")):
            monkeypatch.delenv(name)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(CATALOGUE)
    (tmp_path / "repositories").mkdir()
    monkeypatch.setenv("ACTIVITY_CORE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_ID", "rein-aharness@test01")
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("REIN_AHARNESS_PROFILES", str(profiles))
    monkeypatch.setenv("REIN_AHARNESS_REPOSITORIES_ROOT", str(tmp_path / "repositories"))
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
