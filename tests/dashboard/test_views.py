"""The dashboard's HTTP side: who sees the pages, the decision explanation, sign in and out; and
the page data that is more than a query (the stranded-GPU count)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.live import view_for
from dashboard.selectors import cluster as cluster_docs
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import NodeSpec, Resources, SharingMode, Taint, TopologyPolicy
from scheduling.models import Allocation, Node, PlacementDecision, Pod
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from telemetry.models import GpuMinute, PodMinute
from telemetry.services import source_status_record
from tests.dashboard.conftest import make_admin
from tests.scheduling import factories

pytestmark = pytest.mark.django_db

PAGES = ["/", "/placements/", "/queues/", "/tenants/"]


def schedule() -> None:
    database_cycle(Framework(load_profile("topology")), identity="views").run_once()


def signed_in(*, staff: bool = True) -> Client:
    client = Client()
    client.force_login(make_admin("someone", staff=staff))
    return client


def test_signed_out_visitors_are_sent_to_sign_in() -> None:
    for page in [*PAGES, "/decisions/1.json"]:
        response = Client().get(page)
        assert response.status_code == 302, page
        assert response["Location"].startswith("/login/?next="), page


def test_users_who_are_not_admins_are_refused() -> None:
    client = signed_in(staff=False)
    for page in PAGES:
        assert client.get(page).status_code == 403, page


def test_admins_see_every_page_with_its_socket() -> None:
    (node,) = factories.nodes(1)
    client = signed_in()
    for page, socket in [
        ("/", "ws/live/cluster/"),
        ("/placements/", "ws/live/placements/"),
        ("/queues/", "ws/live/queues/"),
        ("/tenants/", "ws/live/tenants/"),
        (f"/nodes/{node.name}/", f"ws/live/nodes/{node.name}/"),
    ]:
        response = client.get(page)
        assert response.status_code == 200, page
        assert f'data-socket="{socket}"'.encode() in response.content, page
    assert client.get("/nodes/no-such-node/").status_code == 404


def test_the_tenants_view_shows_over_request_and_advice() -> None:
    assert b"Over-request, last hour" in signed_in().get("/tenants/").content
    assert view_for("tenants").sample()["window"]["all"]["minutes"] == 0  # collecting data
    factories.nodes(1)
    factories.workload(factories.tenant("nlp"), "big", gpus=8)
    database_cycle(Framework(load_profile("topology"))).run_once()
    Allocation.objects.update(bound_at=timezone.now() - timedelta(hours=1))
    pod = Pod.objects.get()
    now = timezone.now().replace(second=0, microsecond=0)
    for k in range(1, 21):
        GpuMinute.objects.create(
            minute=now - timedelta(minutes=k), node="n", gpu_index=0, samples=4
        )
    PodMinute.objects.bulk_create(
        PodMinute(
            minute=now - timedelta(minutes=k),
            namespace="nlp",
            pod=pod.name,
            samples=4,
            gpus_avg=8,
            used_avg=1.6,
            used_max=1.6,
            used_p95=1.6,
            fb_used_avg=0,
            fb_used_max=0,
        )
        for k in range(1, 21)
    )
    sample = view_for("tenants").sample()
    assert sample["efficiency"]["nlp"]["over_request"] == 5.0  # 8 GPUs held, 1.6 busy at p95
    assert sample["window"]["all"]["minutes"] == 20
    (advice,) = sample["advice"].values()
    assert advice["instead"] == "nvidia.com/gpu: 2"  # 1.6 * 1.2 -> 2 GPUs
    assert advice["saves_total"] == 6


def test_a_decision_comes_with_its_explanation() -> None:
    factories.nodes(2)
    factories.workload(factories.tenant(), "train", gpus=4)
    schedule()
    decision = PlacementDecision.objects.get()
    body = signed_in().get(f"/decisions/{decision.pk}.json").json()
    assert body["outcome"] == "Success"
    assert body["node"] == decision.node
    assert body["explanation"]["chosen"]["node"] == decision.node
    assert {f["plugin"] for f in body["explanation"]["chosen"]["filters"]} >= {"NodeResourcesFit"}
    assert signed_in().get("/decisions/999999.json").status_code == 404


def test_a_decision_shows_its_gpu_set_and_a_failed_one_why_per_node() -> None:
    factories.nodes(2)
    owner = factories.tenant()
    factories.workload(owner, "train", gpus=4, policy=TopologyPolicy.SINGLE_NUMA_NODE)
    factories.workload(owner, "huge", gpus=16)
    schedule()
    bound = PlacementDecision.objects.get(outcome="Success")
    body = signed_in().get(f"/decisions/{bound.pk}.json").json()
    gpu_set = body["gpu_set"]
    assert len(gpu_set["gpus"]) == 4 and len(gpu_set["numa"]) == 1  # one NUMA node, as asked
    assert gpu_set["policy"] == "single-numa-node"
    assert sorted(gpu_set["gpus"]) == sorted(
        Pod.objects.get(workload__name="train")
        .allocations.get()
        .gpus.values_list("gpu__index", flat=True)
    )
    failed = PlacementDecision.objects.exclude(outcome="Success").get()
    why = signed_in().get(f"/decisions/{failed.pk}.json").json()["why"]
    assert why["nodes"] == 2 and why["feasible"] == 0
    assert sum(g["nodes"] for g in why["groups"]) == 2
    assert why["would_fit"].startswith("no node fits even empty")


def test_a_failing_telemetry_source_is_on_the_cluster_view() -> None:
    source_status_record(name="prometheus", error="connection refused")
    source_status_record(name="dcgm", gpus=8)
    sources = view_for("cluster").sample()["sources"]
    assert sources["prometheus"]["ok"] is False
    assert sources["prometheus"]["error"] == "connection refused"
    assert sources["dcgm"]["ok"] is True and sources["dcgm"]["error"] == ""


def test_signing_in_and_out() -> None:
    admin = make_admin("admin")
    admin.set_password("a-long-password-1")
    admin.save()
    client = Client()
    response = client.post("/login/", {"username": "admin", "password": "a-long-password-1"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    assert client.get("/logout/").status_code == 405  # signing out is a POST
    response = client.post("/logout/")
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert client.get("/").status_code == 302


# --- stranded GPUs ----------------------------------------------------------------------------


def summary() -> dict:
    docs = cluster_docs.cluster_nodes()
    return {**cluster_docs.cluster_summary(docs.nodes), **cluster_docs.cluster_stranded()}


def test_free_gpus_no_pending_pod_can_use_are_stranded() -> None:
    factories.nodes(1, "dgx-h100")  # two NUMA nodes of four GPUs
    owner = factories.tenant()
    factories.workload(owner, "numa", gpus=4, policy=TopologyPolicy.SINGLE_NUMA_NODE)
    factories.workload(owner, "one", gpus=1)
    schedule()
    assert summary()["free"] == 3
    assert summary()["stranded"] == 0  # nothing waits: nothing is stranded

    factories.workload(owner, "wants-a-numa-node", gpus=4, policy=TopologyPolicy.SINGLE_NUMA_NODE)
    doc = summary()
    assert (doc["free"], doc["stranded"], doc["stranded_nodes"]) == (3, 3, 1)

    factories.workload(owner, "two", gpus=2)  # fits in the three: they are usable again
    assert summary()["stranded"] == 0


def waiting(name: str, *, gpus: int = 1, cpu_milli: int = 1000, **template: Any) -> None:
    """A workload of one pod with the template's constraints."""
    services.workload_submit(
        tenant=factories.tenant(),
        name=name,
        pod_sets=[
            services.PodSetSpec(
                name="main",
                count=1,
                template=PodTemplate(
                    resources=Resources(cpu_milli=cpu_milli, memory_mib=1024, gpus=gpus),
                    **template,
                ),
            )
        ],
    )


