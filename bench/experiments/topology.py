"""Multi-node gangs with and without a topology request across nodes, through the real shell on
the 2-block x 4-rack x 8 DGX H100 cluster of sim/specs/topology.yaml (its arrivals: gangs of 8
and 4 whole servers that want one rack, smaller gangs and single servers).

Three policies on the same arrivals and the same Kueue queues (a Topology of the spec's levels,
one flavor naming it, a ClusterQueue and a LocalQueue per tenant, quota beyond the cluster):
- `no-topology`: no pod set asks for anything across nodes (gangs placed all or nothing
  wherever the scheduler's per-node choice puts them);
- `kueue-tas`: every gang asks `kueue.x-k8s.io/podset-required-topology` = the rack level, and
  is placed inside one rack as Kueue TAS's BestFit chooses it (scheduling.core.domains); single
  pods are placed unconstrained by the same choice (Kueue's implicit TAS on a TAS-only
  ClusterQueue);
- `gpusched`: the same requests, the rack chosen by gpusched's LeastFragmenting (the one whose
  leftover still makes whole gangs, keeping whole racks and blocks free).

Measured over the whole run: of the 64-GPU gangs (8 pods x 8 GPUs) and of all gangs that were
bound, the share whose pods all landed in one rack (and in one block); the GPUs allocated
(mean share over the steps); gang wait from submission to the last member's bind, p50/p95
(gangs still waiting at the end count their wait so far).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Sum

from bench.experiments import worlds
from bench.experiments.fairness import percentile
from bench.experiments.worlds import SimClock
from scheduling.core.domains import PLUGIN as DOMAINS_PLUGIN
from scheduling.core.domains import DomainAsk, DomainFit, DomainMode
from scheduling.core.profiles import Profile
from scheduling.core.scheduler import Framework
from scheduling.models import Allocation, Gpu, Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.cache import ClusterCache
from scheduling.worker.load_feed import LoadFeed
from sim.runs import simulation_of
from sim.spec import ClusterSpec

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
POLICIES = ("no-topology", "kueue-tas", "gpusched")
FITS = {"kueue-tas": DomainFit.BEST_FIT, "gpusched": DomainFit.LEAST_FRAGMENTING}
START = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
BIG_GANG = (8, 8)  # pods, GPUs per pod: a 64-GPU gang
# A pod set without annotations on a ClusterQueue whose flavors all have a Topology is placed by
# TAS as if it asked `podset-unconstrained-topology: true` (Kueue's implicit TAS,
# kubernetes-sigs/kueue#4519 and KEP-2724): the experiment writes it out.
ANYWHERE = DomainAsk(DomainMode.UNCONSTRAINED)


@dataclass
class TopologyResult:
    policy: str
    gangs_bound: int = 0
    gangs_waiting: int = 0
    share_in_one_rack: float = 0.0
    share_in_one_block: float = 0.0
    big_gangs_bound: int = 0
    big_share_in_one_rack: float = 0.0
    gpu_allocation: float = 0.0
    gang_wait_p50_s: float = 0.0
    gang_wait_p95_s: float = 0.0
    wall_s: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "gangs_bound": self.gangs_bound,
            "gangs_waiting": self.gangs_waiting,
            "share_in_one_rack": round(self.share_in_one_rack, 3),
            "share_in_one_block": round(self.share_in_one_block, 3),
            "big_gangs_bound": self.big_gangs_bound,
            "big_share_in_one_rack": round(self.big_share_in_one_rack, 3),
            "gpu_allocation": round(self.gpu_allocation, 3),
            "gang_wait_p50_s": round(self.gang_wait_p50_s, 1),
            "gang_wait_p95_s": round(self.gang_wait_p95_s, 1),
            "wall_s": round(self.wall_s, 1),
        }


def with_requests(spec: ClusterSpec, policy: str) -> ClusterSpec:
    """The spec with every gang shape asking for one rack and every single pod placed
    unconstrained by the policy's choice (`kueue-tas`, `gpusched`), or as it is."""
    if policy == "no-topology":
        return spec
    rack = DomainAsk(DomainMode.REQUIRED, RACK)
    tenants = tuple(
        replace(
            t,
            shapes=tuple(
                replace(s, pod_set_topology=rack if s.pods > 1 else ANYWHERE) for s in t.shapes
            ),
        )
        for t in spec.tenants
    )
    return replace(spec, tenants=tenants)


def with_fit(profile: Profile, policy: str) -> Profile:
    """The profile with the policy's choice of domains (TopologyDomains' algorithm)."""
    fit = FITS.get(policy)
    if fit is None:
        return profile
    args = {**profile.plugin_args, DOMAINS_PLUGIN: {"algorithm": fit.value}}
    return replace(profile, plugin_args=args)


