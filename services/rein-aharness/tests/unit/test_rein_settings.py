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


def _refusal(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """The message load_settings refuses `env` with (set on the clean environment)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    return str(raised.value)


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
    message = _refusal(monkeypatch, ACTIVITY_CORE_URL="nope", REIN_AHARNESS_STATE_DIR="relative")
    assert "ACTIVITY_CORE_URL" in message and "REIN_AHARNESS_STATE_DIR" in message
    assert "\n" not in message and "nope" not in message


def test_a_bad_token_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    message = _refusal(monkeypatch, ACTIVITY_CORE_WORKER_TOKEN="line1\nSECRET")
    assert "ACTIVITY_CORE_WORKER_TOKEN" in message
    assert "SECRET" not in message


# -- remote mode (REIN_AHARNESS_REPOSITORY_URL) ------------------------------------------


def test_remote_mode_settings_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    monkeypatch.setenv("REIN_AHARNESS_REPOSITORIES_ROOT", str(tmp_path))
    monkeypatch.setenv("REIN_AHARNESS_REPOSITORY_URL", "https://git.example/{target_repo}.git")
    monkeypatch.setenv("REIN_AHARNESS_REPOSITORY_TOKEN_FILE", str(token))
    monkeypatch.setenv("REIN_AHARNESS_FETCH_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("REIN_AHARNESS_FETCH_MAX_MB", "3")
    settings = load_settings()
    source = settings.repository_source()
    assert source is not None
    assert source.url("acme/app") == "https://git.example/acme/app.git"
    assert source.token_file == token and source.username == "x-token"
    assert source.timeout_seconds == 7 and source.max_bytes == 3 * 1024 * 1024
    # Only the path is kept: the token is nowhere in the settings.
    assert "s3cret-token" not in repr(settings) and "s3cret-token" not in repr(source)


def test_without_a_url_the_worker_is_in_single_host_mode() -> None:
    settings = load_settings()
    assert settings.repository_source() is None
    assert settings.rein_aharness_fetch_timeout_seconds == 120
    assert settings.rein_aharness_fetch_max_mb == 2048


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("https://git.example/repo.git", "exactly once"),
        ("https://git.example/{target_repo}/{target_repo}", "exactly once"),
        ("ssh://git.example/{target_repo}.git", "http, https or file"),
        ("https://bot:pw@git.example/{target_repo}.git", "credentials"),
        ("https://tok@git.example/{target_repo}.git", "credentials"),
        ("https://git.example/{target_repo}.git?x=1", "query or fragment"),
        ("https://git.example/{target_repo}.git#top", "query or fragment"),
        ("https://{target_repo}.example/x.git", "in the path"),
        ("https://git.example:99999/{target_repo}.git", "valid URL"),
        ("https:///{target_repo}.git", "host"),
        ("file://host/{target_repo}.git", "file:///"),
        ("https://git.example/{target_repo} .git", "whitespace"),
    ],
)
def test_a_bad_url_template_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, template: str, problem: str
) -> None:
    message = _refusal(
        monkeypatch,
        REIN_AHARNESS_REPOSITORIES_ROOT=str(tmp_path),
        REIN_AHARNESS_REPOSITORY_URL=template,
    )
    assert message.startswith("invalid setting REIN_AHARNESS_REPOSITORY_URL: ")
    assert problem in message and "\n" not in message
    assert "pw@" not in message


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"REIN_AHARNESS_REPOSITORY_URL": "https://g.example/{target_repo}"}, "REPOSITORIES_ROOT"),
        ({"REIN_AHARNESS_REPOSITORY_TOKEN_FILE": "/nonexistent/token"}, "REPOSITORY_TOKEN_FILE"),
        ({"REIN_AHARNESS_FETCH_TIMEOUT_SECONDS": "0"}, "FETCH_TIMEOUT_SECONDS"),
        ({"REIN_AHARNESS_FETCH_TIMEOUT_SECONDS": "3601"}, "FETCH_TIMEOUT_SECONDS"),
        ({"REIN_AHARNESS_FETCH_MAX_MB": "0"}, "FETCH_MAX_MB"),
        ({"REIN_AHARNESS_FETCH_MAX_MB": "1048577"}, "FETCH_MAX_MB"),
        ({"REIN_AHARNESS_REPOSITORY_USERNAME": " bot"}, "REPOSITORY_USERNAME"),
    ],
)
def test_remote_mode_problems_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], variable: str
) -> None:
    assert f"REIN_AHARNESS_{variable}: " in _refusal(monkeypatch, **env)


def test_a_token_file_needs_a_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    monkeypatch.setenv("REIN_AHARNESS_REPOSITORY_TOKEN_FILE", str(token))
    with pytest.raises(SettingsError, match="TOKEN_FILE: needs REIN_AHARNESS_REPOSITORY_URL"):
        load_settings()


@pytest.mark.parametrize("content", ["", "\n", "two\nlines\n", " padded "])
def test_an_unusable_token_file_is_refused_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str
) -> None:
    token = tmp_path / "token"
    token.write_text(content)
    message = _refusal(
        monkeypatch,
        REIN_AHARNESS_REPOSITORIES_ROOT=str(tmp_path),
        REIN_AHARNESS_REPOSITORY_URL="https://g.example/{target_repo}",
        REIN_AHARNESS_REPOSITORY_TOKEN_FILE=str(token),
    )
    assert "REIN_AHARNESS_REPOSITORY_TOKEN_FILE: " in message
    assert "lines" not in message and "padded" not in message


def test_a_repository_token_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    message = _refusal(monkeypatch, REIN_AHARNESS_REPOSITORY_TOKEN="tok-in-env")
    assert "REIN_AHARNESS_REPOSITORY_TOKEN: not read" in message
    assert "tok-in-env" not in message


def test_the_changes_bound_defaults_to_8_mib_and_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().rein_aharness_changes_max_bytes == 8 * 1024 * 1024
    monkeypatch.setenv("REIN_AHARNESS_CHANGES_MAX_BYTES", "4096")
    assert load_settings().rein_aharness_changes_max_bytes == 4096


@pytest.mark.parametrize("value", ["0", "-1", "many", "1073741825"])
def test_a_bad_changes_bound_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    message = _refusal(monkeypatch, REIN_AHARNESS_CHANGES_MAX_BYTES=value)
    assert message.startswith("invalid setting REIN_AHARNESS_CHANGES_MAX_BYTES: ")
    assert "\n" not in message
