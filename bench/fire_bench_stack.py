"""The fire-to-start bench's deployment (bench/fire_to_start.py says what is measured):
a Temporal dev server, activity-core's migrate, serve and Temporal worker on a scratch
database, and one rein-aharness worker in remote mode against a file:// forge, with an
approach that only prints the time it started."""

from __future__ import annotations

import json
import secrets
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ops_demo.repository import init_bare_repository
from ops_demo.stack import (
    ActivityCoreConfig,
    WorkerConfig,
    activity_core_migrate,
    activity_core_serve,
    activity_core_temporal_worker,
    rein_worker,
    sync_definitions,
    temporal_dev_server,
)
from ops_devsupport.processes import ManagedProcess, Supervisor

SLUG = "fire-to-start"
LABEL = "fire-to-start"
TARGET_REPO = "bench/fire-to-start"
PROFILE = "harness.fire-to-start"
SANDBOX = "profile.bwrap-local"
WORKER_ID = "fire-to-start"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
# the worker's long poll: a fire finds it waiting in a claim, as an idle worker is
WAIT_SECONDS = 10
POLL_SECONDS = 0.02


class BenchError(Exception):
    """The bench cannot go on; the message says why in one line (and where to look)."""


# -- the deployment --------------------------------------------------------------------


def write_catalogue(path: Path, date: str) -> Path:
    path.write_text(
        textwrap.dedent(
            f"""\
            profiles:
              - id: {PROFILE}
                version: 1.0.0
                approach: command
                command:
                  argv: [{json.dumps(date)}, "+%s.%N"]
                  timeout_s: 30
                  env_allowlist: [PATH]
                sandbox_profile: {SANDBOX}
                resolved_model: null
                rein: {{id: rein-aharness, version: 0.1.0}}
            """
        ),
        encoding="utf-8",
    )
    return path


def write_definitions(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / f"{SLUG}.yaml").write_text(
        textwrap.dedent(
            f"""\
            id: {SLUG}
            title: Fire-to-start latency bench
            rules:
              - id: start
                action:
                  task_template: "fire-to-start {{scheduled_for:%Y-%m-%d}}"
                  description_template: "bench/fire_to_start.py: an approach that only starts."
                  target_repo: {TARGET_REPO}
                  labels: [{LABEL}]
                  priority: medium
                  harness_profile_ref: {PROFILE}@1.0.0
            """
        ),
        encoding="utf-8",
    )
    return directory


@dataclass
class Deployment:
    sup: Supervisor
    config: ActivityCoreConfig
    url: str
    serve: ManagedProcess
    temporal_worker: ManagedProcess
    worker: ManagedProcess


def start(sup: Supervisor, root: Path, dsn: str, date: str) -> Deployment:
    temporal, temporal_address = temporal_dev_server(sup, root / "temporal", wait=False)
    forge = root / "forge"
    init_bare_repository(
        forge / f"{TARGET_REPO}.git",
        {"README.md": "# fire-to-start\n"},
        message="fire-to-start: the bench's target repository",
    )
    config = ActivityCoreConfig(
        database_url=dsn,
        temporal_address=temporal_address,
        operator_token=secrets.token_urlsafe(24),
        worker_token=secrets.token_urlsafe(24),
        worker_id=WORKER_ID,
    )
    activity_core_migrate(sup, config)
    temporal.wait_ready()
    serve, url = activity_core_serve(sup, config, wait=False)
    temporal_worker = activity_core_temporal_worker(sup, config, wait=False)
    assert config.worker_token is not None
    mirrors = root / "mirrors"
    mirrors.mkdir()
    worker = rein_worker(
        sup,
        WorkerConfig(
            activity_core_url=url,
            worker_id=WORKER_ID,
            worker_token=config.worker_token,
            state_dir=root / "worker",
            profiles=write_catalogue(root / "profiles.yaml", date),
            repositories_root=mirrors,
            repository_url=f"file://{forge}/{{target_repo}}.git",
            wait_seconds=WAIT_SECONDS,
            backoff_seconds=0.5,
            shutdown_grace_seconds=2,
            log_level="DEBUG",  # "command finished" carries the approach's output
        ),
        name="rein-aharness-worker",
        labels=[LABEL],
        wait=False,
    )
    serve.wait_ready()
    temporal_worker.wait_ready()
    worker.wait_ready()
    synced = sync_definitions(sup, config, [write_definitions(root / "definitions")])
    if "definitions synced" not in synced.output:
        raise BenchError(f"sync-definitions did not sync: {synced.output.strip()[-300:]}")
    return Deployment(sup, config, url, serve, temporal_worker, worker)
