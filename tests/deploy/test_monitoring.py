"""deploy/monitoring/, deploy/prometheus/ and deploy/grafana/: the Prometheus Operator's objects
(ServiceMonitor and PrometheusRule are custom resources, outside kubernetes-validate's core
schemas: they are checked here against the fields the operator reads and against the Services
and containers of deploy/), the alert rules with `promtool check rules` and `promtool test rules`
(Debian's prometheus package), the plain scrape config with `promtool check config`, the Grafana
dashboard as Grafana's own dashboard model (grafana-foundation-sdk), and every metric name a rule
or a panel queries against the names the processes' real registries expose."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import prometheus as prometheus_model
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from gpusched import web_metrics
from kube import metrics as extender_metrics
from scheduling.worker import metrics as scheduler_metrics
from telemetry import metrics as telemetry_metrics
from tests.kube.helpers import DEPLOY
from tests.support.binaries import installed

ROOT = DEPLOY.parent
MONITORING = DEPLOY / "monitoring"
DASHBOARD = DEPLOY / "grafana" / "gpusched.json"
SCRAPE_CONFIGS = DEPLOY / "prometheus" / "scrape-configs.yml"
JOBS = {"gpusched-web", "gpusched-scheduler", "gpusched-ingester", "gpusched-extender"}
PROMETHEUS_BUILTINS = {"up"}  # what Prometheus itself adds to every scrape


def manifests(folder: Path) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(folder.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") != "Kustomization"
    ]


def of_kind(kind: str, folder: Path = DEPLOY) -> list[dict[str, Any]]:
    return [doc for doc in manifests(folder) if doc["kind"] == kind]


def rules_spec() -> dict[str, Any]:
    (rule,) = of_kind("PrometheusRule", MONITORING)
    spec: dict[str, Any] = rule["spec"]
    return spec


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in rules_spec()["groups"] for rule in group["rules"]}


@pytest.fixture(scope="module")
def promtool() -> str:
    return installed("promtool", package="prometheus")


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)


# --- ServiceMonitors ----------------------------------------------------------------------------


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_one_service_monitor_per_role_scrapes_a_port_that_serves_metrics() -> None:
    services = of_kind("Service")
    deployments = of_kind("Deployment")
    jobs = set()
    for monitor in of_kind("ServiceMonitor", MONITORING):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        spec = monitor["spec"]
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
        (service,) = [
            s
            for s in services
            if matches(spec["selector"]["matchLabels"], s["metadata"]["labels"])
            and s["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
        ]
        jobs.add(service["metadata"]["name"])  # the operator's job label without jobLabel
        assert "jobLabel" not in spec
        (endpoint,) = spec["endpoints"]
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "authorization"}
        assert endpoint["path"] == "/metrics" and re.fullmatch(r"\d+s", endpoint["interval"])
        (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        # The Service's target port is a named container port of the pods it selects...
        (pods,) = [
            d["spec"]["template"]
            for d in deployments
            if matches(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        (container,) = [
            c
            for c in pods["spec"]["containers"]
            if any(p["name"] == port["targetPort"] for p in c.get("ports", []))
        ]
        (container_port,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
        number = str(container_port["containerPort"])
        # ...on which the container serves its metrics: the web's own port, a worker's
        # --metrics-port (on every address, or Prometheus could not reach it).
        command = container["command"]
        if "runweb" in command:
            assert command[command.index("--port") + 1] == number
            # /metrics names tenants: the operator presents the token the web is given (the
            # Endpoint's SafeAuthorization: a Secret key in the ServiceMonitor's namespace).
            (token,) = [e for e in container["env"] if e["name"] == "GPUSCHED_METRICS_TOKEN"]
            assert endpoint["authorization"] == {
                "type": "Bearer",
                "credentials": token["valueFrom"]["secretKeyRef"],
            }
        else:
            assert command[command.index("--metrics-port") + 1] == number
            assert command[command.index("--metrics-host") + 1] == "0.0.0.0"
    assert jobs == JOBS


def test_every_role_container_is_probed() -> None:
    for deployment in of_kind("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container.get("livenessProbe"), container["name"]
            assert container.get("readinessProbe"), container["name"]
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if probe in container:
                    path = container[probe]["httpGet"]["path"]
                    assert path in ("/healthz", "/readyz"), (container["name"], probe)


def test_migrations_run_as_a_job_not_in_every_web_replica() -> None:
    for deployment in of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert "initContainers" not in pod, deployment["metadata"]["name"]
        for container in pod["containers"]:
            assert "migrate" not in container["command"]
    (job,) = of_kind("Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    (web,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "gpusched-web"]
    assert container["image"] == web["spec"]["template"]["spec"]["containers"][0]["image"]


# --- the alert rules ----------------------------------------------------------------------------


def test_the_prometheus_rule_is_shaped_as_the_operator_reads_it() -> None:
    (rule,) = of_kind("PrometheusRule", MONITORING)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for alert in group["rules"]:
            assert set(alert) == {"alert", "expr", "for", "labels", "annotations"}
            assert alert["labels"]["severity"] in ("critical", "warning")
            assert set(alert["annotations"]) == {"summary", "description"}
    assert {
        "GpuschedSchedulerDown",
        "GpuschedSchedulerNotLeading",
        "GpuschedNoBindsWhilePodsWait",
        "GpuschedOutboxLag",
        "GpuschedTelemetryStale",
        "GpuschedPodsPendingTooLong",
        "GpuschedNodesQuarantined",
    } <= set(alerts())


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    """The rule file a plain Prometheus loads: the PrometheusRule's spec as it is."""
    path = tmp_path / "gpusched-rules.yml"
    path.write_text(yaml.safe_dump(rules_spec(), sort_keys=False))
    return path


