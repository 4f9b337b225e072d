"""The two worlds an experiment can run the one scheduling cycle in, on one simulated clock:

- `DatabaseWorld`: the embedded simulator (sim/simulator.py) starts, runs and finishes pods in
  the database; the scheduler is `runscheduler`'s cycle;
- `KubernetesWorld`: the simulated Kubernetes (sim/kubernetes) with its kubelets and
  dcgm-exporter, reached through the official client; the scheduler is `runkube`'s cycle, and
  workloads submitted through the services become real pods (kube/materialize.py).

Both submit the same arrivals through the services (as tenants would through the REST API), and
both give the telemetry worker a dcgm-exporter text to parse, so everything between the
arrivals and the measures is the product's own code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.utils import timezone
from kubernetes import client

from kube.api import KubeApi
from kube.side import kubernetes_cycle
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.models import Pod
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from scheduling.worker.estimates import StartEstimator
from scheduling.worker.runtime_feed import RuntimeFeed
from sim.arrivals import ArrivalStream
from sim.kubernetes.launch import SimulatedCluster
from sim.runs import simulation_of
from sim.simulator import Arrivals, Simulator
from sim.spec import ClusterSpec
from telemetry.exposition import render_exposition
from telemetry.mapping import gpu_samples_from_scrape
from telemetry.parsing import parse_scrape
from telemetry.placement import Attribution
from telemetry.sources import Fetched

SIDES = ("database", "kubernetes")
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
PLURALS = {"Topology": "topologies"}  # the kinds whose plural is not kind + "s"


class SimClock:
    """One simulated clock for the cluster, the telemetry worker and the scheduler (and the
    tests' settable clock): it moves only when advanced or set."""

    def __init__(self, start: datetime | None = None) -> None:
        self.start = self.now = start or timezone.now()

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return (self.now - self.start).total_seconds()

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class World(Protocol):
    def cycle(self, framework: Framework, **options: Any) -> SchedulingCycle:
        """The side's one cycle, everything it paces itself counting the world's simulated
        seconds."""
        ...

    def apply_queues(self, documents: Sequence[dict[str, Any]]) -> None:
        """Kueue's queue objects, where this side reads them from."""
        ...

    def step(self) -> None:
        """Arrivals up to now, and the cluster one step on (pods start, run, finish)."""
        ...

    def exposition(self) -> str:
        """What dcgm-exporter reports now."""
        ...

    def slowed(self) -> set[str]:
        """The pods ("namespace/name") that lost time on an over-subscribed GPU so far."""
        ...

    def warning_events(self) -> dict[str, int]:
        """How many Warning events the cluster recorded so far, by reason."""
        ...

    def close(self) -> None: ...


class DatabaseWorld:
    def __init__(
        self, spec: ClusterSpec, clock: SimClock, arrivals: ArrivalStream | None = None
    ) -> None:
        self.clock = clock
        self.simulator = Simulator(spec, speed=1.0, clock=clock, stream=arrivals)
        self.simulator.setup()

    def cycle(self, framework: Framework, **options: Any) -> SchedulingCycle:
        return database_cycle(framework, **_paced(self.clock, options))

    def apply_queues(self, documents: Sequence[dict[str, Any]]) -> None:
        """As `applyqueues` does."""
        services.queues_apply(config=parse_documents(list(documents)))

    def step(self) -> None:
        self.simulator.run_once()

    def exposition(self) -> str:
        return render_exposition(self.simulator.dcgm_states())

    def slowed(self) -> set[str]:
        return {
            f"{pod.workload.tenant.namespace}/{pod.name}"
            for pod in Pod.objects.select_related("workload__tenant", "sim")
            if (run := simulation_of(pod)) is not None and run.lost_in(pod.started_at) > 0
        }

    def warning_events(self) -> dict[str, int]:
        return {}  # the embedded simulator writes no Kubernetes events

    def close(self) -> None:
        pass


class KubernetesWorld:
    def __init__(
        self, spec: ClusterSpec, clock: SimClock, arrivals: ArrivalStream | None = None
    ) -> None:
        self.clock = clock
        # Watches end as soon as they have sent what is there: one informer round per cycle.
        # The nodes' device plugin gives a pod the GPUs the scheduler wrote into its annotation
        # (`gpusched.io/gpu-ids`), whole GPUs as well as shares, as HAMi's device plugin does
        # with its scheduler's (docs/kubernetes.md, "Device choice"): with the classic NVIDIA
        # device plugin a whole-GPU pod lands on the lowest free GPU, which may be one gpusched
        # has just given to time-sliced shares. DRA would pin whole GPUs too, but gives no
        # shares of one GPU to several pods.
        self.cluster = SimulatedCluster.from_spec(
            spec, clock=clock, watch_linger_s=0.0, honour_gpu_ids=True
        ).start()
        self.arrivals = Arrivals(spec, started_at=clock.now, stream=arrivals)
        self._slowed: set[str] = set()

    def cycle(self, framework: Framework, **options: Any) -> SchedulingCycle:
        options.pop("lease_duration_s", None)  # one replica: no Lease
        api = KubeApi(self.cluster.kube.api_client(), reporting_instance="gpusched-experiment")
        return kubernetes_cycle(
            api,
            framework,
            None,
            identity="gpusched-experiment",
            watch_timeout_s=5,
            monotonic=self.clock.monotonic,  # the side's periodic lists and resync
            **_paced(self.clock, options),
        )

    def apply_queues(self, documents: Sequence[dict[str, Any]]) -> None:
        """Into the cluster through the official client, as `kubectl apply` would: the
        Kubernetes side reads Kueue's objects from there."""
        custom = client.CustomObjectsApi(self.cluster.kube.api_client())
        for doc in documents:
            body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", **doc}
            plural = PLURALS.get(doc["kind"], f"{doc['kind'].lower()}s")
            namespace = doc["metadata"].get("namespace")
            if namespace:
                self.cluster.kube.add_namespace(namespace)
                custom.create_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, plural, body
                )
            else:
                custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, body)

    def step(self) -> None:
        self.arrivals.submit_due(self.clock.now)
        self.cluster.run_once()
        self._slowed |= {run.key for run in self.cluster.kubelets.running() if run.lost_s > 0}

    def exposition(self) -> str:
        return self.cluster.exporter.render()

    def slowed(self) -> set[str]:
        return set(self._slowed)

    def warning_events(self) -> dict[str, int]:
        found = Counter(
            str(event.get("reason") or "")
            for event in self.cluster.kube.events
            if event.get("type") == "Warning"
        )
        return dict(sorted(found.items()))

    def close(self) -> None:
        self.cluster.close()


