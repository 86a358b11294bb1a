"""The demo's walk-through: start every process, fire one automation, follow its runs, print
where to look next, and stop it all (the command line and its options are cli.py's)."""

from __future__ import annotations

import argparse
import fcntl
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import httpx

from ops_demo.api import OpsApi
from ops_demo.postgres import EmbeddedPostgres
from ops_demo.progress import RunFollower
from ops_demo.repository import init_bare_repository
from ops_demo.stack import (
    ActivityCoreConfig,
    WorkerConfig,
    activity_core_migrate,
    activity_core_serve,
    activity_core_temporal_worker,
    base_environment,
    rein_worker,
    sync_definitions,
    temporal_dev_server,
)
from ops_devsupport.processes import LOCAL_HOST, ProcessFailed, Supervisor, free_port
from ops_devsupport.processes import port_is_open as _port_is_open

__all__ = ["DEFAULT_AUTOMATION", "DEFAULT_PORT", "PROG", "TITLES", "Console", "Demo", "DemoError"]

PROG = "ops-demo"
DEFAULT_AUTOMATION = "fi-daily-brief"
DEFAULT_PORT = 8080
WORKER_ID = "rein-aharness@ops-demo"
POLL_SECONDS = 0.2


# what each process is called in the terminal
TITLES = {
    "temporal": "Temporal dev server",
    "activity-core-serve": "activity-core",
    "activity-core-temporal-worker": "activity-core temporal-worker",
    "rein-aharness-worker": "rein-aharness worker",
    "activity-core-migrate": "activity-core migrate",
    "activity-core-sync-definitions": "activity-core sync-definitions",
}


class DemoError(Exception):
    """The demo cannot go on; the message is the one line to print."""


def find_examples(explicit: Path | None) -> Path:
    """The examples directory: `explicit`, else the checkout this package runs from, else
    the working directory's."""
    candidates = [explicit] if explicit is not None else []
    if explicit is None:
        here = Path(__file__).resolve()
        candidates += [parent / "examples" for parent in here.parents]
        candidates.append(Path.cwd() / "examples")
    for candidate in candidates:
        if (candidate / "definitions").is_dir() and (candidate / "profiles.yaml").is_file():
            return candidate.resolve()
    where = explicit if explicit is not None else "the checkout"
    raise DemoError(
        f"no examples directory with definitions/ and profiles.yaml in {where}; "
        "run from the repository or pass --examples"
    )


