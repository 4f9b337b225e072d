"""The extender's own HTTP server (runextender): keep-alive HTTP/1.1, the same JSON as the web
routes, clear errors, /healthz."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube import extender
from kube.server import make_server
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.dashboard.servers import free_port
from tests.kube import objects
from tests.kube.helpers import framework, scheduler
from tests.test_observability import running, scrape_until, value
from tests.test_process_probes import probe, wait_for_probe

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def port(fake: SimulatedKubernetes) -> Iterator[int]:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    fake.add_pod(objects.pod("busy", gpus=6, scheduler="default-scheduler", node_name="gpu-a"))
    scheduler(fake, lease=False).run_once()
    extender.install(extender.Extender(framework()))
    server = make_server("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    extender.install(None)


def call(connection: http.client.HTTPConnection, path: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request("POST", path, data, {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def test_filter_and_prioritize_over_one_keep_alive_connection(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    pod = objects.pod("p", gpus=4, scheduler="default-scheduler")
    args = {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-a", "gpu-b"]}
    status, reply = call(connection, "/extender/filter", args)
    assert status == 200 and reply["NodeNames"] == ["gpu-b"] and reply["Error"] == ""
    assert reply["FailedNodes"] == {"gpu-a": "Insufficient nvidia.com/gpu"}
    status, reply = call(connection, "/extender/prioritize", {**args, "NodeNames": ["gpu-b"]})
    assert status == 200 and reply == [{"Host": "gpu-b", "Score": 10}]
    status, reply = call(connection, "/extender/filter", b"{broken")
    assert status == 200 and reply["Error"].startswith("request body is not JSON")
    status, reply = call(connection, "/extender/prioritize", {"Pod": pod})
    assert status == 400 and reply["Error"] == "ExtenderArgs needs Nodes or NodeNames"
    status, reply = call(connection, "/extender/bind", {"PodName": "p"})
    assert status == 200 and "needs PodNamespace" in reply["Error"]
    status, reply = call(connection, "/extender/preempt", {})
    assert status == 404
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    assert response.status == 200 and json.loads(response.read()) == {"status": "ok"}
    connection.close()


def test_runextender_serves_metrics_of_the_calls_it_answers(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    argv = ["runextender", "--host", "127.0.0.1", "--port", str(port)]
    # The port from the environment: what a manifest may set instead of the flag.
    env = {"GPUSCHED_METRICS_PORT": str(metrics_port)}
    with running(argv, log=tmp_path / "extender.log", env=env):
        wait_for_probe(metrics_port, "/readyz", 200, state=f"serving on port {port}")
        assert probe(metrics_port, "/healthz") == (200, {"status": "ok"})
        pod = objects.pod("p", gpus=1, scheduler="default-scheduler")
        calls = [
            ("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-x"]}),  # unknown node
            ("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-x"]}),
            ("prioritize", {"Pod": pod}),  # no node list: a 400
        ]
        for verb, args in calls:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/extender/{verb}",
                data=json.dumps(args).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                urllib.request.urlopen(request, timeout=10).read()
            except urllib.error.HTTPError as exc:
                assert exc.code == 400
        series = scrape_until(
            f"http://127.0.0.1:{metrics_port}/metrics",
            lambda s: (
                value(s, "gpusched_extender_requests_total", verb="prioritize", outcome="error")
                == 1
            ),
        )
    assert value(series, "gpusched_extender_requests_total", verb="filter", outcome="ok") == 2
    assert value(series, "gpusched_extender_requests_total", verb="bind", outcome="ok") == 0
    assert value(series, "gpusched_extender_request_duration_seconds_count", verb="filter") == 2
