"""The worker's settings: read from the environment at the entry, never at import."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rein_aharness.settings import ReinAharnessSettings, SettingsError, load_settings

VARIABLES = (
    "ACTIVITY_CORE_URL",
    "ACTIVITY_CORE_WORKER_TOKEN",
    "ACTIVITY_CORE_WORKER_ID",
    "REIN_AHARNESS_STATE_DIR",
    "REIN_AHARNESS_PROFILES",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ACTIVITY_CORE_", "REIN_AHARNESS_")):
            monkeypatch.delenv(name)


def test_everything_is_optional() -> None:
    settings = load_settings()
    assert all(getattr(settings, name.lower()) is None for name in VARIABLES)


def test_values_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles: []\n")
    monkeypatch.setenv("ACTIVITY_CORE_URL", "https://activity-core.internal:8443/api")
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_TOKEN", "tok-123")
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_ID", "rein-aharness@railiance01")
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("REIN_AHARNESS_PROFILES", str(profiles))
    settings = load_settings()
    assert str(settings.activity_core_url) == "https://activity-core.internal:8443/api"
    assert settings.activity_core_worker_token is not None
    assert settings.activity_core_worker_token.get_secret_value() == "tok-123"
    assert "tok-123" not in repr(settings)
    assert settings.activity_core_worker_id == "rein-aharness@railiance01"
    assert settings.rein_aharness_state_dir == tmp_path / "state"
    assert settings.rein_aharness_profiles == profiles


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.setenv(name, "")
    assert load_settings() == ReinAharnessSettings()


def test_several_bad_values_are_named_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTIVITY_CORE_URL", "nope")
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", "relative")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "ACTIVITY_CORE_URL" in message and "REIN_AHARNESS_STATE_DIR" in message
    assert "\n" not in message and "nope" not in message


def test_a_bad_token_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_TOKEN", "line1\nSECRET")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "ACTIVITY_CORE_WORKER_TOKEN" in str(caught.value)
    assert "SECRET" not in str(caught.value)
