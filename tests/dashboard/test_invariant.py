"""The live-view contract (zulip's verify_action, over sockets): a client that took a snapshot and
applied every delta it was sent holds exactly what a fresh read of the database shows, after any
sequence of service calls. Each seed drives a different random mix of submissions, scheduling
cycles, starts, finishes, cancellations, cordons and new nodes; small windows make the decision
feed and the pending list trim as they go. With queues, the nodes carry a rack and a block and a
Topology of those levels may arrive mid-run (the Cluster page then groups them, free GPUs per
domain)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import replace
from typing import Any

import pytest
import yaml
from asgiref.sync import sync_to_async
from django.utils import timezone

from dashboard.live import view_for
from dashboard.selectors import head_event_id
from dashboard.selectors import placements as placement_docs
from dashboard.selectors import queues as queue_docs
from dashboard.tailer import Tailer
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.core.types import TopologyPolicy
from scheduling.models import Node, Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from tests.dashboard.conftest import Client_, admin_cookie, connect, outbox_only
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tailers")]

# Two teams share a cohort; research borrows. Small quotas, so workloads wait for quota too.
QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: training}
spec:
  cohortName: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: any, resources: [{name: nvidia.com/gpu, nominalQuota: 10}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  cohortName: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: any, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]
""" + "".join(
    f"""---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: default, namespace: {team}}}
spec: {{clusterQueue: {queue}}}
"""
    for team, queue in [("vision", "training"), ("nlp", "training"), ("research", "research")]
)

TOPOLOGY = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata: {name: default}
spec:
  levels:
  - {nodeLabel: cloud.provider.com/topology-block}
  - {nodeLabel: cloud.provider.com/topology-rack}
  - {nodeLabel: kubernetes.io/hostname}
