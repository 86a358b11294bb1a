"""The deployment starts and does its job: every overlay rendered (as validate-deploy renders
it), every container of it started as a local process with exactly the rendered
environment, and one fire carried through to a landed branch, then published by an
operator through the rendered API to a branch on the test's git server.

For each app overlay, with its release kustomization (prod-monitoring has none of its own:
it is applied with prod's release):

1. The release Jobs run in order, each container (init containers first) to exit 0:
   `migrate` on an empty database, then `sync-definitions` of the shipped definitions.
2. Every Deployment's and StatefulSet's pod: init containers to exit 0, then the
   containers started, and each answers every probe it declares (httpGet: 200 at the
   probe's path and port; exec: exit 0), the Temporal worker's readinessProbe included,
   which means it polls the dev server. Every port named `metrics` answers `GET /metrics`,
   and with the monitoring component every ServiceMonitor and PodMonitor endpoint answers
   its scrape, the API's with the Secret's token (and 401 without).
3. The shipped FI daily brief is fired through the API (operator token from the Secret);
   the Temporal worker emits its run, the rein-aharness worker claims it, fetches
   `research/briefs` from the git server with the Secret's token, lands the brief on
   `rein/<run>/1` in its mirror on the repositories volume, and closes it `succeeded`, its
   baseline the server's head. With `ACTIVITY_CORE_ISSUE_SINK=state-hub` (prod) the
   emission's progress event reaches the State Hub stand-in.
4. An operator (the Secret's token) calls `POST /ops-runs/{id}/publish` on the rendered
   API; the Temporal worker pushes `refs/heads/rein/<run>/1` to the git server with the
   Secret's token and the run's publication becomes `published` at its head_after.

How the rendered pods become local processes (local_pods.py says it in full): volumes are
written under a scratch root per pod (Secrets with test values: the database URL of this
test's database, random tokens, the worker tokens from worker-secrets.sh, the git server's
token; ConfigMaps as rendered) and every env value and argument naming a mounted path is
moved there; argv[0] is this venv's console script of the image, with the image's runtime
ENV and WORKDIR; every declared containerPort is given a free local port by rewriting the
settings that bind it (`0.0.0.0:<port>` env values, `--host/--port` args), and URLs of
rendered Services point at those ports. What lives outside the manifests is replaced by
variable: TEMPORAL_ADDRESS by a dev server of this test's own, STATE_HUB_URL by a stand-in
that records POST /progress, and REIN_AHARNESS_REPOSITORY_URL keeps its path template
(`/{target_repo}.git`) on the git server's origin (its user name: the rendered
REIN_AHARNESS_REPOSITORY_USERNAME, else the worker's default), and so does the Temporal
worker's ACTIVITY_CORE_REPOSITORY_URL (publication's remote: the same forge, the same user
name; the test server has one token, so the Secrets activity-core-repository and
rein-aharness-repository hold the same one here, where a deployment has a push token and a
read token). FORGEJO_WEB_BASE stays as rendered: links the UI renders, never requested.
Of a StatefulSet's replicas, pod 0 is started: the others differ only in `$(POD_NAME)`,
and test_worker_secrets.py starts each with its own token.

What in the manifests a local process cannot reach, and where it is checked instead:
- securityContext (UID/GID 10001, read-only root, capabilities, seccomp, procMount,
  hostUsers), the namespaces' Pod Security labels: test_worker_sandbox.py; the processes
  here run as the test's user.
- Secret and ConfigMap file modes, fsGroup: test_worker_secrets.py.
- NetworkPolicies (no CNI here; the addresses are mapped instead): test_monitoring.py
  holds the scrape and probe ports to them; here, the git egress policy must open the port
  of the rendered repository URL.
- resources, probe timings (period, thresholds, terminationGracePeriodSeconds), lifecycle
  preStop sleep, strategies, topology spread, HPA, PDBs, Job backoff/deadline/TTL,
  podManagementPolicy, claim retention and sizes: scheduling and kubelet behaviour, not
  the process's; validate-deploy checks them against the Kubernetes schemas and checkov.
- images and pull policies: the venv stands in for the image; test_image_install.py
  replays the Dockerfiles' install.
- Namespaces, ServiceAccounts, automountServiceAccountToken, enableServiceLinks: there is
  no API server here, so nothing to mount or inject; each process gets only the
  environment built above, which is what `enableServiceLinks: false` leaves a container.
- Claim templates: each is an empty directory at its mountPath, as a new volume is; their
  sizes and access modes are the storage's business.
- PrometheusRule and the dashboard: validate-deploy (promtool) and test_monitoring.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from activity_core.temporal.dev_server import DevServer, ephemeral_dev_server
from local_pods import LocalContainer, local_container, plan_ports, probes, service_urls
from made_secrets import made_secrets
from ops_runtime.threaded_servers import served_in_a_thread
from ops_testsupport.git_server import GitServer, running_git_server
from rein_aharness.repository.remote import DEFAULT_USERNAME
from rendered_pods import Obj, config_map, containers, kustomizations, rendered, workloads

APPS = {"dev": "dev/release", "prod": "prod/release", "prod-monitoring": "prod/release"}
AUTOMATION = "fi-daily-brief"
TARGET = "research/briefs"
WORKER = "rein-aharness"
TEMPORAL_WORKER = ("Deployment", "activity-core-temporal-worker")
START_SECONDS = 60.0
RUN_SECONDS = 60.0


def test_every_overlay_is_started_here() -> None:
    assert set(kustomizations()) == {*APPS, *APPS.values()}


# -- the world outside the manifests --------------------------------------------------------


class StateHubStandIn:
    """State Hub's progress endpoint (activity_core.emission.sink): 201 and an id for
    every POST /progress, each body kept."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = self.path == "/progress"
                if ok:
                    stand_in.events.append(json.loads(body))
                data = json.dumps({"id": f"progress-{len(stand_in.events)}"}).encode()
                self.send_response(201 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[StateHubStandIn]:
        with served_in_a_thread(self._server, "state-hub-stand-in"):
            yield self


@pytest.fixture
def temporal(tmp_path: Path) -> Iterator[DevServer]:
    with ephemeral_dev_server(tmp_path / "temporal") as server:
        yield server


@pytest.fixture
def state_hub() -> Iterator[StateHubStandIn]:
    with StateHubStandIn().running() as stand_in:
        yield stand_in


def _configured(app: str, workload: tuple[str, str]) -> dict[str, str]:
    """The ConfigMap settings of the workload's first container (its envFrom)."""
    (container, *_) = workloads(app)[workload]["spec"]["template"]["spec"]["containers"]
    found: dict[str, str] = {}
    for source in container.get("envFrom", []):
        found.update(config_map(app, source["configMapRef"]["name"]))
    return found


def _worker_env(app: str) -> dict[str, str]:
    return _configured(app, ("StatefulSet", WORKER))


@pytest.fixture(params=list(APPS))
def app(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def forge(tmp_path: Path, app: str) -> Iterator[GitServer]:
    username = _worker_env(app).get("REIN_AHARNESS_REPOSITORY_USERNAME", DEFAULT_USERNAME)
    with running_git_server(tmp_path / "forge", username=username) as server:
        yield server


# -- the pods, as processes ------------------------------------------------------------------


class Pods:
    """The processes started for an overlay, their logs, and their end: SIGTERM to each
    process group, SIGKILL after 10 s."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        logs.mkdir(parents=True)
        self.running: list[tuple[LocalContainer, subprocess.Popen[bytes]]] = []

    def log(self, container: LocalContainer) -> Path:
        return self.logs / f"{container.where.replace('/', '_').replace(':', '_')}.log"

    def tail(self, container: LocalContainer) -> str:
        path = self.log(container)
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def complete(self, container: LocalContainer, *, timeout: float = START_SECONDS) -> None:
        process = container.popen(self.log(container))
        try:
            code = process.wait(timeout=timeout)
        finally:
            _end(process)
        assert code == 0, f"{container.where} exited {code}:\n{self.tail(container)}"

    def start(self, container: LocalContainer) -> subprocess.Popen[bytes]:
        process = container.popen(self.log(container))
        self.running.append((container, process))
        return process

    def stop(self) -> None:
        for _, process in self.running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in self.running:
            _end(process)


def _end(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextmanager
def _pods(logs: Path) -> Iterator[Pods]:
    pods = Pods(logs)
    try:
        yield pods
    finally:
        pods.stop()


Build = Callable[[str, Obj, Obj], LocalContainer]


def _builder(
    tmp_path: Path,
    secrets_: dict[str, dict[str, bytes]],
    temporal: DevServer,
    state_hub: StateHubStandIn,
    forge: GitServer,
) -> Build:
    external = {
        "TEMPORAL_ADDRESS": lambda _: temporal.address,
        "STATE_HUB_URL": lambda _: state_hub.url,
        "REIN_AHARNESS_REPOSITORY_URL": lambda value: forge.base_url + urlsplit(value).path,
        "ACTIVITY_CORE_REPOSITORY_URL": lambda value: forge.base_url + urlsplit(value).path,
    }
    plans: dict[str, Any] = {}

    def build(overlay: str, workload: Obj, container: Obj) -> LocalContainer:
        if overlay not in plans:
            plan = plan_ports(rendered(overlay))
            plans[overlay] = (plan, service_urls(overlay, plan))
        plan, services = plans[overlay]
        return local_container(
            overlay,
            workload,
            container,
            root=tmp_path / "pods" / overlay.replace("/", "-") / workload["metadata"]["name"],
            secrets=secrets_,
            plan=plan,
            services=services,
            external=external,
        )

    return build


# -- probes and scrapes ----------------------------------------------------------------------


async def _until(
    check: Callable[[], Awaitable[bool]], what: str, process: subprocess.Popen[bytes]
) -> None:
    """Call `check` (True when done) until it is, while the process lives."""
    async with asyncio.timeout(START_SECONDS):
        while True:
            assert process.poll() is None, f"{what}: the process exited {process.returncode}"
            if await check():
                return
            await asyncio.sleep(0.2)


async def _http_ok(http: httpx.AsyncClient, url: str, **kwargs: Any) -> bool:
    try:
        return (await http.get(url, **kwargs)).status_code == 200
    except httpx.TransportError:
        return False


def _http_check(http: httpx.AsyncClient, url: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await _http_ok(http, url)

    return check


def _exec_check(local: LocalContainer, command: list[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        done = await asyncio.to_thread(local.run, command, timeout=30)
        return done.returncode == 0

    return check


async def _probes_pass(
    http: httpx.AsyncClient,
    pods: Pods,
    local: LocalContainer,
    rendered_container: Obj,
    process: subprocess.Popen[bytes],
) -> set[str]:
    """Every probe of the container passes; the ports they reached."""
    reached = set()
    for kind, probe in probes(rendered_container):
        what = f"{local.where} {kind}"
        if "httpGet" in probe:
            port = local.ports[str(probe["httpGet"]["port"])]
            reached.add(str(probe["httpGet"]["port"]))
            answered = _http_check(http, f"http://127.0.0.1:{port}{probe['httpGet']['path']}")
        else:
            answered = _exec_check(local, probe["exec"]["command"])
        try:
            await _until(answered, what, process)
        except (AssertionError, TimeoutError) as exc:
            raise AssertionError(f"{what} never passed ({exc!r}):\n{pods.tail(local)}") from None
    return reached


def _declared_ports(container: Obj) -> dict[str, int]:
    return {
        str(port.get("name", port["containerPort"])): int(port["containerPort"])
        for port in container.get("ports", [])
    }


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


async def _monitors_scrape(
    http: httpx.AsyncClient,
    app: str,
    started: dict[tuple[str, str], LocalContainer],
    secrets_: dict[str, dict[str, bytes]],
) -> int:
    """Every ServiceMonitor and PodMonitor endpoint of the overlay answers its scrape;
    how many there were."""
    objects = rendered(app)
    scraped = 0
    for monitor in (obj for obj in objects if obj["kind"] in ("ServiceMonitor", "PodMonitor")):
        selector = monitor["spec"]["selector"]["matchLabels"]
        if monitor["kind"] == "ServiceMonitor":
            (service,) = [
                obj
                for obj in objects
                if obj["kind"] == "Service" and _matches(selector, obj["metadata"]["labels"])
            ]
            pod_selector, endpoints = service["spec"]["selector"], monitor["spec"]["endpoints"]
            ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
        else:
            pod_selector, endpoints = selector, monitor["spec"]["podMetricsEndpoints"]
            ports = {}
        (target,) = [
            local
            for key, local in started.items()
            if _matches(pod_selector, workloads(app)[key]["spec"]["template"]["metadata"]["labels"])
        ]
        for endpoint in endpoints:
            port = target.ports[str(ports.get(endpoint["port"], endpoint["port"]))]
            url = f"http://127.0.0.1:{port}{endpoint.get('path', '/metrics')}"
            headers = {}
            credentials = endpoint.get("authorization", {}).get("credentials")
            if credentials is not None:
                token = secrets_[credentials["name"]][credentials["key"]].decode()
                headers["Authorization"] = f"Bearer {token}"
                assert (await http.get(url)).status_code == 401, url
            answer = await http.get(url, headers=headers)
            assert answer.status_code == 200, (monitor["metadata"]["name"], answer.text[:200])
            scraped += 1
    return scraped


# -- the run ---------------------------------------------------------------------------------


async def _run_of_the_fire(dsn: str) -> asyncpg.Record:
    connection = await asyncpg.connect(dsn)
    try:
        async with asyncio.timeout(RUN_SECONDS):
            while True:
                row = await connection.fetchrow(
                    "SELECT id, state, attempt, last_error, result::text AS result "
                    "FROM ops_runs WHERE target_repo = $1",
                    TARGET,
                )
                if row is not None and row["state"] not in ("open", "claimed"):
                    return row
                await asyncio.sleep(0.3)
    finally:
        await connection.close()


def _git(directory: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-C", str(directory), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _git_egress_opens(app: str, url: str, policy_name: str, workload: tuple[str, str]) -> None:
    """The egress policy `policy_name` selects the workload's pods and opens the URL's port."""
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}[parts.scheme]
    (policy,) = [
        obj
        for obj in rendered(app)
        if obj["kind"] == "NetworkPolicy" and obj["metadata"]["name"] == policy_name
    ]
    labels = workloads(app)[workload]["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert all(labels.get(key) == value for key, value in selector.items()), policy_name
    opened = {rule_port["port"] for rule in policy["spec"]["egress"] for rule_port in rule["ports"]}
    assert port in opened, (url, opened)


# -- the test --------------------------------------------------------------------------------


async def test_the_overlay_starts_and_carries_a_fire_to_a_landed_branch(
    app: str,
    tmp_path: Path,
    empty_dsn: str,
    temporal: DevServer,
    state_hub: StateHubStandIn,
    forge: GitServer,
) -> None:
    release = APPS[app]
    head = forge.create_repository(TARGET, {"README.md": "# briefs\n", "briefs/.keep": ""})
    _git_egress_opens(
        app,
        _worker_env(app)["REIN_AHARNESS_REPOSITORY_URL"],
        "rein-aharness-git-egress",
        ("StatefulSet", WORKER),
    )
    publication = _configured(app, TEMPORAL_WORKER)
    _git_egress_opens(
        app,
        publication["ACTIVITY_CORE_REPOSITORY_URL"],
        "activity-core-git-egress",
        TEMPORAL_WORKER,
    )
    # one forge, one user name on the test's git server
    assert publication["ACTIVITY_CORE_REPOSITORY_USERNAME"] == forge.username

    worker_set = workloads(app)[("StatefulSet", WORKER)]
    secrets_ = made_secrets(
        _fresh(tmp_path / "secrets"),
        int(worker_set["spec"]["replicas"]),
        forge.token,
        publication_token=forge.token,
    )
    operator_token = secrets.token_urlsafe(24)
    secrets_["activity-core"] = {
        "database-url": empty_dsn.encode(),
        "operator-token": operator_token.encode(),
    }
    secrets_["activity-core-metrics"] = {"token": secrets.token_urlsafe(24).encode()}
    build = _builder(tmp_path, secrets_, temporal, state_hub, forge)

    with _pods(tmp_path / "logs") as pods:
        # 1. the release Jobs, in the README's order (migrate, then sync-definitions)
        jobs = sorted((key, obj) for key, obj in workloads(release).items() if key[0] == "Job")
        assert [key[1] for key, _ in jobs] == [
            "release-activity-core-migrate",
            "release-activity-core-sync-definitions",
        ]
        for _, job in jobs:
            for container in containers(job["spec"]["template"]["spec"]):
                assert not container.get("ports"), container["name"]
                pods.complete(build(release, job, container))

        # 2. the app: init containers to completion, then every container and its probes
        started: dict[tuple[str, str], LocalContainer] = {}
        waits = []
        async with httpx.AsyncClient(timeout=5) as http:
            for key, workload in workloads(app).items():
                pod = workload["spec"]["template"]["spec"]
                for container in pod.get("initContainers", []):
                    assert not container.get("ports"), container["name"]
                    pods.complete(build(app, workload, container))
                for container in pod["containers"]:
                    local = build(app, workload, container)
                    process = pods.start(local)
                    started[key] = local
                    waits.append((local, container, process))
            assert {key for key in started} == {
                ("Deployment", "activity-core"),
                ("Deployment", "activity-core-temporal-worker"),
                ("StatefulSet", WORKER),
            }
            # publication's remote and its token reach the Temporal worker, and it alone
            publisher = started[TEMPORAL_WORKER]
            template = publisher.env["ACTIVITY_CORE_REPOSITORY_URL"]
            assert template.replace("{target_repo}", TARGET) == forge.url(TARGET)
            token_file = Path(publisher.env["ACTIVITY_CORE_REPOSITORY_TOKEN_FILE"])
            assert token_file.read_text(encoding="utf-8").strip() == forge.token
            for key, local in started.items():
                if key != TEMPORAL_WORKER:
                    assert not {
                        "ACTIVITY_CORE_REPOSITORY_URL",
                        "ACTIVITY_CORE_REPOSITORY_TOKEN_FILE",
                    } & set(local.env), key
            for local, container, process in waits:
                reached = await _probes_pass(http, pods, local, container, process)
                for name, number in _declared_ports(container).items():
                    if name in reached or str(number) in reached:
                        continue
                    assert name == "metrics", f"{local.where}: port {name} reached by nothing"
                    url = f"http://127.0.0.1:{local.ports[name]}/metrics"
                    assert await _http_ok(http, url), url
            monitors = await _monitors_scrape(http, app, started, secrets_)
            assert monitors == (3 if app == "prod-monitoring" else 0)

            # 3. one fire, end to end
            api = started[("Deployment", "activity-core")]
            fired = await http.post(
                f"http://127.0.0.1:{api.ports['http']}/ops/automations/{AUTOMATION}/fire",
                headers={"Authorization": f"Bearer {operator_token}"},
                json={"correlation_id": "manifest-start"},
            )
            assert fired.status_code == 202, fired.text
            row = await _run_of_the_fire(empty_dsn)

        worker = started[("StatefulSet", WORKER)]
        assert row["state"] == "succeeded", (row["last_error"], pods.tail(worker))
        transaction = json.loads(row["result"])["repository_transaction"]
        assert transaction["baseline_digest"] == head
        mirror = Path(worker.env["REIN_AHARNESS_REPOSITORIES_ROOT"]) / f"{TARGET}.git"
        landed = _git(mirror, "rev-parse", f"refs/heads/rein/{row['id']}/{row['attempt']}")
        assert transaction["accepted_commits"] == [landed]
        assert _git(mirror, "rev-parse", f"{landed}^") == head
        fetched = [r for r in forge.requests_to(TARGET) if r.status == 200]
        assert fetched and {r.user for r in fetched} == {forge.username}
        sink = _configured(app, ("Deployment", "activity-core"))["ACTIVITY_CORE_ISSUE_SINK"]
        assert len(state_hub.events) == (1 if sink == "state-hub" else 0), state_hub.events

        # 4. an operator publishes the run through the rendered API: the Temporal worker
        # pushes its branch to the forge with the Secret's token, at the run's head_after
        head_after = json.loads(row["result"])["head_after"]
        ref = f"refs/heads/rein/{row['id']}/{row['attempt']}"
        operator = {"Authorization": f"Bearer {operator_token}"}
        base = f"http://127.0.0.1:{api.ports['http']}"
        async with httpx.AsyncClient(timeout=10) as http:
            asked = await http.post(f"{base}/ops-runs/{row['id']}/publish", headers=operator)
            assert asked.status_code == 202, asked.text
            async with asyncio.timeout(RUN_SECONDS):
                while True:
                    shown = await http.get(f"{base}/ops-runs/{row['id']}", headers=operator)
                    assert shown.status_code == 200, shown.text
                    publication_shown = shown.json()["publication"]
                    if publication_shown["state"] != "pending":
                        break
                    await asyncio.sleep(0.3)
        assert publication_shown["state"] == "published", (
            publication_shown,
            pods.tail(publisher),
        )
        assert publication_shown["commit"] == head_after == landed
        assert forge.refs(TARGET)[ref] == head_after
        pushes = [r for r in forge.requests_to(TARGET) if r.path.endswith("/git-receive-pack")]
        assert pushes and {r.user for r in pushes} == {forge.username}
        assert forge.token not in pods.tail(publisher)


def _fresh(directory: Path) -> Path:
    directory.mkdir(parents=True)
    return directory
