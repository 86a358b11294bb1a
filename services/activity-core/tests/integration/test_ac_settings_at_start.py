"""Settings that used to half-start: a malformed ACTIVITY_CORE_WORKER_ID (every worker call
then refused), a malformed FORGEJO_WEB_BASE (every artefact link then missing), a worker id
in the credentials file. Each stops every command at start, as a real process, with one
line naming the variable and exit 2, before any database, server or scheduler is touched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from ac_serve import assert_stopped_naming, clean_env, run_cli
from activity_core.artefacts.links import forgejo_file_url
from activity_core.settings import SettingsError, load_settings
from ops_contracts import WorkerId

# Nothing listens on port 1: a command that got as far as the database would say so.
UNREACHABLE_URL = "postgresql://nobody@127.0.0.1:1/none"
DIGEST = "sha256:" + "0" * 64

BAD_WORKER_IDS = [
    "has space",
    "tab\there",
    "w" * 201,
    "wörker@host",
    "rein;rm -rf",
    "rein-aharness@host\n",
]
BAD_FORGEJO_BASES = [
    "forgejo.example.org",
    "ftp://forgejo.example.org",
    "https://forgejo.example.org/?tab=1",
    "https://forgejo.example.org/#top",
    "https://user:secret@forgejo.example.org",
    "https://",
    "http://forgejo.example.org:99999",
    " https://forgejo.example.org",
    "",
]


COMMANDS = [
    ("migrate",),
    ("serve", "--port", "1"),
    ("temporal-worker",),
    ("sync-definitions", "/nonexistent"),
    ("retry-fire", "brief", "run-1"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_malformed_worker_id_stops_every_command_at_start(command: tuple[str, ...]) -> None:
    completed = run_cli(
        *command,
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL,
            ACTIVITY_CORE_WORKER_TOKEN="worker-token-0123456789abcdef",
            ACTIVITY_CORE_WORKER_ID="rein aharness@host01",
            ACTIVITY_CORE_ISSUE_SINK="none",
        ),
    )
    line = assert_stopped_naming(completed, "ACTIVITY_CORE_WORKER_ID")
    assert "worker id" in line
    assert "worker-token-0123456789abcdef" not in completed.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_malformed_forgejo_base_stops_every_command_at_start(command: tuple[str, ...]) -> None:
    completed = run_cli(
        *command,
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL,
            ACTIVITY_CORE_ISSUE_SINK="none",
            FORGEJO_WEB_BASE="forgejo.example.org/base",
        ),
    )
    line = assert_stopped_naming(completed, "FORGEJO_WEB_BASE")
    assert "absolute http:// or https:// URL" in line


def test_a_malformed_worker_id_in_the_credentials_file_stops_serve_with_exit_2(
    tmp_path: Path,
) -> None:
    credentials = tmp_path / "workers.json"
    credentials.write_text(json.dumps({"workers": {"bad id": DIGEST}}), encoding="utf-8")
    completed = run_cli(
        "serve",
        "--port",
        "1",
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL,
            ACTIVITY_CORE_WORKER_CREDENTIALS_FILE=str(credentials),
        ),
    )
    line = assert_stopped_naming(completed, "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE")
    assert "workers.bad id: not a valid worker id" in line


@pytest.mark.parametrize("value", BAD_WORKER_IDS)
def test_every_malformed_worker_id_is_refused_by_name(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^ACTIVITY_CORE_WORKER_ID: "):
        load_settings(
            ACTIVITY_CORE_WORKER_TOKEN="worker-token-0123456789abcdef",
            ACTIVITY_CORE_WORKER_ID=value,
        )


@pytest.mark.parametrize("value", BAD_FORGEJO_BASES)
def test_every_malformed_forgejo_base_is_refused_by_name(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^FORGEJO_WEB_BASE: "):
        load_settings(FORGEJO_WEB_BASE=value)


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("https://forgejo.example.org", "https://forgejo.example.org"),
        ("https://forgejo.example.org/", "https://forgejo.example.org"),
        ("http://127.0.0.1:3000/git/", "http://127.0.0.1:3000/git"),
    ],
)
def test_a_good_forgejo_base_is_kept_as_the_links_use_it(value: str, stored: str) -> None:
    settings = load_settings(FORGEJO_WEB_BASE=value)
    assert settings.forgejo_web_base == stored
    commit = "0123456789abcdef0123456789abcdef01234567"
    url = forgejo_file_url(settings.forgejo_web_base, "research/briefs", commit, "a/b.md")
    assert url == f"{stored}/research/briefs/src/commit/{commit}/a/b.md"


_WORKER_ID = TypeAdapter(WorkerId)


def _contracts_accept(value: str) -> bool:
    try:
        _WORKER_ID.validate_python(value)
    except ValidationError:
        return False
    return True


def _settings_accept(value: str) -> bool:
    try:
        load_settings(
            ACTIVITY_CORE_WORKER_TOKEN="worker-token-0123456789abcdef",
            ACTIVITY_CORE_WORKER_ID=value,
        )
    except SettingsError:
        return False
    return True


@given(
    value=st.one_of(
        st.from_regex(r"[A-Za-z0-9._@:/+-]{1,200}", fullmatch=True),
        st.text(min_size=1, max_size=210),
        st.from_regex(r"[A-Za-z0-9._@:/+-]{1,200}\n", fullmatch=True),
    )
)
def test_the_setting_holds_worker_ids_to_the_contracts_shape(value: str) -> None:
    assume(value.strip())  # blank means unset
    assert _settings_accept(value) is _contracts_accept(value)
