"""The monitoring component (deploy/k8s/components/monitoring) as an overlay renders it.

Rendered with kubectl kustomize at validate-deploy's pinned version
(overlays/prod-monitoring), the component's objects must fit what they watch: each
monitor selects a workload that exists and names one of its ports; every PromQL expression
of the alerts and of the Grafana dashboard uses only metric names the services really
export (read from their own registries and collector, and the Temporal SDK names that the
temporal-worker probe test finds on a real worker); every alert has its runbook paragraph
in deploy/README.md and a promtool unit test; every exported metric is documented with how
to aggregate it across replicas. The workers' liveness probes must reach the liveness
endpoints their settings open. The API requires the scrape token its ServiceMonitor sends,
read from a file of the same Secret; the metrics endpoints that take no token are open to
Prometheus's namespace only.

scripts/validate-deploy checks the same objects against the Prometheus Operator's API and
runs promtool over the rules.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from activity_core.queue.metrics import QueueMetrics
from activity_core.settings import SECRET_VARIABLES, load_settings
from activity_core.temporal.worker_endpoints import TEMPORAL_SDK_METRICS
from rein_aharness.outbox import OutboxStore
from rein_aharness.worker.metrics import WorkerMetrics
from rendered_pods import rendered

REPO = Path(__file__).resolve().parents[2]
COMPONENT = REPO / "deploy" / "k8s" / "components" / "monitoring"
DASHBOARD = COMPONENT / "dashboard.json"
ALERTS_TEST = COMPONENT / "alerts.test.yaml"
README = REPO / "deploy" / "README.md"

Obj = dict[str, Any]


def _rendered() -> tuple[Obj, ...]:
    return rendered("prod-monitoring")


def _of_kind(kind: str) -> list[Obj]:
    return [obj for obj in _rendered() if obj["kind"] == kind]


def _one(kind: str, name: str) -> Obj:
    (found,) = [obj for obj in _of_kind(kind) if obj["metadata"]["name"] == name]
    return found


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _pod_templates() -> Iterator[tuple[Obj, Obj]]:
    for obj in _rendered():
        if obj["kind"] in ("Deployment", "StatefulSet"):
            yield obj, obj["spec"]["template"]


def _container_ports(template: Obj) -> set[str]:
    return {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}


# -- what PromQL expressions may name --------------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])[A-Za-z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    keywords, label names (matchers and groupings are dropped first) or strings."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function
        if match.group(0).lower() not in _KEYWORDS:
            names.add(match.group(0))
    return names


def _series_names(families: Any) -> set[str]:
    names = set()
    for family in families:
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names


@cache
def _activity_core_families() -> tuple[Any, ...]:
    return tuple(QueueMetrics().registry.collect())


def _rein_aharness_families(tmp_path: Path) -> tuple[Any, ...]:
    return tuple(WorkerMetrics(OutboxStore(tmp_path / "close-outbox")).registry.collect())


@pytest.fixture
def known_metrics(tmp_path: Path) -> set[str]:
    temporal = {
        f"{name}{suffix}"
        for name in TEMPORAL_SDK_METRICS
        for suffix in ("", "_bucket", "_sum", "_count")
    }
    return (
        _series_names(_activity_core_families())
        | _series_names(_rein_aharness_families(tmp_path))
        | temporal
    )


def _alert_rules() -> list[Obj]:
    (rule,) = _of_kind("PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _dashboard() -> Obj:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _dashboard_panels() -> list[Obj]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard_panels() for t in p["targets"]]


# -- the component renders --------------------------------------------------------------------


def test_the_overlay_renders_the_app_and_the_component_in_one_namespace() -> None:
    kinds = {obj["kind"] for obj in _rendered()}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"} <= kinds
    assert {"Deployment", "StatefulSet"} <= kinds
    namespaced = [obj for obj in _rendered() if obj["kind"] != "Namespace"]
    assert {obj["metadata"].get("namespace") for obj in namespaced} == {"ops-queue"}


def test_every_monitor_selects_a_workload_and_names_one_of_its_ports() -> None:
    (service_monitor,) = _of_kind("ServiceMonitor")
    selector = service_monitor["spec"]["selector"]["matchLabels"]
    (service,) = [s for s in _of_kind("Service") if _matches(selector, s["metadata"]["labels"])]
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in service_monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names and endpoint["path"] == "/metrics"
    backing = [
        t
        for _, t in _pod_templates()
        if _matches(service["spec"]["selector"], t["metadata"]["labels"])
    ]
    assert backing, "the monitored Service selects no pods"

    monitored = set()
    for pod_monitor in _of_kind("PodMonitor"):
        selector = pod_monitor["spec"]["selector"]["matchLabels"]
        templates = [
            (owner, t)
            for owner, t in _pod_templates()
            if _matches(selector, t["metadata"]["labels"])
        ]
        assert len(templates) == 1, pod_monitor["metadata"]["name"]
        owner, template = templates[0]
        for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in _container_ports(template)
            assert endpoint["path"] == "/metrics"
        monitored.add((owner["kind"], owner["metadata"]["name"]))
    assert monitored == {
        ("StatefulSet", "rein-aharness"),
        ("Deployment", "activity-core-temporal-worker"),
    }


def test_the_scrape_policies_open_the_ports_the_monitors_scrape() -> None:
    policies = {p["metadata"]["name"]: p for p in _of_kind("NetworkPolicy")}
    api = policies["prometheus-scrape-api"]["spec"]
    workers = policies["prometheus-scrape-workers"]["spec"]
    assert [p["port"] for rule in api["ingress"] for p in rule["ports"]] == [8080]
    assert [p["port"] for rule in workers["ingress"] for p in rule["ports"]] == [9100]
    for _owner, template in _pod_templates():
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        ports = {
            p["name"]: p["containerPort"]
            for c in template["spec"]["containers"]
            for p in c.get("ports", [])
        }
        if component in ("worker", "temporal-worker"):
            assert ports["metrics"] == 9100
        elif component == "api":
            assert ports["http"] == 8080


# -- expressions use metrics that exist ---------------------------------------------------------


def test_every_alert_expression_uses_only_exported_metrics(known_metrics: set[str]) -> None:
    # the extraction itself: metrics only, not functions, labels, keywords or numbers
    assert metric_names(
        'sum by (namespace) (rate(a_total{status=~"5..", route!~"/x|/y"}[5m])) / '
        "max without (pod) (b_seconds) > 0.05 and on (namespace) c == 1e3"
    ) == {"a_total", "b_seconds", "c"}
    for rule in _alert_rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= known_metrics, (rule["alert"], names - known_metrics)


def test_every_dashboard_expression_uses_only_exported_metrics(known_metrics: set[str]) -> None:
    exprs = _dashboard_exprs()
    assert len(exprs) >= 20
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= known_metrics, (expr, names - known_metrics)


def test_the_dashboard_is_shipped_to_grafana_as_it_is_in_the_repository() -> None:
    configmap = _one("ConfigMap", "ops-queue-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["ops-queue.json"]) == _dashboard()
    dashboard = _dashboard()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace"}
    for panel in _dashboard_panels():
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert 'namespace="$namespace"' in target["expr"], panel["title"]


# -- alerts: runbooks and tests -----------------------------------------------------------------


def _readme_anchors() -> set[str]:
    """The anchors of the README's headings, as Forgejo and GitHub make them."""
    anchors = set()
    fenced = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return anchors


