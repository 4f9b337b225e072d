"""The Cluster page's topology domains (dashboard/selectors/cluster.py): nodes carrying a
Topology's levels are grouped block > rack with their free GPUs, counted as the page's totals
count them; without a Topology whose labels the nodes carry, the page stays flat. A decision names
its node's domain."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from dashboard.selectors import cluster as cluster_docs
from dashboard.selectors import placements as placement_docs
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.core.types import SharingMode
from scheduling.models import Gpu, Node, PlacementDecision
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from tests.scheduling import factories

pytestmark = pytest.mark.django_db

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
TOPOLOGY = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata: {{name: default}}
spec:
  levels: [{{nodeLabel: {BLOCK}}}, {{nodeLabel: {RACK}}}, {{nodeLabel: kubernetes.io/hostname}}]
"""
# (block, rack) per node; None: a node without the labels.
PLACES = [("b1", "b1-r1"), ("b1", "b1-r1"), ("b1", "b1-r2"), ("b2", "b2-r1"), None]


def labelled_cluster() -> list[str]:
    names = []
    for k, (spec, place) in enumerate(
        zip(build_nodes(synthetic_pools(len(PLACES), "dgx-h100")), PLACES, strict=True)
    ):
        labels = dict(spec.labels)
        if place is not None:
            labels |= {BLOCK: place[0], RACK: place[1]}
        spec = replace(spec, name=f"n{k}", labels=labels)
        services.node_register(spec=spec, source=Node.Source.SIMULATOR)
        names.append(spec.name)
    return names


def apply_topology() -> None:
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(TOPOLOGY))))


def free_in_db(names: list[str]) -> int:
    """Whole free GPUs on the named schedulable nodes, read straight from the rows."""
    rows = Gpu.objects.filter(node__name__in=names, node__cordoned=False, used_milli=0)
    return rows.exclude(sharing=SharingMode.MIG).count()


def test_free_gpus_per_domain_are_the_nodes_free_gpus_as_the_totals_count_them() -> None:
    names = labelled_cluster()
    apply_topology()
    owner = factories.tenant()
    factories.workload(owner, "four", gpus=4)
    factories.workload(owner, "eight", gpus=8)
    database_cycle(Framework(load_profile("topology")), identity="domains").run_once()
    services.node_set_cordoned(node=Node.objects.get(name="n2"), cordoned=True)

    assert cluster_docs.topology_levels() == [BLOCK, RACK]
    docs = cluster_docs.cluster_nodes()
    assert docs.nodes["n0"]["domain"] == ["b1", "b1-r1"] and docs.nodes["n4"]["domain"] is None
    domains = cluster_docs.domain_free_gpus(docs.nodes)
    assert set(domains) == {"b1", "b1/b1-r1", "b1/b1-r2", "b2", "b2/b2-r1"}
    members = {
        key: [
            n
            for n, place in zip(names, PLACES, strict=True)
            if place and key in (place[0], f"{place[0]}/{place[1]}")
        ]
        for key in domains
    }
    for key, doc in domains.items():
        assert doc["free"] == free_in_db(members[key]), key
        assert (doc["nodes"], doc["gpus"]) == (len(members[key]), 8 * len(members[key]))
    assert domains["b1"]["depth"] == 0 and domains["b1/b1-r1"]["depth"] == 1
    assert domains["b1/b1-r2"]["free"] == 0  # cordoned: not counted free, as in the totals
    # The blocks and the nodes outside the topology add up to the page's "Free GPUs".
    outside = free_in_db(["n4"])
    summary = cluster_docs.cluster_summary(docs.nodes)
    assert domains["b1"]["free"] + domains["b2"]["free"] + outside == summary["free"]
    assert summary["free"] == 5 * 8 - 12 - 8  # 12 held, n2's 8 cordoned


def test_without_a_topology_the_nodes_carry_the_page_stays_flat() -> None:
    labelled_cluster()
    assert cluster_docs.topology_levels() == []  # no Topology yet
    services.queues_apply(
        config=parse_documents(
            list(yaml.safe_load_all(TOPOLOGY.replace(BLOCK, "example.com/pod-of-racks")))
        )
    )
    assert cluster_docs.topology_levels() == []  # nobody carries its block label
    docs = cluster_docs.cluster_nodes()
    assert all(doc["domain"] is None for doc in docs.nodes.values())
    assert cluster_docs.domain_free_gpus(docs.nodes) == {}


def test_a_placement_names_its_domain() -> None:
    labelled_cluster()
    apply_topology()
    factories.workload(factories.tenant(), "one", gpus=8)
    database_cycle(Framework(load_profile("topology")), identity="domains").run_once()
    decision = PlacementDecision.objects.exclude(node="").get()
    detail = placement_docs.decision_detail(decision.pk)
    assert detail is not None
    place = PLACES[int(decision.node.removeprefix("n"))]
    assert detail["domain"] == ([["block", place[0]], ["rack", place[1]]] if place else None)