def test_promtool_checks_the_rules(promtool: str, rules_file: Path) -> None:
    result = run([promtool, "check", "rules", str(rules_file)], rules_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def expected(alert: str, summary: str | None = None, **labels: str) -> dict[str, Any]:
    """An alert as promtool expects it: the rule's labels and its annotations, expanded."""
    rule = alerts()[alert]
    annotations = dict(rule["annotations"])
    if summary is not None:
        annotations["summary"] = summary
    assert "{{" not in annotations["description"]
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": annotations}


def case(at: str, alert: str, series: dict[str, str], *firing: dict[str, Any]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series.items()],
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": list(firing)}],
    }


SCHEDULER_A = '{job="gpusched-scheduler", instance="10.0.0.1:9101"}'
SCHEDULER_B = '{job="gpusched-scheduler", instance="10.0.0.2:9101"}'
WEB = '{job="gpusched-web", instance="10.0.1.1:8000"}'


def alert_cases() -> Iterator[dict[str, Any]]:
    down = expected("GpuschedSchedulerDown")
    # Both replicas stop answering at minute 2: pending for 5 minutes, then firing.
    both_down = {f"up{SCHEDULER_A}": "1 1 0x10", f"up{SCHEDULER_B}": "1 1 0x10"}
    yield case("6m", "GpuschedSchedulerDown", both_down)
    yield case("8m", "GpuschedSchedulerDown", both_down, down)
    # One replica still up: nothing to say.
    yield case("8m", "GpuschedSchedulerDown", {**both_down, f"up{SCHEDULER_B}": "1x10"})
    # Never scraped at all (no target): absent from the start.
    yield case("6m", "GpuschedSchedulerDown", {f"up{WEB}": "1x10"}, down)

    # Up, but no replica leads.
    standing_by = {
        f"gpusched_scheduler_leader{SCHEDULER_A}": "1 1 0x10",
        f"gpusched_scheduler_leader{SCHEDULER_B}": "0x12",
    }
    yield case(
        "5m", "GpuschedSchedulerNotLeading", standing_by, expected("GpuschedSchedulerNotLeading")
    )
    taken_over = {**standing_by, f"gpusched_scheduler_leader{SCHEDULER_B}": "0 0 1x10"}
    yield case("5m", "GpuschedSchedulerNotLeading", taken_over)

    # Quarantined nodes count from the leader only: replica B led before and kept its last value.
    quarantine = {
        f"gpusched_scheduler_leader{SCHEDULER_A}": "1x10",
        f"gpusched_nodes_quarantined{SCHEDULER_A}": "2x10",
        f"gpusched_scheduler_leader{SCHEDULER_B}": "0x10",
        f"gpusched_nodes_quarantined{SCHEDULER_B}": "5x10",
    }
    yield case("4m", "GpuschedNodesQuarantined", quarantine)  # still pending
    quarantined = expected("GpuschedNodesQuarantined", summary="2 nodes are quarantined.")
    yield case("6m", "GpuschedNodesQuarantined", quarantine, quarantined)
    healed = {**quarantine, f"gpusched_nodes_quarantined{SCHEDULER_A}": "2 2 0x8"}
    yield case("8m", "GpuschedNodesQuarantined", healed)

    # The leader refuses the cluster's Kueue objects for more than 10 minutes; fixed, it stops.
    refused = {
        f"gpusched_scheduler_leader{SCHEDULER_A}": "1x20",
        f"gpusched_queue_objects_refused{SCHEDULER_A}": "0 1x19",
        f"gpusched_scheduler_leader{SCHEDULER_B}": "0x20",
        f"gpusched_queue_objects_refused{SCHEDULER_B}": "0x20",
    }
    yield case("9m", "GpuschedQueueObjectsRefused", refused)
    summary = "The cluster's Kueue objects are refused; the last good queues stay."
    firing = expected("GpuschedQueueObjectsRefused", summary=summary)
    yield case("12m", "GpuschedQueueObjectsRefused", refused, firing)
    fixed = {**refused, f"gpusched_queue_objects_refused{SCHEDULER_A}": "0 1x10 0x9"}
    yield case("14m", "GpuschedQueueObjectsRefused", fixed)

    # Pods wait, GPUs are free, and the bind counter has not moved for 15 minutes.
    waiting = {
        f'gpusched_pods{{phase="Pending", {WEB[1:]}': "3x30",
        f"gpusched_gpus{WEB}": "8x30",
        f"gpusched_gpus_in_use{WEB}": "4x30",
        f'gpusched_scheduling_attempts_total{{result="scheduled", {SCHEDULER_A[1:]}': "40x30",
    }
    summary = "3 pods wait while GPUs are free, and nothing was bound for 15 minutes."
    stuck = expected("GpuschedNoBindsWhilePodsWait", summary=summary)
    yield case("20m", "GpuschedNoBindsWhilePodsWait", waiting, stuck)
    binding = f'gpusched_scheduling_attempts_total{{result="scheduled", {SCHEDULER_A[1:]}'
    yield case("20m", "GpuschedNoBindsWhilePodsWait", {**waiting, binding: "40+1x30"})
    full = {**waiting, f"gpusched_gpus_in_use{WEB}": "8x30"}  # a full cluster: pods just wait
    yield case("20m", "GpuschedNoBindsWhilePodsWait", full)

    # The ingester's last success stays at t=60 s: stale past 360 s, firing 5 minutes later.
    stale = {
        'gpusched_telemetry_last_success_timestamp_seconds{job="gpusched-ingester", '
        'instance="10.0.2.1:9102"}': "60x20"
    }
    yield case("10m", "GpuschedTelemetryStale", stale)
    yield case(
        "13m",
        "GpuschedTelemetryStale",
        stale,
        expected("GpuschedTelemetryStale", summary="No DCGM telemetry stored for 12m 0s."),
    )


