"""The worker's one settings class, read from the environment.

Built in the CLI entry (never at import time), so tests construct their own. A bad
value stops the command at start with one line naming the variable; the value itself
is never echoed, since one of them is a credential.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import HttpUrl, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ops_contracts import WorkerId

__all__ = ["Settings", "SettingsProblem", "load_settings"]


class SettingsProblem(Exception):
    """One line for the operator: which variable is wrong, and how."""


class Settings(BaseSettings):
    """Environment variables (empty counts as unset):

    ACTIVITY_CORE_URL           base URL of Activity Core's API (needed to replay/run)
    ACTIVITY_CORE_WORKER_TOKEN  bearer credential of the worker identity
    ACTIVITY_CORE_WORKER_ID     the exact, non-secret identity bound to that token
    REIN_AHARNESS_STATE_DIR     absolute state root (default: XDG state dir)
    REIN_AHARNESS_PROFILES      the harness profile catalogue file
    """

    model_config = SettingsConfigDict(
        env_prefix="", case_sensitive=False, env_ignore_empty=True, extra="ignore"
    )

    activity_core_url: HttpUrl | None = None
    activity_core_worker_token: SecretStr | None = None
    activity_core_worker_id: WorkerId | None = None
    rein_aharness_state_dir: Path | None = None
    rein_aharness_profiles: Path | None = None

    @field_validator("rein_aharness_state_dir")
    @classmethod
    def _absolute_state_dir(cls, value: Path | None) -> Path | None:
        # A relative path would resolve against the working directory, which may be a
        # target checkout; state must live outside checkouts.
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @field_validator("rein_aharness_profiles")
    @classmethod
    def _profiles_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError("must name an existing file")
        return value

    @field_validator("activity_core_worker_token")
    @classmethod
    def _token_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            secret = value.get_secret_value()
            if secret != secret.strip() or any(not ch.isprintable() for ch in secret):
                raise ValueError("must be one line without surrounding whitespace")
        return value


def load_settings() -> Settings:
    """Read the environment; raise SettingsProblem with a one-line message."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            variable = str(error["loc"][0]).upper() if error["loc"] else "environment"
            message = str(error["msg"]).splitlines()[0]
            problems.append(f"{variable}: {message}")
        raise SettingsProblem("invalid setting " + "; ".join(problems)) from None