def _paced(clock: SimClock, options: dict[str, Any]) -> dict[str, Any]:
    """The cycle's options with its estimated starts paced by the simulated clock, as the
    experiments pace its cache and feeds: every throttle of a lock-step run counts simulated
    seconds, so the decisions do not depend on how fast the machine ran each step."""
    return {
        "estimator": StartEstimator(monotonic=clock.monotonic),
        # What it learns from finished work, too: paced by the machine's clock, a loaded machine
        # learnt more often per simulated hour, and the estimates differed from run to run and
        # from side to side on one arrival stream (issue 37)
        "runtime_feed": RuntimeFeed(monotonic=clock.monotonic),
        **options,
    }


def run_cycles(scheduler: SchedulingCycle) -> None:
    """One step's scheduling: cycles until one leaves nothing for the next. `runkube` runs a
    cycle every second or so; in lock-step, a cycle that created pods for REST-submitted
    workloads (the Kubernetes side's materializer) leaves them to its informer's next round, so
    one more cycle binds them within the step, as the database side binds a submission in the
    cycle that sees it."""
    while True:
        report = scheduler.run_once()
        if not (report.more or report.side_counts.get("pods_created")):
            return


def world(
    side: str, spec: ClusterSpec, clock: SimClock, arrivals: ArrivalStream | None = None
) -> World:
    """The side's world; its arrivals are the spec's unless a stream is given."""
    if side == "kubernetes":
        return KubernetesWorld(spec, clock, arrivals)
    return DatabaseWorld(spec, clock, arrivals)


class ExpositionSource:
    """The telemetry source that scrapes a world in-process: its dcgm-exporter text, parsed
    exactly as a scrape of it would be."""

    name = "simulator"

    def __init__(self, world: World) -> None:
        self.world = world

    def fetch(self, known_nodes: frozenset[str] | None = None) -> Fetched:
        scrape = parse_scrape(self.world.exposition())
        gpus, mapping = gpu_samples_from_scrape(scrape, attribution=Attribution(known=known_nodes))
        fetched = Fetched(gpus=gpus)
        fetched.parse.merge(scrape.stats)
        fetched.mapping.merge(mapping)
        return fetched
