"""The publication settings are checked at start: a repository URL that is not a
`{target_repo}` template of http(s) or file, or that carries credentials, stops the
Temporal worker (and every command) with one line naming the variable, never the value;
a token file without a user name, a Forgejo API without its token file, likewise."""

from __future__ import annotations

import pytest

from ac_serve import assert_stopped_naming, clean_env, run_cli
from activity_core.settings import SettingsError, load_settings

UNREACHABLE_URL = "postgresql://nobody@127.0.0.1:1/none"

BAD_REPOSITORY_URLS = [
    ("https://forgejo.example.org/research/briefs.git", "{target_repo}"),
    ("https://forgejo.example.org/{target_repo}/{target_repo}.git", "{target_repo}"),
    ("ssh://git@forgejo.example.org/{target_repo}.git", "http://, https:// or file://"),
    ("https://rein:s3cret-token@forgejo.example.org/{target_repo}.git", "credentials"),
    ("https://s3cret-token@forgejo.example.org/{target_repo}.git", "credentials"),
    ("https://forgejo.example.org/{target_repo}.git?x=1", "query"),
    ("https:///{target_repo}.git", "host"),
    ("https://forgejo.example.org/{target_repo} .git", "spaces"),
]


@pytest.mark.parametrize(("value", "said"), BAD_REPOSITORY_URLS)
def test_a_bad_repository_url_is_refused_by_name_without_its_value(value: str, said: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(ACTIVITY_CORE_REPOSITORY_URL=value)
    message = str(refused.value)
    assert message.startswith("ACTIVITY_CORE_REPOSITORY_URL: ") and said in message
    assert "s3cret" not in message and "\n" not in message


@pytest.mark.parametrize(
    "value",
    [
        "https://forgejo.example.org/{target_repo}.git",
        "http://127.0.0.1:3000/{target_repo}.git",
        "file:///srv/git/{target_repo}.git",
    ],
)
def test_good_repository_urls_are_taken(value: str) -> None:
    assert load_settings(ACTIVITY_CORE_REPOSITORY_URL=value).repository_url == value


def test_the_pairs_are_required_together() -> None:
    with pytest.raises(SettingsError, match="ACTIVITY_CORE_REPOSITORY_USERNAME: required"):
        load_settings(ACTIVITY_CORE_REPOSITORY_TOKEN_FILE="/run/secrets/git-token")
    with pytest.raises(SettingsError, match="set both"):
        load_settings(ACTIVITY_CORE_FORGEJO_API_URL="https://forgejo.example.org/api/v1")
    with pytest.raises(SettingsError, match="set both"):
        load_settings(ACTIVITY_CORE_FORGEJO_TOKEN_FILE="/run/secrets/forgejo-token")
    with pytest.raises(SettingsError, match="ACTIVITY_CORE_FORGEJO_API_URL: must be"):
        load_settings(
            ACTIVITY_CORE_FORGEJO_API_URL="https://u:p@forgejo.example.org/api/v1",
            ACTIVITY_CORE_FORGEJO_TOKEN_FILE="/run/secrets/forgejo-token",
        )


def test_a_repository_url_with_credentials_stops_the_temporal_worker_at_start() -> None:
    completed = run_cli(
        "temporal-worker",
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL,
            ACTIVITY_CORE_ISSUE_SINK="none",
            ACTIVITY_CORE_REPOSITORY_URL="https://rein:s3cret@forgejo.example.org/{target_repo}.git",
        ),
    )
    line = assert_stopped_naming(completed, "ACTIVITY_CORE_REPOSITORY_URL")
    assert "credentials" in line
    assert "s3cret" not in completed.stderr + completed.stdout