def test_every_alert_has_a_runbook_paragraph_and_the_url_of_it() -> None:
    anchors = _readme_anchors()
    for rule in _alert_rules():
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"]
        url = annotations["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page.endswith("/deploy/README.md"), url
        assert anchor == rule["alert"].lower() and anchor in anchors, url
        assert rule["labels"]["severity"] in ("warning", "critical")


def test_every_alert_is_exercised_by_the_promtool_unit_tests() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    quiet = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if not case.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in _alert_rules()}
    assert fired == alerts and quiet == alerts


def test_every_exported_metric_is_documented_with_its_aggregation(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_:]+)(?:\{[^`]*\})?` \|(.*)$", text, re.M))
    families = [*_activity_core_families(), *_rein_aharness_families(tmp_path)]
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert name in rows, f"{name} is missing from deploy/README.md, Metrics"
        assert re.search(r"\b(sum|max|min)\b", rows[name]), name


# -- liveness probes reach the liveness endpoints ----------------------------------------------


def _container(kind: str, name: str) -> Obj:
    (container,) = _one(kind, name)["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def _named_port(container: Obj, name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


def _env(container: Obj, variable: str) -> str:
    (value,) = [e["value"] for e in container.get("env", []) if e["name"] == variable]
    return str(value)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("StatefulSet", "rein-aharness"), ("Deployment", "activity-core-temporal-worker")],
)
def test_the_workers_probe_the_liveness_endpoint_their_settings_open(kind: str, name: str) -> None:
    container = _container(kind, name)
    if kind == "StatefulSet":
        configmaps = [c["configMapRef"]["name"] for c in container["envFrom"]]
        (data,) = [_one("ConfigMap", n)["data"] for n in configmaps]
        liveness = data["REIN_AHARNESS_LIVENESS_ADDRESS"]
        metrics = data["REIN_AHARNESS_METRICS_ADDRESS"]
    else:
        liveness = _env(container, "ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS")
        metrics = _env(container, "ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS")
    # listening on every interface: the kubelet probes the pod's address
    assert liveness.startswith("0.0.0.0:") and metrics.startswith("0.0.0.0:")
    assert _named_port(container, "liveness") == _port_of(liveness)
    assert _named_port(container, "metrics") == _port_of(metrics)
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/livez", "port": "liveness"}
    live = container["livenessProbe"]
    # a stall is noticed after the 30 s limit, the restart follows within three periods
    assert live["periodSeconds"] * live["failureThreshold"] <= 60
    assert live["timeoutSeconds"] < live["periodSeconds"]
    # a blocked loop cannot act on SIGTERM: no long grace after a failed probe
    assert live["terminationGracePeriodSeconds"] <= 30


# -- the scrape credential, and what takes none -------------------------------------------------

METRICS_TOKEN_FILE = "ACTIVITY_CORE_METRICS_TOKEN_FILE"


def _mount_of(container: Obj, path: str) -> Obj:
    (mount,) = [
        m
        for m in container.get("volumeMounts", [])
        if path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert isinstance(mount, dict)
    return mount


def test_the_api_requires_the_token_its_service_monitor_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (service_monitor,) = _of_kind("ServiceMonitor")
    (endpoint,) = service_monitor["spec"]["endpoints"]
    authorization = endpoint["authorization"]
    assert authorization["type"] == "Bearer"
    secret_name, key = authorization["credentials"]["name"], authorization["credentials"]["key"]

    deployment = _one("Deployment", "activity-core")
    pod = deployment["spec"]["template"]["spec"]
    container = _container("Deployment", "activity-core")
    path = _env(container, METRICS_TOKEN_FILE)
    mount = _mount_of(container, path)
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    # the same Secret and key, one file of it, readable by the container's group only
    assert secret["secretName"] == secret_name
    file_name = path.removeprefix(mount["mountPath"].rstrip("/") + "/")
    assert secret["items"] == [{"key": key, "path": file_name}]
    assert secret["defaultMode"] in (0o400, 0o440)
    group = container["securityContext"]["runAsGroup"]
    assert pod["securityContext"]["fsGroup"] == group
    # only the API reads it: not its migrate init container, not the Temporal worker
    for init in pod.get("initContainers", []):
        assert all(e["name"] != METRICS_TOKEN_FILE for e in init.get("env", []))
    worker = _container("Deployment", "activity-core-temporal-worker")
    assert all(e["name"] != METRICS_TOKEN_FILE for e in worker.get("env", []))
    # without the component the API needs no such Secret: the base does not mount it
    base = yaml.safe_load(
        (REPO / "deploy" / "k8s" / "base" / "activity-core-deployment.yaml").read_text()
    )["spec"]["template"]["spec"]
    assert all(v.get("secret", {}).get("secretName") != secret_name for v in base["volumes"])
    assert all(
        e["name"] != METRICS_TOKEN_FILE for c in base["containers"] for e in c.get("env", [])
    )

    # the file as the kubelet projects it, read by the service's own settings loader
    assert METRICS_TOKEN_FILE.removesuffix("_FILE") in SECRET_VARIABLES
    token = "scrape-token-0123456789abcdef"
    projected = tmp_path / path.lstrip("/")
    projected.parent.mkdir(parents=True)
    projected.write_text(token + "\n", encoding="utf-8")
    for name in [n for n in os.environ if n.startswith("ACTIVITY_CORE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(METRICS_TOKEN_FILE, str(projected))
    assert load_settings().metrics_token == token


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    if not _matches(selector.get("matchLabels", {}), labels):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def _ingress_rules(labels: dict[str, str]) -> list[Obj]:
    return [
        rule
        for policy in _of_kind("NetworkPolicy")
        if "Ingress" in policy["spec"]["policyTypes"]
        and _selects(policy["spec"]["podSelector"], labels)
        for rule in policy["spec"].get("ingress", [])
    ]


@pytest.mark.parametrize(
    ("kind", "name"),
    [("StatefulSet", "rein-aharness"), ("Deployment", "activity-core-temporal-worker")],
)
def test_metrics_that_take_no_token_are_open_to_prometheus_only(kind: str, name: str) -> None:
    template = _one(kind, name)["spec"]["template"]
    (container,) = template["spec"]["containers"]
    metrics, liveness = _named_port(container, "metrics"), _named_port(container, "liveness")
    assert metrics not in (8080, liveness)
    rules = _ingress_rules(template["metadata"]["labels"])
    assert rules, "no policy admits Prometheus"
    prometheus = [{"namespaceSelector": {"matchLabels": {"ops-queue.io/monitoring": "true"}}}]
    for rule in rules:
        # every rule names its ports: none opens the pod whole
        ports = {p["port"] for p in rule["ports"]}
        assert liveness not in ports and "liveness" not in ports, rule
        if metrics in ports or "metrics" in ports:
            assert rule["from"] == prometheus, rule
