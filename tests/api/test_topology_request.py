"""A pod set's topology request through the REST API (Kueue's podSets[].topologyRequest): a level
no Topology has is refused naming the field; on a flavor with a Topology, the database side's
cycle places the whole gang in one rack, or the workload waits saying which rack came closest."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.types import SharingMode
from scheduling.models import Allocation, Node, Pod, Workload
from tests.api.conftest import H100, LLAMA, run_scheduler, submit
from tests.builders import make_node

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
FIELD = "podSets[0].topologyRequest"
TAS_QUEUES = f"""
kind: Topology
apiVersion: kueue.x-k8s.io/v1beta1
metadata: {{name: default}}
spec:
  levels: [{{nodeLabel: {BLOCK}}}, {{nodeLabel: {RACK}}}, {{nodeLabel: kubernetes.io/hostname}}]
---
kind: ResourceFlavor
metadata: {{name: tas}}
spec: {{topologyName: default}}
---
kind: ClusterQueue
metadata: {{name: tas}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: tas
      resources:
      - {{name: cpu, nominalQuota: 1000}}
      - {{name: memory, nominalQuota: 10Ti}}
      - {{name: nvidia.com/gpu, nominalQuota: 1000}}
---
kind: LocalQueue
metadata: {{name: team-a, namespace: team-a}}
spec: {{clusterQueue: tas}}
"""


@pytest.fixture
def racks(db: None) -> None:
    """Rack r1 with 4 DGX H100 nodes, rack r2 with 2, in one block."""
    for rack, count in (("r1", 4), ("r2", 2)):
        for k in range(count):
            spec = (
                make_node(f"{rack}-{k}")
                .topology("dgx-h100", model=H100, sharing=SharingMode.EXCLUSIVE)
                .labels(**{BLOCK: "b1", RACK: rack})
                .build()
            )
            services.node_register(spec=spec, source=Node.Source.SIMULATOR)
    services.queues_apply(config=parse_documents(list(_documents())))


def _documents() -> list[Any]:
    return list(yaml.safe_load_all(TAS_QUEUES))


def gang(pods: int, request: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["name"] = f"train-{pods}"
    pod_set = doc["podSets"][0]
    pod_set.update(count=pods, minCount=pods, topologyRequest=request)
    pod_set["template"]["resources"]["requests"]["nvidia.com/gpu"] = "8"
    del pod_set["template"]["topology"]
    return doc


@pytest.mark.parametrize(
    ("request_doc", "field", "words", "status"),
    [
        ({"required": "example.com/zone"}, FIELD, "no Topology has level 'example.com/zone'", 422),
        ({"required": RACK, "preferred": BLOCK}, FIELD, "must not both be set", 422),
        ({"podSetSliceRequiredTopology": RACK}, FIELD, "go together", 422),
        ({"required": BLOCK, "podSetSliceRequiredTopology": RACK, "podSetSliceSize": 3},
         f"{FIELD}.podSetSliceSize", "whole slices", 422),
        ({"podSetSliceSize": 0}, f"{FIELD}.podSetSliceSize", "greater than or equal to 1", 400),
        ({"rack": RACK}, f"{FIELD}.rack", "", 400),
    ],
)  # fmt: skip
def test_a_bad_topology_request_names_the_field(
    team_a, racks, request_doc, field: str, words: str, status: int
) -> None:
    response = submit(team_a, gang(2, request_doc))
    assert response.status_code == status, response.json()
    fields = response.json()["extra"]["fields"]
    assert field in fields, fields
    assert words in " ".join(fields[field])
    assert not Workload.objects.exists()


def test_a_gang_requiring_one_rack_is_placed_in_one_rack_or_waits_naming_it(team_a, racks) -> None:
    assert submit(team_a, gang(2, {"required": RACK})).status_code == 201
    run_scheduler(cycles=2)
    filler = gang(1, {})
    filler["name"] = "filler"
    del filler["podSets"][0]["topologyRequest"]
    assert submit(team_a, filler).status_code == 201
    run_scheduler(cycles=2)  # takes one node of r1, the only rack with room
    assert submit(team_a, gang(4, {"required": RACK})).status_code == 201
    run_scheduler(cycles=2)
    nodes = Allocation.objects.filter(pod__workload__name="train-2", active=True).values_list(
        "node__name", flat=True
    )
    assert len(nodes) == 2 and {n.split("-")[0] for n in nodes} == {"r2"}  # the tightest rack
    pod = Pod.objects.filter(workload__name="train-2").first()
    assert pod is not None and pod.topology_request == {"mode": "required", "level": RACK}
    waiting = Workload.objects.get(name="train-4")
    assert not Allocation.objects.filter(pod__workload=waiting, active=True).exists()
    pod = Pod.objects.filter(workload=waiting).first()
    assert pod is not None
    assert f"no rack ({RACK}) holds 4 pods x 8 GPUs (32 GPUs)" in pod.last_reason
    assert "the largest, b1/r1, has room for 3 pods (24 free GPUs)" in pod.last_reason
    waiting.refresh_from_db()
    assert waiting.pending_reason == "TopologyPlacementFailed"
    assert f"TopologyPlacementFailed: no rack ({RACK}) holds 4 pods" in waiting.reason


def test_a_gang_no_rack_could_ever_hold_is_not_admitted_and_says_why(team_a, racks) -> None:
    doc = gang(6, {"required": RACK})
    doc["name"] = "never"
    assert submit(team_a, doc).status_code == 201
    run_scheduler(cycles=2)
    workload = Workload.objects.get(name="never")
    assert workload.state == Workload.State.PENDING
    assert f"no rack ({RACK}) holds 6 pods x 8 GPUs" in workload.reason, workload.reason
    assert "on an empty cluster" in workload.reason