def test_promtool_unit_tests_of_the_alerts(promtool: str, rules_file: Path, tmp_path: Path) -> None:
    tests = {
        "rule_files": [rules_file.name],
        "evaluation_interval": "1m",
        "tests": list(alert_cases()),
    }
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run([promtool, "test", "rules", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- the plain Prometheus scrape config ---------------------------------------------------------


def test_the_plain_scrape_config_keeps_each_roles_metrics_port(
    promtool: str, rules_file: Path, tmp_path: Path
) -> None:
    config = yaml.safe_load(SCRAPE_CONFIGS.read_text())
    (job,) = config["scrape_configs"]
    keep, to_job, _pod = job["relabel_configs"]
    assert keep["action"] == "keep" and to_job["target_label"] == "job"
    # What its discovery sees: every (Service, port name) of deploy/.
    ports = {
        (service["metadata"]["name"], port["name"])
        for service in of_kind("Service")
        for port in service["spec"]["ports"]
    }
    kept = {pair for pair in ports if re.fullmatch(keep["regex"], ";".join(pair))}
    assert job["authorization"]["type"] == "Bearer"  # the web's metrics token, from a file
    assert kept == {
        ("gpusched-web", "http"),
        ("gpusched-scheduler", "metrics"),
        ("gpusched-ingester", "metrics"),
        ("gpusched-extender", "metrics"),
    }
    assert {service for service, _ in kept} == JOBS
    # Debian's Prometheus is built without Kubernetes discovery: promtool checks the rest of the
    # file (relabelling, rule files) with static targets in its place.
    job.pop("kubernetes_sd_configs")
    job["static_configs"] = [{"targets": ["127.0.0.1:9101"]}]
    # promtool checks that the token file exists: the Secret is mounted only in the cluster.
    token_file = tmp_path / "token"
    token_file.write_text("test-metrics-token")
    job["authorization"]["credentials_file"] = str(token_file)
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(config))
    assert config["rule_files"] == [rules_file.name]  # saved beside it (docs/operations.md)
    result = run([promtool, "check", "config", str(checked)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_scrapes_under_the_same_job_names() -> None:
    config = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    gpusched_jobs = {job["job_name"] for job in config["scrape_configs"]} - {"nvidia-dcgm-exporter"}
    assert gpusched_jobs <= JOBS and "gpusched-web" in gpusched_jobs


# --- the Grafana dashboard ----------------------------------------------------------------------


def dashboard() -> tuple[dict[str, Any], Dashboard]:
    raw = json.loads(DASHBOARD.read_text())
    register_default_plugins()
    return raw, Dashboard.from_json(raw)


def dropped(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where `ours` has something `theirs` lacks or differs: keys the model does not know."""
    if isinstance(ours, dict):
        return [
            problem
            for key, value in ours.items()
            for problem in (
                dropped(value, theirs[key], f"{path}/{key}")
                if isinstance(theirs, dict) and key in theirs
                else [f"{path}/{key}"]
            )
        ]
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(theirs) != len(ours):
            return [path]
        return [p for i, item in enumerate(ours) for p in dropped(item, theirs[i], f"{path}[{i}]")]
    return [] if ours == theirs else [path]


def panel_queries() -> list[str]:
    _, model = dashboard()
    exprs = []
    for panel in model.panels or []:
        if isinstance(panel, Panel):
            for target in panel.targets or []:
                assert isinstance(target, prometheus_model.Dataquery)
                exprs.append(target.expr)
    return exprs


def test_the_dashboard_loads_as_grafanas_dashboard_model() -> None:
    raw, model = dashboard()
    assert model.uid == "gpusched" and model.title == "gpusched"
    # Everything in the file survives the model's round trip: no key the model does not know.
    assert dropped(raw, json.loads(json.dumps(model, cls=JSONEncoder))) == []
    (variable,) = raw["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    panels = [p for p in model.panels or [] if isinstance(p, Panel)]
    assert len(panels) >= 20
    assert {p.title for p in model.panels or [] if isinstance(p, RowPanel)} == {
        "Scheduler",
        "Telemetry",
        "Web and extender",
    }
    for panel in panels:
        assert panel.targets and panel.title and panel.description, panel.title
        assert panel.datasource is not None and panel.datasource.uid == "${datasource}"
        assert all(isinstance(t, prometheus_model.Dataquery) and t.expr for t in panel.targets)
    # Laid out on Grafana's 24-column grid without overlaps.
    cells: set[tuple[int, int]] = set()
    for placed in model.panels or []:
        assert placed.grid_pos is not None
        grid = placed.grid_pos
        assert grid.x + grid.w <= 24
        area = {
            (x, y) for x in range(grid.x, grid.x + grid.w) for y in range(grid.y, grid.y + grid.h)
        }
        assert not area & cells, placed.title
        cells |= area
    titles = " ".join(p.title or "" for p in panels).lower()
    for topic in (
        "scheduling rate",
        "latency",
        "pending",
        "binds",
        "conflicts",
        "preemption",
        "telemetry freshness",
        "outbox lag",
        "web latency",
    ):
        assert topic in titles, topic


def test_promtool_parses_every_panel_query(promtool: str, tmp_path: Path) -> None:
    # Grafana's $__rate_interval becomes a range Prometheus knows; each query a recording rule.
    rules = [
        {"record": f"gpusched:panel_{n}", "expr": expr.replace("$__rate_interval", "1m")}
        for n, expr in enumerate(panel_queries())
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = run([promtool, "check", "rules", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# --- metric names -------------------------------------------------------------------------------

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (what promtool already parsed as valid):
    identifiers outside strings, label matchers, ranges and grouping clauses that are not
    followed by a parenthesis (functions, aggregations) nor keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    return {
        match.group()
        for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", text)
        if match.group() not in _KEYWORDS and not text[match.end() :].lstrip().startswith("(")
    }


def exposed(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry's families expose, whether or not a sample exists yet."""
    names = set()
    family: Metric
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def test_metric_names_are_found_in_sample_expressions() -> None:
    assert metric_names(
        'histogram_quantile(0.95, sum by (le, phase) (rate(a_bucket{x="y(z)"}[$__rate_interval])))'
        " and on(job) b == 1 or vector(0) + time() - c offset 5m"
    ) == {"a_bucket", "b", "c"}


@pytest.mark.django_db
def test_every_metric_a_rule_or_a_panel_queries_is_exposed_by_a_process() -> None:
    # The registries the roles serve, read as a scrape would (the web's cluster collector reads
    # the test database).
    names = PROMETHEUS_BUILTINS.union(
        *(
            exposed(registry)
            for registry in (
                web_metrics.registry,
                scheduler_metrics.registry,
                telemetry_metrics.registry,
                extender_metrics.registry,
            )
        )
    )
    queries = [rule["expr"] for rule in alerts().values()] + panel_queries()
    queried = set().union(*(metric_names(q) for q in queries))
    assert queried - names == set()
    # Each of gpusched's own families is queried somewhere or deliberately left to ad-hoc use.
    assert len(queried) >= 30