class Console:
    """What the user reads: lines on stdout, flushed at once."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def line(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def step(self, text: str, started: float | None = None) -> None:
        took = f"  ({time.monotonic() - started:.1f} s)" if started is not None else ""
        self.line(f"  [ok] {text}{took}")


class Demo:
    def __init__(self, args: argparse.Namespace, console: Console) -> None:
        self.args = args
        self.out = console
        self.state: Path = args.state_dir.expanduser().resolve()
        self.sup: Supervisor | None = None
        self.postgres = EmbeddedPostgres(self.state / "postgres")
        self.failed = False
        self._lock_fd: int | None = None
        self.temporal_ui_port = free_port()
        # the worker's mirrors of the repositories it fetches (REIN_AHARNESS_REPOSITORIES_ROOT)
        self.mirrors = self.state / "mirrors"
        # set once known: activity-core's address, the forge the worker fetches from
        self.url = ""
        self.repository_url = ""

    # -- the steps --------------------------------------------------------------------

    def run(self) -> int:
        args = self.args
        self.state.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        examples = find_examples(args.examples)
        if shutil.which("git") is None:
            raise DemoError("git is not installed; the rein-aharness worker needs it")
        logs = self.state / "logs"
        self.out.line(f"{PROG}: starting everything (state {self.state}, logs {logs})")
        sup = self.sup = Supervisor(logs, env=base_environment(), stop_timeout=20)

        started = time.monotonic()
        temporal, temporal_address = temporal_dev_server(
            sup, self.state / "temporal", ui_port=self.temporal_ui_port, wait=False
        )
        dsn = self.postgres.start()
        self.out.step(f"PostgreSQL (embedded), data in {self.postgres.pgdata}", started)

        repositories = self.mirrors
        repository_url = args.repository_url
        if repository_url is None:
            forge = self.state / "forge"
            init_bare_repository(
                forge / "research" / "briefs.git",
                {"README.md": "# research/briefs\n\nBriefs written by the ops-demo worker.\n"},
                message="ops-demo: an empty briefs repository",
            )
            repository_url = f"file://{forge}/{{target_repo}}.git"
        self.repository_url = repository_url
        # activity-core publishes an operator-approved change to the same forge the
        # worker fetches from (its Temporal worker pushes; the worker never does)
        publication = {"ACTIVITY_CORE_REPOSITORY_URL": repository_url}
        if args.repository_token_file is not None:
            publication["ACTIVITY_CORE_REPOSITORY_TOKEN_FILE"] = str(args.repository_token_file)
        operator_token = secrets.token_urlsafe(24)
        config = ActivityCoreConfig(
            database_url=dsn,
            temporal_address=temporal_address,
            operator_token=operator_token,
            worker_token=secrets.token_urlsafe(24),
            worker_id=WORKER_ID,
            extra=publication,
        )
        started = time.monotonic()
        migrated = activity_core_migrate(sup, config)
        self.out.step(_last_line(migrated.output, "schema migrated"), started)

        started = time.monotonic()
        temporal.wait_ready()
        self.out.step(f"Temporal dev server at {temporal_address}", started)

        repositories.mkdir(parents=True, exist_ok=True)
        worker_config = WorkerConfig(
            activity_core_url="",  # set below, once the port is known
            worker_id=WORKER_ID,
            worker_token=config.worker_token or "",
            state_dir=self.state / "rein-aharness",
            profiles=examples / "profiles.yaml",
            repositories_root=repositories,
            repository_url=repository_url,
            repository_token_file=args.repository_token_file,
            shutdown_grace_seconds=5,
            # activity-core's graceful stop waits for a long-poll claim in flight, even
            # one whose worker has gone: keep it short so Ctrl-C is quick
            wait_seconds=5,
        )

        started = time.monotonic()
        serve, url = activity_core_serve(sup, config, port=self._port(), wait=False)
        temporal_worker = activity_core_temporal_worker(sup, config, wait=False)
        worker = rein_worker(
            sup,
            _with_url(worker_config, url),
            name="rein-aharness-worker",
            wait=False,
        )
        serve.wait_ready()
        self.url = url
        self.out.step(f"activity-core at {url}", started)
        temporal_worker.wait_ready()
        self.out.step(f"activity-core temporal-worker (task queue {config.task_queue})", started)
        worker.wait_ready()
        self.out.step(f"rein-aharness worker {WORKER_ID}, fetching from {repository_url}", started)

        started = time.monotonic()
        synced = sync_definitions(sup, config, [examples / "definitions"])
        self.out.step(_last_line(synced.output, "definitions synced"), started)

        with OpsApi(url, operator_token) as api:
            try:
                outcome = self._fire_and_follow(api, args.automation)
            except httpx.HTTPError as exc:
                self._check_alive()
                raise DemoError(
                    f"activity-core did not answer ({type(exc).__name__}) "
                    f"(log: {self._log('activity-core-serve')})"
                ) from None
        detail_url = f"{url}/ops/ui/automations/{args.automation}/runs/{outcome.run_id}"
        self.out.line()
        self.out.line(f"Ops UI:          {detail_url}")
        self.out.line(f"                 (all automations: {url}/ops/ui/)")
        self.out.line(f"Temporal UI:     http://{LOCAL_HOST}:{self.temporal_ui_port}")
        self.out.line("                 (the schedules and each fire's workflow)")
        self.out.line("Operator:        operator")
        self.out.line(f"Operator token:  {operator_token}")
        self.out.line("                 (sign in with this name and token; the token is printed")
        self.out.line("                 only now and changes with every start)")
        self.out.line()
        if args.no_wait:
            return 1 if self.failed else 0
        self.out.line("Everything keeps running. Press Ctrl-C to stop.")
        self._watch()
        return 1  # not reached: _watch returns only by an exception

    def _port(self) -> int:
        if self.args.port is not None:
            if _port_is_open("127.0.0.1", self.args.port):
                raise DemoError(f"port {self.args.port} is in use; pass another --port")
            return int(self.args.port)
        if not _port_is_open("127.0.0.1", DEFAULT_PORT):
            return DEFAULT_PORT
        return free_port()

    def _fire_and_follow(self, api: OpsApi, automation: str) -> _Outcome:
        follower = RunFollower(self._log("activity-core-serve"))
        fired = api.fire(
            automation,
            {"correlation_id": f"ops-demo-{secrets.token_hex(6)}", "goal_ref": "ops-demo"},
        )
        run_id = str(fired["run_id"])
        self.out.line(f"fired {automation} (Temporal workflow {fired['workflow_id']})")
        deadline = time.monotonic() + self.args.timeout
        while True:
            self._check_alive()
            detail = api.fire_detail(automation, run_id)
            fire = detail["run"] if detail is not None else None
            if fire is not None and fire["status"] == "failed":
                self.failed = True
                raise DemoError(
                    f"the fire of {automation} failed in the temporal-worker "
                    f"(log: {self._log('activity-core-temporal-worker')})"
                )
            if fire is not None and follower.done(fire):
                for change in follower.settle(fire):
                    self.out.line(change.line())
                return self._report(fire, run_id)
            for change in follower.update(fire):
                self.out.line(change.line())
            if time.monotonic() > deadline:
                self.failed = True
                self.out.line(
                    f"{PROG}: the run did not complete within {self.args.timeout:g} s "
                    f"(logs in {self.state / 'logs'}); everything keeps running to inspect it"
                )
                return _Outcome(run_id)
            time.sleep(POLL_SECONDS)

    def _report(self, fire: dict[str, Any], run_id: str) -> _Outcome:
        runs = fire["ops_runs"]
        if not runs:
            self.out.line("run completed: emitted no ops run (a report-only automation)")
            return _Outcome(run_id)
        states = sorted({ops_run["state"] for ops_run in runs})
        self.failed = states != ["succeeded"]
        self.out.line(f"run completed: {', '.join(states)}")
        for ops_run in runs:
            for artefact in ops_run["artifacts"]:
                head = (artefact.get("head_after") or "")[:12]
                branch = f"rein/{ops_run['id']}/{ops_run['attempt']}"
                target = artefact.get("target_repo") or ops_run["target_repo"]
                repository = self.mirrors / f"{target}.git"
                self.out.line(f"  artefact {artefact['path']} at commit {head} (branch {branch})")
                self.out.line(f"  see it:  git -C {repository} show {branch}:{artefact['path']}")
            if ops_run["state"] == "succeeded" and ops_run["artifacts"]:
                self._report_hand_off(
                    str(ops_run["id"]), f"rein/{ops_run['id']}/{ops_run['attempt']}"
                )
            if ops_run["last_error"]:
                self.out.line(f"  last error: {ops_run['last_error']}")
        return _Outcome(run_id)

    def _report_hand_off(self, ops_run_id: str, branch: str) -> None:
        """Where the change is seen and how it is published: the worker handed it to
        activity-core; publishing is an operator's act (activity-core pushes the branch to
        the forge), never the worker's."""
        cli = f"uv run activity-core runs --url {self.url} {{}} {ops_run_id}"
        self.out.line(f"  the change: {cli.format('changes')}")
        self.out.line("              (or the Changes section of the run's page in the Ops UI)")
        self.out.line(f"  publish it: {cli.format('publish')}")
        self.out.line(f"              (pushes {branch} to {self.repository_url}; or the")
        self.out.line("              Publish button on the run's page; both as the operator,")
        self.out.line("              with ACTIVITY_CORE_OPERATOR_TOKEN set to the token below)")

    def _watch(self) -> None:
        while True:
            self._check_alive()
            time.sleep(0.5)

    def _check_alive(self) -> None:
        assert self.sup is not None
        for process in self.sup.processes:
            if process.starts and not process.alive:
                self.failed = True
                raise ProcessFailed(
                    TITLES.get(process.name, process.name),
                    f"exited unexpectedly with status {process.returncode}",
                    process.log_path,
                )

    def _log(self, name: str) -> Path:
        assert self.sup is not None
        return self.sup.log_path(name)

    # -- stopping ---------------------------------------------------------------------

    def shutdown(self) -> None:
        names: list[str] = []
        sup = self.sup
        if sup is not None:
            running = [p for p in reversed(sup.processes) if p.alive]
            names = [TITLES.get(p.name, p.name) for p in running]
        if self.postgres.started:
            names.append("PostgreSQL")
        if names:
            self.out.line(f"stopping {', '.join(names)} ...")
        problems: list[str] = []
        if sup is not None:
            for process in reversed(sup.processes):
                _quietly(process.cleanup, problems)
        _quietly(self.postgres.close, problems)
        for problem in problems:
            print(f"{PROG}: {problem}", file=sys.stderr)
        if names:
            self.out.line("stopped." if not problems else "stopped, with the problems above.")
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _take_lock(self) -> None:
        path = self.state / "ops-demo.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DemoError(
                f"another ops-demo is running with the state dir {self.state}"
            ) from None
        self._lock_fd = fd


class _Outcome:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id


def _with_url(config: WorkerConfig, url: str) -> WorkerConfig:
    from dataclasses import replace

    return replace(config, activity_core_url=url)


def _last_line(output: str, fallback: str) -> str:
    lines = [
        line.removeprefix("activity-core: ").strip()
        for line in output.splitlines()
        if line.startswith("activity-core: ") and "embedded PostgreSQL" not in line
    ]
    return lines[-1] if lines else fallback


def _quietly(action: Callable[[], object], problems: list[str]) -> None:
    try:
        action()
    except ProcessFailed as exc:
        problems.append(str(exc))
    except Exception as exc:
        problems.append(f"while stopping: {type(exc).__name__}: {exc}")
