"""The extender's own HTTP server (runextender): keep-alive HTTP/1.1, the same JSON as the web
routes, clear errors, /healthz."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kube import extender
from kube.server import make_server
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import framework, scheduler

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