def queue_documents(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Kueue's TAS setup for the spec's tenants, as Kueue's sample-gpu-queues.yaml shapes it."""
    quota = [
        {"name": "cpu", "nominalQuota": 100_000},
        {"name": "memory", "nominalQuota": "100Ti"},
        {"name": "nvidia.com/gpu", "nominalQuota": 100_000},
    ]
    docs: list[dict[str, Any]] = [
        {
            "kind": "Topology",
            "metadata": {"name": "default"},
            "spec": {
                "levels": [
                    {"nodeLabel": BLOCK},
                    {"nodeLabel": RACK},
                    {"nodeLabel": "kubernetes.io/hostname"},
                ]
            },
        },
        {
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"topologyName": "default"},
        },
        {
            "kind": "ClusterQueue",
            "metadata": {"name": "tas"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [{"name": "tas", "resources": quota}],
                    }
                ],
            },
        },
    ]
    docs += [
        {
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": t.name},
            "spec": {"clusterQueue": "tas"},
        }
        for t in spec.tenants
    ]
    return docs


def simulate(
    spec: ClusterSpec, policy: str, *, hours: float, step_s: float = 60.0, side: str = "database"
) -> TopologyResult:
    """Run one policy on an empty database (the caller provides a scratch one)."""
    started = time.perf_counter()
    clock = SimClock(START)
    cluster = worlds.world(side, with_requests(spec, policy), clock)
    try:
        cluster.apply_queues(queue_documents(spec))
        scheduler = cluster.cycle(
            Framework(with_fit(load_profile("topology"), policy)),
            clock=clock,
            lease_duration_s=10 * hours * 3600,
            cache=ClusterCache(monotonic=clock.monotonic),
            load_feed=LoadFeed(monotonic=clock.monotonic, clock=clock),
        )
        end = START + timedelta(hours=hours)
        allocated: list[float] = []
        while clock.now < end:
            clock.advance(step_s)
            cluster.step()
            worlds.run_cycles(scheduler)
            allocated.append(_allocated_share())
        result = TopologyResult(policy)
        _measure(result, end)
        result.gpu_allocation = sum(allocated) / len(allocated) if allocated else 0.0
    finally:
        cluster.close()
    result.wall_s = time.perf_counter() - started
    return result


def _allocated_share() -> float:
    total = Gpu.objects.count()
    held = Pod.objects.filter(phase__in=(Pod.Phase.BOUND, Pod.Phase.RUNNING)).aggregate(
        n=Sum("gpus")
    )["n"]
    return (held or 0) / total if total else 0.0


def _measure(result: TopologyResult, end: datetime) -> None:
    """Each gang's first placement: where its members were bound, and when the last was."""
    where: dict[int, set[tuple[str, str]]] = defaultdict(set)
    last_bind: dict[int, datetime] = {}
    bound_pods: dict[int, set[int]] = defaultdict(set)
    allocations = Allocation.objects.filter(bound_at__isnull=False, pod__gang_min_count__gt=1)
    for workload_id, pod_id, labels, bound_at in allocations.order_by("bound_at").values_list(
        "pod__workload_id", "pod_id", "node__labels", "bound_at"
    ):
        if bound_at is None or pod_id in bound_pods[workload_id]:
            continue  # a later placement of an evicted member: the first one is measured
        bound_pods[workload_id].add(pod_id)
        where[workload_id].add((str(labels.get(BLOCK, "")), str(labels.get(RACK, ""))))
        last_bind[workload_id] = max(last_bind.get(workload_id, bound_at), bound_at)
    gangs = Workload.objects.filter(pods__gang_min_count__gt=1).distinct()
    waits: list[float] = []
    in_rack = in_block = big = big_in_rack = 0
    for w in gangs.prefetch_related("pods__sim"):
        pods = list(w.pods.all())
        shape = (len(pods), pods[0].gpus if pods else 0)
        run = simulation_of(pods[0]) if pods else None
        # The simulated arrival (the rows' created_at is the machine's clock).
        arrival = START + timedelta(seconds=run.arrival_s if run and run.arrival_s else 0.0)
        if len(bound_pods[w.pk]) < len(pods):
            result.gangs_waiting += 1
            waits.append((end - arrival).total_seconds())
            continue
        result.gangs_bound += 1
        waits.append((last_bind[w.pk] - arrival).total_seconds())
        one_rack = len(where[w.pk]) == 1
        in_rack += one_rack
        in_block += len({block for block, _ in where[w.pk]}) == 1
        if shape == BIG_GANG:
            big += 1
            big_in_rack += one_rack
    result.big_gangs_bound = big
    if result.gangs_bound:
        result.share_in_one_rack = in_rack / result.gangs_bound
        result.share_in_one_block = in_block / result.gangs_bound
    if big:
        result.big_share_in_one_rack = big_in_rack / big
    if waits:
        result.gang_wait_p50_s = percentile(waits, 0.5)
        result.gang_wait_p95_s = percentile(waits, 0.95)
