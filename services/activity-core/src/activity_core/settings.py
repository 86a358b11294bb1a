"""One settings class for the service, read from the environment when a command starts.

Built by the CLI (or a test) and passed down; nothing reads the environment at import time.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from activity_core.setting_values import (
    absolute_http_base,
    parse_trusted_proxies,
    repository_url_error,
)
from ops_contracts import WorkerId
from ops_runtime.settings_sources import (
    SettingsSourceError,
    parse_bind_address,
    secret_from_file,
)

__all__ = [
    "SECRET_VARIABLES",
    "ActivityCoreSettings",
    "SettingsError",
    "absolute_http_base",
    "load_settings",
    "parse_bind_address",
    "parse_trusted_proxies",
    "repository_url_error",
    "secrets_from_files",
]

# The queue's worker identity, exactly as the worker endpoints' bodies check it.
_WORKER_ID = TypeAdapter(WorkerId)


def _default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "activity-core"


class SettingsError(Exception):
    """A setting has a bad value; the message names the variable."""


class ActivityCoreSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    database_url: str | None = Field(default=None, alias="ACTIVITY_CORE_DATABASE_URL")
    state_dir: Path = Field(default_factory=_default_state_dir, alias="ACTIVITY_CORE_STATE_DIR")
    operator_token: str | None = Field(default=None, alias="ACTIVITY_CORE_OPERATOR_TOKEN")
    worker_token: str | None = Field(default=None, alias="ACTIVITY_CORE_WORKER_TOKEN")
    worker_id: str | None = Field(default=None, alias="ACTIVITY_CORE_WORKER_ID")
    worker_credentials_file: Path | None = Field(
        default=None, alias="ACTIVITY_CORE_WORKER_CREDENTIALS_FILE"
    )
    # The bearer token GET /metrics requires (Prometheus's scrape credential); it opens
    # nothing else, and no other token opens /metrics. Unset: /metrics is open, and only
    # the network can keep it from anyone who reaches the API's port (deploy/README.md).
    metrics_token: str | None = Field(default=None, alias="ACTIVITY_CORE_METRICS_TOKEN")
    # the named operators and viewers (http/auth.py, load_operator_credentials)
    operators_file: Path | None = Field(default=None, alias="ACTIVITY_CORE_OPERATORS_FILE")
    # Where operators' browsers reach the service (e.g. https://ops.example.org): the ops
    # UI's cookie is Secure when it is https, and a form's Origin must be its origin.
    # Unset: the origin each request was addressed to (the Host header).
    public_url: str | None = Field(default=None, alias="ACTIVITY_CORE_PUBLIC_URL")
    # The peers whose X-Forwarded-For and X-Forwarded-Proto are believed: the proxies in
    # front of the API (an ingress controller's pod network). A request from anyone else,
    # a process on this host included, is the TCP peer's, whatever it claims; the sign-in
    # throttle counts failures by that address (http/ui_guard.py, client_of). Unset: none.
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), alias="ACTIVITY_CORE_TRUSTED_PROXIES"
    )
    allow_unauth_mutations: bool = Field(
        default=False, alias="ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS"
    )
    queue_enabled: bool = Field(default=True, alias="OPS_RUN_QUEUE_ENABLED")
    lease_seconds: int = Field(default=900, ge=1, le=86400, alias="OPS_RUN_LEASE_SECONDS")
    max_attempts: int = Field(default=3, ge=1, le=1000, alias="OPS_RUN_MAX_ATTEMPTS")
    db_pool_min: int = Field(default=2, ge=1, le=200, alias="ACTIVITY_CORE_DB_POOL_MIN")
    db_pool_max: int = Field(default=20, ge=1, le=200, alias="ACTIVITY_CORE_DB_POOL_MAX")
    coalesce_max: int = Field(default=32, ge=1, le=100, alias="ACTIVITY_CORE_COALESCE_MAX")
    # 0: leave ops_runs to the server's autovacuum alone (queue/vacuum.py)
    queue_vacuum_dead_rows: int = Field(
        default=10_000, ge=0, le=1_000_000_000, alias="ACTIVITY_CORE_QUEUE_VACUUM_DEAD_ROWS"
    )
    max_body_bytes: int = Field(
        default=1_048_576, ge=1024, le=64 * 1_048_576, alias="ACTIVITY_CORE_MAX_BODY_BYTES"
    )
    # A run's changes bundle (docs/changes.md): the largest upload taken (413 past it), and
    # how long a terminal run's stored changes are kept (deleted by the upkeep loop,
    # queue/vacuum.py).
    changes_max_bytes: int = Field(
        default=8 * 1_048_576,
        ge=1024,
        le=256 * 1_048_576,
        alias="ACTIVITY_CORE_CHANGES_MAX_BYTES",
    )
    changes_retention_days: int = Field(
        default=90, ge=1, le=36_500, alias="ACTIVITY_CORE_CHANGES_RETENTION_DAYS"
    )
    # The bound of each git call that checks an uploaded bundle (changes/verify.py). Past
    # it the upload is 503 `unavailable` (our node was too slow), not a refusal of the
    # bundle; the worker retries.
    changes_git_timeout_seconds: float = Field(
        default=30.0, gt=0, le=600, alias="ACTIVITY_CORE_CHANGES_GIT_TIMEOUT_SECONDS"
    )
    # The overall deadline of a change view's derivation (changes/view.py: about six git
    # calls): past it GET /ops-runs/{id}/changes is 503 `unavailable` with Retry-After.
    changes_view_deadline_seconds: float = Field(
        default=30.0, gt=0, le=600, alias="ACTIVITY_CORE_CHANGES_VIEW_DEADLINE_SECONDS"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", alias="ACTIVITY_CORE_LOG_LEVEL"
    )
    issue_sink: Literal["state-hub", "none"] = Field(
        default="state-hub", alias="ACTIVITY_CORE_ISSUE_SINK"
    )
    state_hub_url: str | None = Field(default=None, alias="STATE_HUB_URL")
    require_harness_profile: bool = Field(
        default=False, alias="ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE"
    )
    forgejo_web_base: str = Field(
        default="https://forgejo.coulomb.social", alias="FORGEJO_WEB_BASE"
    )
    # Publication (docs/changes.md, POST /ops-runs/{id}/publish; publication/): where the
    # Temporal worker pushes an operator-approved run's branch. A `{target_repo}` template
    # (e.g. https://forgejo.example.org/{target_repo}.git; file:///... for the demo); no
    # credentials in it: the token is read from its file by git's credential helper
    # (publication/credential_helper.py), never put in a URL, an argv or a config file.
    # Unset: publishing is refused (the run page says so).
    repository_url: str | None = Field(default=None, alias="ACTIVITY_CORE_REPOSITORY_URL")
    repository_token_file: Path | None = Field(
        default=None, alias="ACTIVITY_CORE_REPOSITORY_TOKEN_FILE"
    )
    repository_username: str | None = Field(default=None, alias="ACTIVITY_CORE_REPOSITORY_USERNAME")
    # Forgejo's API (e.g. https://forgejo.example.org/api/v1) and the file holding its
    # token: when both are set, a publication opens a pull request against the default
    # branch. Read per request, never kept in memory longer than one call.
    forgejo_api_url: str | None = Field(default=None, alias="ACTIVITY_CORE_FORGEJO_API_URL")
    forgejo_token_file: Path | None = Field(default=None, alias="ACTIVITY_CORE_FORGEJO_TOKEN_FILE")
    temporal_address: str | None = Field(default=None, alias="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field(default="default", alias="TEMPORAL_NAMESPACE")
    temporal_task_queue: str = Field(default="activity-core", alias="TEMPORAL_TASK_QUEUE")
    # Durable fires (README "Definitions, schedules and fires"; temporal/workflow.py says why
    # each default is what it is). Shortened by tests; operators rarely need to touch them.
    # How late a schedule may still take a fire it missed while Temporal was away
    # (Temporal's own minimum is 10 s).
    schedule_catchup_seconds: int = Field(
        default=86_400, ge=10, le=366 * 86_400, alias="ACTIVITY_CORE_SCHEDULE_CATCHUP_SECONDS"
    )
    # The longest wait between two attempts of a fire's database steps (retried until the
    # database answers).
    fire_retry_max_seconds: int = Field(
        default=30, ge=1, le=3600, alias="ACTIVITY_CORE_FIRE_RETRY_MAX_SECONDS"
    )
    # The longest wait between two attempts of a fire's IssueSink writes, and how long after
    # the emission they are retried before they are recorded as failed.
    sink_retry_max_seconds: int = Field(
        default=300, ge=1, le=3600, alias="ACTIVITY_CORE_SINK_RETRY_MAX_SECONDS"
    )
    sink_retry_window_seconds: int = Field(
        default=86_400, ge=1, le=30 * 86_400, alias="ACTIVITY_CORE_SINK_RETRY_WINDOW_SECONDS"
    )
    # `activity-core temporal-worker`'s two endpoints (temporal/worker.py); the other
    # commands ignore them. Each is on a port of its own, not the API's: neither takes a
    # credential, so the network must restrict them (deploy/README.md, Network policies).
    # host:port of `GET /livez`, 200 while the worker's event loop runs; unset: none.
    temporal_worker_liveness_address: str | None = Field(
        default=None, alias="ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS"
    )
    # How long the loop may go without running before /livez answers 503.
    temporal_worker_liveness_max_stall_seconds: float = Field(
        default=30.0,
        ge=2,
        le=3600,
        allow_inf_nan=False,
        alias="ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_MAX_STALL_SECONDS",
    )
    # ip:port where the Temporal SDK serves its Prometheus metrics (`temporal_*`); an IP
    # literal, the SDK resolves no names; unset: none.
    temporal_worker_metrics_address: str | None = Field(
        default=None, alias="ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS"
    )

    @field_validator(
        "operator_token",
        "worker_token",
        "worker_id",
        "database_url",
        "public_url",
        "metrics_token",
    )
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        return value

    @field_validator(
        "temporal_worker_liveness_address", "temporal_worker_metrics_address", mode="before"
    )
    @classmethod
    def _blank_address_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("temporal_worker_liveness_address")
    @classmethod
    def _liveness_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_bind_address(value)
        return value

    @field_validator("temporal_worker_metrics_address")
    @classmethod
    def _metrics_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, port = parse_bind_address(value)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError("the host must be an IP address (e.g. 0.0.0.0:9100)") from None
        if port == 0:
            raise ValueError("needs a fixed port, the one Prometheus scrapes")
        return value

    @field_validator(
        "repository_url",
        "repository_username",
        "forgejo_api_url",
        "repository_token_file",
        "forgejo_token_file",
        mode="before",
    )
    @classmethod
    def _blank_publication_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("repository_url")
    @classmethod
    def _repository_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = repository_url_error(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("repository_username")
    @classmethod
    def _repository_username(cls, value: str | None) -> str | None:
        if value is not None and (
            len(value) > 200 or any(c in value for c in ":@/\\") or not value.isprintable()
        ):
            raise ValueError("must be a user name: printable, no : @ / \\, at most 200 characters")
        return value

    @field_validator("forgejo_api_url")
    @classmethod
    def _forgejo_api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        base = absolute_http_base(value)
        if base is None:
            raise ValueError(
                "must be an absolute http:// or https:// URL without credentials, query or "
                "fragment (e.g. https://forgejo.example.org/api/v1)"
            )
        return base

    @field_validator("operators_file", mode="before")
    @classmethod
    def _blank_path_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _trusted_proxies(cls, value: object) -> object:
        return parse_trusted_proxies(value) if isinstance(value, str) else value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        base = absolute_http_base(value)
        if base is None or urllib.parse.urlsplit(base).path not in ("",):
            raise ValueError(
                "must be an origin: http:// or https://, a host and an optional port, no path "
                "(e.g. https://ops.example.org)"
            )
        return base

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        # Checked here so a typo stops the process with the variable's name instead of a
        # driver traceback later. Messages never repeat the value: it may hold a password.
        if value is None:
            return None
        try:
            parts = urllib.parse.urlsplit(value)
            _ = parts.port  # a non-numeric or out-of-range port raises ValueError
        except ValueError:
            raise ValueError("not a valid URL") from None
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("worker_id")
    @classmethod
    def _worker_id_shape(cls, value: str | None) -> str | None:
        # Bound to the worker token: a malformed one would start, and then every claim,
        # heartbeat and close by that worker would be refused as an invalid body.
        if value is None:
            return None
        try:
            _WORKER_ID.validate_python(value)
        except ValidationError:
            raise ValueError(
                "must be a worker id: 1-200 characters of letters, digits and . _ @ : / + - "
                "(e.g. rein-aharness@host01)"
            ) from None
        return value

    @field_validator("forgejo_web_base")
    @classmethod
    def _forgejo_base(cls, value: str) -> str:
        # Every artefact link starts with it: a malformed one would start, and then no run
        # page could link an artefact.
        base = absolute_http_base(value)
        if base is None:
            raise ValueError(
                "must be an absolute http:// or https:// URL without credentials, query or "
                "fragment (e.g. https://forgejo.example.org)"
            )
        return base

    @field_validator("operator_token", "worker_token", "metrics_token")
    @classmethod
    def _token_strength(cls, value: str | None) -> str | None:
        # A short shared secret is guessable; refuse it at start rather than run weakly.
        if value is not None and len(value) < 16:
            raise ValueError("must be at least 16 characters")
        return value

    @model_validator(mode="after")
    def _worker_identity_bound(self) -> ActivityCoreSettings:
        if self.worker_token is not None and self.worker_id is None:
            raise ValueError(
                "ACTIVITY_CORE_WORKER_ID: required when ACTIVITY_CORE_WORKER_TOKEN is set"
            )
        if self.repository_token_file is not None and self.repository_username is None:
            raise ValueError(
                "ACTIVITY_CORE_REPOSITORY_USERNAME: required when "
                "ACTIVITY_CORE_REPOSITORY_TOKEN_FILE is set"
            )
        if (self.forgejo_api_url is None) != (self.forgejo_token_file is None):
            raise ValueError(
                "ACTIVITY_CORE_FORGEJO_API_URL and ACTIVITY_CORE_FORGEJO_TOKEN_FILE: set both "
                "(pull requests are opened) or neither"
            )
        if self.db_pool_min > self.db_pool_max:
            raise ValueError("ACTIVITY_CORE_DB_POOL_MIN: must not exceed ACTIVITY_CORE_DB_POOL_MAX")
        return self


# The secrets a deployment may hand over as files (a mounted Kubernetes Secret, a Docker
# secret): `<VARIABLE>_FILE` names a file whose contents are the value (one trailing
# newline dropped). The credentials files (ACTIVITY_CORE_WORKER_CREDENTIALS_FILE,
# ACTIVITY_CORE_OPERATORS_FILE) are files already.
SECRET_VARIABLES = (
    "ACTIVITY_CORE_DATABASE_URL",
    "ACTIVITY_CORE_OPERATOR_TOKEN",
    "ACTIVITY_CORE_WORKER_TOKEN",
    "ACTIVITY_CORE_METRICS_TOKEN",
)


def secrets_from_files(environ: Mapping[str, str]) -> dict[str, str]:
    """The value of each SECRET_VARIABLES' `_FILE` that is set, by variable. Raises
    SettingsError (naming the `_FILE` variable, never the value) for a file that cannot
    be read, is empty or too large, or when the variable itself is set as well
    (ops_runtime.settings_sources, the rule both services read secrets by)."""
    found: dict[str, str] = {}
    for variable in SECRET_VARIABLES:
        try:
            value = secret_from_file(variable, environ)
        except SettingsSourceError as exc:
            raise SettingsError(str(exc)) from None
        if value is not None:
            found[variable] = value
    return found


def load_settings(**overrides: object) -> ActivityCoreSettings:
    """Read the environment (plus test overrides, by alias) into settings; a secret may
    come from the file its `_FILE` variable names (secrets_from_files).

    Raises SettingsError with one line that names the offending variable.
    """
    values = {**secrets_from_files(os.environ), **overrides}
    try:
        return ActivityCoreSettings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc") or ()
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        if not loc:
            # a rule across variables (_worker_identity_bound) words its own line
            raise SettingsError(message) from None
        name = str(loc[0])
        field = ActivityCoreSettings.model_fields.get(name)
        variable = field.alias if field is not None and field.alias else name
        raise SettingsError(f"{variable}: {message}") from None