def registered(spec: NodeSpec, **changes: Any) -> None:
    services.node_register(spec=replace(spec, **changes), source=Node.Source.SIMULATOR)


def test_free_gpus_on_a_tainted_node_the_waiting_pods_do_not_tolerate_are_stranded() -> None:
    spec = build_nodes(synthetic_pools(1, "dgx-h100"))[0]
    registered(spec, taints=(Taint("dedicated", "inference"),))
    waiting("no-toleration")
    assert (summary()["free"], summary()["stranded"], summary()["stranded_nodes"]) == (8, 8, 1)

    waiting("tolerates", tolerations=({"key": "dedicated", "operator": "Exists"},))
    assert summary()["stranded"] == 0


def test_free_gpus_on_nodes_no_waiting_pod_selects_are_stranded() -> None:
    a, b = build_nodes(synthetic_pools(2, "dgx-h100"))
    registered(a, labels={**a.labels, "pool": "train"})
    registered(b, labels={**b.labels, "pool": "serve"})
    waiting("train-only", node_selector={"pool": "train"})
    doc = summary()
    assert (doc["free"], doc["stranded"], doc["stranded_nodes"]) == (16, 8, 1)


def test_gpus_in_mig_mode_are_not_free_whole_gpus() -> None:
    spec = build_nodes(synthetic_pools(1, "dgx-a100"))[0]
    # MIG enabled, no instances created yet: nothing can be placed on these GPUs.
    registered(spec, gpus=tuple(replace(g, sharing=SharingMode.MIG) for g in spec.gpus))
    waiting("one-gpu")
    doc = summary()
    assert (doc["mig_gpus"], doc["free"], doc["stranded"]) == (8, 0, 0)


def test_a_numa_node_without_the_cpu_a_single_numa_pod_asks_strands_its_gpus() -> None:
    factories.nodes(1, "dgx-h100")  # two NUMA nodes of four GPUs and 112 cores each
    # 150 cores beside four GPUs: the node has 224 cores, but no NUMA node has 150.
    waiting("wide", gpus=4, cpu_milli=150_000, topology_policy=TopologyPolicy.SINGLE_NUMA_NODE)
    assert (summary()["free"], summary()["stranded"]) == (8, 8)


def test_cordoned_nodes_count_apart() -> None:
    nodes = factories.nodes(2, "dgx-h100")
    services.node_set_cordoned(node=nodes[0], cordoned=True)
    doc = summary()
    assert (doc["cordoned"], doc["free"], doc["cordoned_free"]) == (1, 8, 8)


def test_a_free_gpu_carries_its_last_release_so_an_older_reading_is_not_flagged() -> None:
    """The Node page flags "pods on a free GPU" only from a reading taken after the GPU's last
    release (node.js compares the reading's time with `released`)."""
    factories.nodes(1, "dgx-h100")
    factories.workload(factories.tenant(), "one", gpus=1)
    schedule()
    pod = Pod.objects.get()
    held = next(
        gpu
        for gpu in next(iter(cluster_docs.cluster_nodes().nodes.values()))["gpus"]
        if gpu["holders"]
    )
    assert "released" not in held  # held: no release to compare with
    now = timezone.now()
    services.pods_finish(pods=[pod], now=now)
    node = next(iter(cluster_docs.cluster_nodes().nodes.values()))
    freed = next(gpu for gpu in node["gpus"] if gpu["i"] == held["i"])
    assert not freed["holders"] and freed["released"] == int(now.timestamp())
    assert all("released" not in gpu for gpu in node["gpus"] if gpu["i"] != held["i"])
