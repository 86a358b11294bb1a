"""One deployment of the product as real processes, and what the scenarios ask of it."""

from __future__ import annotations

import html
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import psutil

from activity_core.definitions.model import definition_uuid
from e2e_kit.db import Db
from e2e_kit.hub import StubHub
from ops_demo.api import OpsApi
from ops_demo.stack import (
    ActivityCoreConfig,
    WorkerConfig,
    rein_worker,
)
from ops_devsupport.processes import (
    ManagedProcess,
    Supervisor,
    processes_with_environment,
    processes_working_under,
)

__all__ = ["SharedPeers", "Stack", "log_lines", "outbox", "processes_under"]

T = TypeVar("T")

FORGEJO = "https://forgejo.e2e.test"


@dataclass
class Stack:
    """activity-core (replicas, Temporal worker) on one database, and the places the
    scenarios' workers use: the profile catalogue and the repositories root."""

    root: Path
    sup: Supervisor
    db: Db
    config: ActivityCoreConfig
    temporal_address: str
    hub: StubHub
    tokens: dict[str, str]
    profiles: Path
    repositories: Path
    serves: list[tuple[ManagedProcess, str]] = field(default_factory=list)
    temporal_worker: ManagedProcess | None = None

    # -- activity-core ----------------------------------------------------------------

    def url(self, replica: int = 0) -> str:
        return self.serves[replica][1]

    def api(self, replica: int = 0) -> OpsApi:
        return OpsApi(self.url(replica), self.config.operator_token)

    def fire(self, slug: str, *, replica: int = 0, **body: Any) -> str:
        """Manual fire through a serve replica; the fire's (Temporal) run id."""
        with self.api(replica) as api:
            return str(api.fire(slug, body or None)["run_id"])

    def trigger_schedule(self, slug: str) -> None:
        """Fire the Temporal schedule `activity:{slug}` now, with the real `temporal` CLI
        (the schedule's own action, so the workflow sees a scheduled fire)."""
        from activity_core.temporal.dev_server import temporal_binary

        done = subprocess.run(
            [
                str(temporal_binary()),
                "schedule",
                "trigger",
                "--schedule-id",
                f"activity:{slug}",
                "--overlap-policy",
                "AllowAll",
                "--address",
                self.temporal_address,
                "--namespace",
                "default",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"temporal schedule trigger failed: {done.stderr}"

    def ops_runs(self, slug: str) -> list[asyncpg.Record]:
        return self.db.fetch(
            "SELECT * FROM ops_runs WHERE activity_definition_id = $1 ORDER BY created_at",
            definition_uuid(slug),
        )

    def ops_run(self, run_id: Any) -> asyncpg.Record:
        row = self.db.fetchrow("SELECT * FROM ops_runs WHERE id = $1", run_id)
        assert row is not None, f"no ops run {run_id}"
        return row

    def wait_for_run(self, slug: str, state: str, *, timeout: float, what: str) -> asyncpg.Record:
        """The first ops run of `slug` (by creation) once one is in `state`."""
        return self.wait(
            lambda: next((r for r in self.ops_runs(slug) if r["state"] == state), None),
            timeout=timeout,
            what=what,
        )

    def serve_lines(self) -> list[dict[str, Any]]:
        """Every JSON log line of every serve replica, replica by replica."""
        return [line for serve, _ in self.serves for line in log_lines(serve)]

    def fires(self, slug: str) -> list[asyncpg.Record]:
        return self.db.fetch(
            "SELECT * FROM activity_runs WHERE activity_definition_id = $1 ORDER BY started_at",
            definition_uuid(slug),
        )

    def ui_page(self, path: str, *, replica: int = 0) -> httpx.Response:
        """A UI page as a signed-in operator: through the login form (name and token, from
        the UI's own origin, as a browser sends it), with its session cookie."""
        base = self.url(replica)
        with httpx.Client(base_url=base, follow_redirects=True, timeout=15) as ui:
            login = ui.post(
                "/ops/ui/login",
                data={"name": "operator", "token": self.config.operator_token, "next": path},
                headers={"origin": base},
            )
            assert login.status_code == 200, login.text
            assert ui.cookies, "the login form set no session cookie"
            return ui.get(path)

    def ui_run(self, slug: str, fire_run_id: str, *, replica: int = 0) -> str:
        """The run detail page of a fire (its text, entities resolved)."""
        page = self.ui_page(f"/ops/ui/automations/{slug}/runs/{fire_run_id}", replica=replica)
        assert page.status_code == 200, page.text
        return html.unescape(page.text)

    # -- workers ----------------------------------------------------------------------

    def worker_config(
        self,
        worker_id: str,
        *,
        url: str | None = None,
        token: str | None = None,
        state_dir: Path | None = None,
        lease_seconds: int = 30,
        wait_seconds: int = 1,
        backoff_seconds: float = 0.5,
        shutdown_grace_seconds: float = 2.0,
    ) -> WorkerConfig:
        return WorkerConfig(
            activity_core_url=url or self.url(0),
            worker_id=worker_id,
            worker_token=token if token is not None else self.tokens[worker_id],
            state_dir=state_dir or self.root / "workers" / worker_id,
            profiles=self.profiles,
            repositories_root=self.repositories,
            event_sink_url=f"{self.hub.url}/events",
            lease_seconds=lease_seconds,
            wait_seconds=wait_seconds,
            backoff_seconds=backoff_seconds,
            shutdown_grace_seconds=shutdown_grace_seconds,
            log_level="DEBUG",
        )

    def worker(
        self,
        config: WorkerConfig,
        labels: Sequence[str],
        *,
        name: str | None = None,
        wait: bool = True,
    ) -> ManagedProcess:
        return rein_worker(
            self.sup, config, name=name or f"worker-{config.worker_id}", labels=labels, wait=wait
        )

    # -- waiting ----------------------------------------------------------------------

    def wait(
        self,
        condition: Callable[[], T | bool | None],
        *,
        timeout: float,
        what: str,
        interval: float = 0.1,
    ) -> T:
        """Poll `condition` until it is truthy (returned). On timeout, fail naming `what`
        with the end of every process's log."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value  # type: ignore[return-value]
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:g} s waiting for {what}\n{self.sup.describe()}"
                )
            time.sleep(interval)


def log_lines(process: ManagedProcess) -> list[dict[str, Any]]:
    """A process's JSON log lines (every start); other lines are skipped."""
    lines = []
    for raw in process.log_text().splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


@dataclass(frozen=True)
class Outbox:
    pending: list[dict[str, Any]]
    delivered: list[dict[str, Any]]
    quarantined: list[str]

    def for_run(self, run_id: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        run = str(run_id)
        return (
            [e for e in self.pending if e["run_id"] == run],
            [e for e in self.delivered if e["run_id"] == run],
        )


def closes_of(lines: Iterable[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The log lines of `run_id`'s closes (complete or fail, whatever their disposition)."""
    return [
        line
        for line in lines
        if line.get("run_id") == run_id and line["message"].startswith(("run complete", "run fail"))
    ]


def delivered_closes(delivered: Iterable[dict[str, Any]]) -> list[tuple[str, str, bool, str]]:
    """Delivered outbox entries as (transaction id, action, reopen, disposition), sorted."""
    return sorted(
        (e["transaction_id"], e["intent"]["action"], e["intent"]["reopen"], e["disposition"])
        for e in delivered
    )


def outbox(state_dir: Path) -> Outbox:
    """A worker's close outbox, read from its directories."""
    root = state_dir / "close-outbox"

    def entries(directory: Path) -> list[dict[str, Any]]:
        if not directory.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]

    quarantine = root / "quarantine"
    return Outbox(
        pending=entries(root / "pending"),
        delivered=entries(root / "delivered"),
        quarantined=sorted(p.name for p in quarantine.iterdir()) if quarantine.is_dir() else [],
    )


def approaches(workers: Iterable[ManagedProcess], ended: bool = False) -> list[tuple[str, int]]:
    """(run id, attempt) of every approach the workers started (or, `ended`, finished),
    in log order: a sandboxed approach can leave no mark outside its worktree, so its
    worker's `approach started` / `approach finished` lines are the record."""
    wanted = "approach finished" if ended else "approach started"
    return [
        (str(line["run_id"]), int(line["attempt"]))
        for worker in workers
        for line in log_lines(worker)
        if line.get("message") == wanted
    ]


def approach_processes(run_id: str, attempt: int) -> list[int]:
    """Pids of processes of one approach (its REIN_RUN_ID and REIN_RUN_ATTEMPT): in its
    sandbox its working directory is /workspace, which says nothing on the host."""
    return processes_with_environment(REIN_RUN_ID=run_id, REIN_RUN_ATTEMPT=str(attempt))


def processes_under(directories: Iterable[Path]) -> list[int]:
    """Pids of processes whose working directory lies under any of `directories`."""
    return processes_working_under(list(directories))


def new_token() -> str:
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class SharedPeers:
    """What every deployment of the session shares: the supervisor, the Temporal server,
    the State Hub stand-in, the workers' tokens, the profile catalogue and the
    repositories root."""

    sup: Supervisor
    temporal_address: str
    hub: StubHub
    tokens: dict[str, str]
    profiles: Path
    repositories: Path

    @contextmanager
    def deployment(
        self,
        *,
        root: Path,
        dsn: str,
        definitions: Path,
        task_queue: str,
        replicas: int,
        name: str,
        extra: Mapping[str, str] | None = None,
    ) -> Iterator[Stack]:
        """Migrate, then start `replicas` serve processes and the Temporal worker (at
        once), then sync the definitions: a deployment as its release order has it.
        `extra`: more activity-core settings for every process (the forge publication
        pushes to, say). At the end its processes stop, before the database they use
        goes."""
        from ops_demo.stack import (
            activity_core_migrate,
            activity_core_serve,
            activity_core_temporal_worker,
            sync_definitions,
            write_worker_credentials,
        )

        sup = self.sup
        with sup.scope():
            config = ActivityCoreConfig(
                database_url=dsn,
                temporal_address=self.temporal_address,
                operator_token=new_token(),
                worker_credentials_file=write_worker_credentials(
                    root / f"{name}-workers.json", self.tokens
                ),
                task_queue=task_queue,
                state_hub_url=self.hub.url,
                max_attempts=3,
                forgejo_web_base=FORGEJO,
                extra=dict(extra or {}),
            )
            activity_core_migrate(sup, config)
            stack = Stack(
                root=root,
                sup=sup,
                db=Db(dsn),
                config=config,
                temporal_address=self.temporal_address,
                hub=self.hub,
                tokens=self.tokens,
                profiles=self.profiles,
                repositories=self.repositories,
            )
            for replica in range(replicas):
                stack.serves.append(
                    activity_core_serve(sup, config, name=f"{name}-serve-{replica + 1}", wait=False)
                )
            stack.temporal_worker = activity_core_temporal_worker(
                sup, config, name=f"{name}-temporal-worker", wait=False
            )
            for process, _ in stack.serves:
                process.wait_ready()
            stack.temporal_worker.wait_ready()
            synced = sync_definitions(sup, config, [definitions])
            assert "definitions synced" in synced.output, synced.output
            yield stack
            stack.db.close()


def processes_mentioning(text: str) -> list[str]:
    """Processes whose command line or environment contains `text` (`pid: command`)."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            command = " ".join(process.cmdline())
            environ = process.environ()
        except psutil.Error:
            continue
        if text in command or any(text in f"{k}={v}" for k, v in environ.items()):
            found.append(f"{process.pid}: {command}")
    return found


def ui_facts(page: str, ops_run_id: Any) -> dict[str, str]:
    """The state, attempt and lease holder the run page shows for one ops run."""
    assert f'id="ops-run-{ops_run_id}"' in page, f"the page shows no ops run {ops_run_id}"
    # the card's fields are the first of their kind after its id
    card = page.split(f'id="ops-run-{ops_run_id}"', 1)[1]
    facts = {}
    for name in ("state", "attempt", "claim_owner"):
        found = re.search(rf'data-field="{name}">(?:<code class="wrap">)?([^<]*)<', card)
        facts[name] = found[1] if found else ""
    return facts