"""

POLICIES = [TopologyPolicy.NONE, TopologyPolicy.BEST_EFFORT, TopologyPolicy.SINGLE_NUMA_NODE]


class Script:
    """Random service calls, the way the scheduler, the simulator and admins make them."""

    def __init__(self, seed: int, *, queues: bool) -> None:
        self.queues = queues
        self.rng = random.Random(seed)
        self.worker = database_cycle(Framework(load_profile("topology")), identity="inv")
        self.submitted = 0
        self.extra_nodes = 0
        self.steps = 0

    def setup(self) -> list[str]:
        names = [node.name for node in factories.nodes(2, "dgx-h100")]
        names += [node.name for node in factories.nodes(1, "pcie-8gpu-nvbridge")]
        if self.queues:  # in racks r1, r1, r2 of block b1; the late nodes outside
            for name, rack in zip(names, ["r1", "r1", "r2"], strict=True):
                Node.objects.filter(name=name).update(
                    labels={
                        "cloud.provider.com/topology-block": "b1",
                        "cloud.provider.com/topology-rack": rack,
                    }
                )
        for tenant in ("vision", "nlp", "research"):
            factories.tenant(tenant)
        if self.queues:
            services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
        return names

    def step(self) -> str:
        self.steps += 1
        if self.queues and self.steps == 15:  # the Topology arrives mid-run
            self.topology()
            return "topology"
        action = self.rng.choices(
            ["submit", "schedule", "start", "finish", "cancel", "cordon", "node"],
            weights=[5, 4, 2, 2, 1, 1, 0.3],
        )[0]
        getattr(self, action)()
        return action

    def submit(self) -> None:
        rng = self.rng
        tenant = factories.tenant(rng.choice(["vision", "nlp", "research"]))
        self.submitted += 1
        shape = rng.random()
        factories.workload(
            tenant,
            f"w{self.submitted}",
            pods=rng.randint(1, 3),
            gpus=0 if shape < 0.3 else rng.choice([1, 2, 4, 8]),
            gpu_milli=rng.choice([250, 500]) if shape < 0.3 else 0,
            policy=rng.choice(POLICIES),
            priority=rng.choice([0, 100, 200]),
        )

    def schedule(self) -> None:
        self.worker.run_once()

    def start(self) -> None:
        pods = list(Pod.objects.filter(phase="Bound").select_related("workload__tenant"))
        services.pods_start(pods=pods[: self.rng.randint(1, 4)], now=timezone.now())

    def finish(self) -> None:
        pods = list(
            Pod.objects.filter(phase__in=["Bound", "Running"]).select_related("workload__tenant")
        )
        chosen = self.rng.sample(pods, min(len(pods), self.rng.randint(1, 3)))
        services.pods_finish(pods=chosen, now=timezone.now(), succeeded=self.rng.random() < 0.8)

    def cancel(self) -> None:
        active = list(Workload.objects.filter(state__in=Workload.ACTIVE_STATES))
        if active:
            services.workload_cancel(workload=self.rng.choice(active))

    def cordon(self) -> None:
        node = self.rng.choice(list(Node.objects.all()))
        services.node_set_cordoned(node=node, cordoned=not node.cordoned)

    def topology(self) -> None:
        services.queues_apply(config=parse_documents(list(yaml.safe_load_all(TOPOLOGY))))

    def node(self) -> None:
        self.extra_nodes += 1
        (spec,) = build_nodes(synthetic_pools(1, "pcie-8gpu-2socket"))
        services.node_register(
            spec=replace(spec, name=f"late-{self.extra_nodes}"), source=Node.Source.SIMULATOR
        )


def normalized(state: Any) -> Any:
    return json.loads(json.dumps(state, sort_keys=True))


async def caught_up(tailer: Tailer, key: str, client: Client_, head: int) -> None:
    """The tailer has read up to `head` for this view, and the client got all it pushed."""
    deadline = time.monotonic() + 20
    while tailer.lives[key].cursor < head:
        assert time.monotonic() < deadline, f"{key}: tailer stuck"
        await asyncio.sleep(0.01)
    live = tailer.lives[key]
    last = live.entries[-1].last if live.entries else live.base
    await client.until(lambda c: c.id is not None and c.id >= last, timeout=20)


@pytest.mark.parametrize(("seed", "queues"), [(1, False), (2, False), (3, True), (4, True)])
async def test_snapshot_plus_deltas_is_a_fresh_snapshot(
    layer: str, seed: int, queues: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(placement_docs, "DECISIONS_SHOWN", 6)
    monkeypatch.setattr(queue_docs, "PENDING_SHOWN", 5)
    script = Script(seed, queues=queues)
    names = await sync_to_async(script.setup)()
    cookie = await admin_cookie()
    paths = {
        "cluster": "ws/live/cluster/",
        "placements": "ws/live/placements/",
        "queues": "ws/live/queues/",
        "tenants": "ws/live/tenants/",
        f"node:{names[0]}": f"ws/live/nodes/{names[0]}/",
    }
    clients = {key: await connect(path, cookie) for key, path in paths.items()}
    for client in clients.values():
        assert (await client.receive())["type"] == "snapshot"

    actions = []
    for _ in range(30):
        actions.append(await sync_to_async(script.step)())
        await asyncio.sleep(script.rng.choice([0, 0, 0.01, 0.06]))  # within / across batches
    head = await sync_to_async(head_event_id)()
    tailer = Tailer.for_running_loop()

    for key, client in clients.items():
        await caught_up(tailer, key, client, head)
        view = key.partition(":")[0]
        fresh = await sync_to_async(view_for(key).build)()
        assert normalized(outbox_only(client.state, view)) == normalized(fresh), (key, actions)
        if key in ("cluster", "queues", "tenants"):
            assert any(m["type"] == "delta" for m in client.messages), (key, actions)
        await client.socket.disconnect()
    if queues:
        assert set(clients["queues"].state["cluster_queues"]) == {"training", "research"}
        assert set(clients["cluster"].state["domains"]) >= {"b1", "b1/r1", "b1/r2"}
