"""The extender's own server (runextender) over real TLS: kube-scheduler's client certificate (or
a bearer token) admits a caller, nobody else gets anything; keep-alive HTTP/1.1, the same JSON as
the web routes, clear errors, /healthz. Certificates are made per test (tests/kube/tls.py)."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from kube import extender
from kube.api import KubeApi
from kube.extender_auth import ExtenderAuth, server_context
from kube.server import make_server
from scheduling.models import Allocation
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.common.test_process_probes import probe, wait_for_probe
from tests.dashboard.servers import free_port
from tests.kube import objects
from tests.kube.helpers import framework, scheduler
from tests.kube.tls import Authority, Issued
from tests.test_observability import running, scrape_until, value

pytestmark = pytest.mark.django_db(transaction=True)

SCHEDULER_NAME = "system:kube-scheduler"
TOKEN = "a-long-random-extender-token"


@dataclass
class Pki:
    ca: Authority
    server: Issued
    scheduler: Issued  # kube-scheduler's client certificate
    stranger: Issued  # signed by the same CA, another name
    rogue: Issued  # kube-scheduler's name, another CA
    token_file: str


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = Authority("cluster-ca", tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return Pki(
        ca=ca,
        server=ca.issue("gpusched-extender", server=True),
        scheduler=ca.issue(SCHEDULER_NAME),
        stranger=ca.issue("system:node:gpu-a"),
        rogue=Authority("rogue-ca", tmp_path).issue(SCHEDULER_NAME),
        token_file=str(token_file),
    )


@pytest.fixture
def port(fake: SimulatedKubernetes, pki: Pki) -> Iterator[int]:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    fake.add_pod(objects.pod("busy", gpus=6, scheduler="default-scheduler", node_name="gpu-a"))
    fake.add_pod(objects.pod("serve-0", gpus=2, scheduler="default-scheduler"))
    scheduler(fake, lease=False).run_once()
    api = KubeApi(fake.api_client(), reporting_instance="extender-0")
    extender.install(extender.Extender(framework(), api=api))
    auth = ExtenderAuth.build(
        token_file=pki.token_file, client_ca=pki.ca.cert, client_names=[SCHEDULER_NAME]
    )
    tls = server_context(cert=pki.server.cert, key=pki.server.key, client_ca=pki.ca.cert)
    server = make_server("127.0.0.1", 0, auth=auth, tls=tls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    extender.install(None)


def connect(port: int, pki: Pki, client: Issued | None) -> http.client.HTTPSConnection:
    """What kube-scheduler's tlsConfig makes: the server verified with caData, and certData /
    keyData as the client certificate."""
    context = ssl.create_default_context(cafile=pki.ca.cert)
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)


def call(
    connection: http.client.HTTPConnection, path: str, body: Any, **headers: str
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request("POST", path, data, {"Content-Type": "application/json", **headers})
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def bind_args(fake: SimulatedKubernetes) -> dict[str, str]:
    uid = fake.pod("ml-team", "serve-0")["metadata"]["uid"]
    return {"PodName": "serve-0", "PodNamespace": "ml-team", "PodUID": uid, "Node": "gpu-b"}


def test_kube_schedulers_certificate_over_one_keep_alive_connection(
    port: int, pki: Pki, fake: SimulatedKubernetes
) -> None:
    connection = connect(port, pki, pki.scheduler)
    pod = objects.pod("p", gpus=4, scheduler="default-scheduler")
    args = {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-a", "gpu-b"]}
    status, reply = call(connection, "/extender/filter", args)
    assert status == 200 and reply["NodeNames"] == ["gpu-b"] and reply["Error"] == ""
    assert reply["FailedNodes"] == {"gpu-a": "Insufficient nvidia.com/gpu"}
    status, reply = call(connection, "/extender/prioritize", {**args, "NodeNames": ["gpu-b"]})
    assert status == 200 and reply == [{"Host": "gpu-b", "Score": 10}]
    status, reply = call(connection, "/extender/filter", b"{broken")
    assert status == 200 and reply["Error"].startswith("request body is not JSON")
    status, reply = call(connection, "/extender/filter", b"[" * 10_000 + b"]" * 10_000)
    assert status == 200 and "deeper than 64 levels" in reply["Error"]
    status, reply = call(connection, "/extender/prioritize", {"Pod": pod})
    assert status == 400 and reply["Error"] == "ExtenderArgs needs Nodes or NodeNames"
    status, reply = call(connection, "/extender/bind", {"PodName": "p"})
    assert status == 200 and "needs PodNamespace" in reply["Error"]
    status, reply = call(connection, "/extender/preempt", {})
    assert status == 404
    status, reply = call(connection, "/extender/bind", bind_args(fake))
    assert status == 200 and reply == {"Error": ""}
    assert fake.pod("ml-team", "serve-0")["spec"]["nodeName"] == "gpu-b"
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    assert response.status == 200 and json.loads(response.read()) == {"status": "ok"}
    connection.close()


def test_a_bearer_token_admits_a_caller_without_a_certificate(port: int, pki: Pki) -> None:
    connection = connect(port, pki, None)
    args = {"Pod": objects.pod("p", gpus=1), "NodeNames": ["gpu-b"]}
    status, reply = call(connection, "/extender/filter", args, Authorization=f"Bearer {TOKEN}")
    assert status == 200 and reply["NodeNames"] == ["gpu-b"]
    connection.close()


@pytest.mark.parametrize("who", ["nobody", "stranger", "wrong token"])
def test_callers_without_credentials_get_nothing_and_bind_nothing(
    port: int, pki: Pki, fake: SimulatedKubernetes, who: str
) -> None:
    client = pki.stranger if who == "stranger" else None
    headers = {"Authorization": "Bearer guess"} if who == "wrong token" else {}
    held = Allocation.objects.filter(active=True).count()
    for verb in ("filter", "prioritize", "bind"):
        connection = connect(port, pki, client)
        status, reply = call(connection, f"/extender/{verb}", bind_args(fake), **headers)
        assert status == 401 and reply["Error"]
        connection.close()
    assert fake.bindings == [] and Allocation.objects.filter(active=True).count() == held


def test_certificates_of_another_ca_and_plain_http_are_refused_at_the_connection(
    port: int, pki: Pki, fake: SimulatedKubernetes
) -> None:
    connection = connect(port, pki, pki.rogue)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(connection, "/extender/bind", bind_args(fake))
    connection.close()
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        call(plain, "/extender/bind", bind_args(fake), Authorization=f"Bearer {TOKEN}")
    plain.close()
    assert fake.bindings == []


def test_runextender_refuses_to_start_without_tls_credentials_or_a_good_profile(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CommandError, match="TLS only"):
        call_command("runextender", "--port", "0", "--token-file", pki.token_file)
    tls = ["--tls-cert", pki.server.cert, "--tls-key", pki.server.key]
    with pytest.raises(CommandError, match="admits no caller"):
        call_command("runextender", "--port", "0", *tls)
    profile = tmp_path / "profile.yaml"
    profile.write_text("profiles:\n- schedulerName: x\n  plugins: {score: {enable: []}}\n")
    monkeypatch.setenv("GPUSCHED_PROFILE", str(profile))
    extender.install(None)
    with pytest.raises(CommandError, match="unknown key 'enable'"):
        call_command("runextender", "--port", "0", *tls, "--token-file", pki.token_file)
    extender.install(None)


def test_runextender_serves_metrics_of_the_calls_it_answers_and_refuses(
    tmp_path: Path, pki: Pki
) -> None:
    port, metrics_port = free_port(), free_port()
    argv = ["runextender", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--tls-cert", pki.server.cert, "--tls-key", pki.server.key]
    argv += ["--token-file", pki.token_file]
    # The port from the environment: what a manifest may set instead of the flag.
    env = {"GPUSCHED_METRICS_PORT": str(metrics_port)}
    context = ssl.create_default_context(cafile=pki.ca.cert)
    with running(argv, log=tmp_path / "extender.log", env=env):
        wait_for_probe(metrics_port, "/readyz", 200, state=f"serving on port {port}")
        assert probe(metrics_port, "/healthz") == (200, {"status": "ok"})
        pod = objects.pod("p", gpus=1, scheduler="default-scheduler")
        calls = [
            ("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-x"]}, TOKEN),
            ("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-x"]}, TOKEN),
            ("prioritize", {"Pod": pod}, TOKEN),  # no node list: a 400
            ("bind", {"PodName": "p"}, "a guess"),  # refused: a 401
        ]
        for verb, args, token in calls:
            request = urllib.request.Request(
                f"https://127.0.0.1:{port}/extender/{verb}",
                data=json.dumps(args).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            try:
                urllib.request.urlopen(request, timeout=10, context=context).read()
            except urllib.error.HTTPError as exc:
                assert exc.code == (401 if verb == "bind" else 400)
        series = scrape_until(
            f"http://127.0.0.1:{metrics_port}/metrics",
            lambda s: (
                value(s, "gpusched_extender_requests_total", verb="prioritize", outcome="error")
                == 1
            ),
        )
    assert value(series, "gpusched_extender_requests_total", verb="filter", outcome="ok") == 2
    assert value(series, "gpusched_extender_requests_total", verb="bind", outcome="ok") == 0
    assert value(series, "gpusched_extender_refused_total") == 1
    assert value(series, "gpusched_extender_request_duration_seconds_count", verb="filter") == 2
