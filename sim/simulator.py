"""The embedded simulated cluster, driven against the database through services.

Simulated time runs `speed` times faster than the wall clock. Each `run_once()`: (1) submit the
workloads whose arrival time has come, (2) start the pods the scheduler bound, (3) finish the pods
whose run time is over, which frees their GPUs. `dcgm_states()` renders what dcgm-exporter would
report for every GPU right now: utilization follows the pods that really hold each GPU.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from scheduling import services
from scheduling.core.types import SharingMode
from scheduling.models import Gpu, GpuAssignment, Node, Pod, Tenant
from scheduling.pod_template import PodTemplate
from sim.arrivals import Arrival, ArrivalStream, arrivals_for
from sim.cluster import build_nodes
from sim.gpu_states import Holder, demand, lost_seconds, mig_instance_state, whole_gpu_states
from sim.models import PodSimulation
from sim.runs import simulation_of, simulations_record
from sim.spec import ClusterSpec
from sim.utilization import UtilizationProfile
from telemetry.exposition import GpuState

logger = logging.getLogger(__name__)


@dataclass
class SimReport:
    sim_time_s: float = 0.0
    submitted: int = 0
    started: int = 0
    slowed: int = 0  # pods that lost time on an over-subscribed GPU in this step
    finished: int = 0


class Arrivals:
    """The spec's workloads submitted as their arrival time comes, through the services (as
    tenants would through the REST API): the simulated cluster of either side runs them."""

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        started_at: datetime,
        speed: float = 1.0,
        stream: ArrivalStream | None = None,
    ) -> None:
        self.stream = stream if stream is not None else arrivals_for(spec)
        self.started_at, self.speed = started_at, speed
        self._tenants: dict[str, Tenant] = {}

    def sim_seconds(self, now: datetime) -> float:
        return (now - self.started_at).total_seconds() * self.speed

    def submit_due(self, now: datetime) -> int:
        due = self.stream.due(self.sim_seconds(now))
        for arrival in due:
            self._submit(arrival)
        return len(due)

    def _submit(self, arrival: Arrival) -> None:
        tenant = self._tenants.get(arrival.tenant)
        if tenant is None:
            tenant = Tenant.objects.filter(name=arrival.tenant).first() or services.tenant_create(
                name=arrival.tenant
            )
            self._tenants[arrival.tenant] = tenant
        shape = arrival.shape
        template = PodTemplate(
            resources=shape.resources,
            gpu_models=shape.gpu_models,
            topology_policy=shape.topology_policy,
            topology_scope=shape.topology_scope,
        )
        try:
            with transaction.atomic():
                workload = services.workload_submit(
                    tenant=tenant,
                    name=arrival.name,
                    priority=arrival.priority,
                    service_class=arrival.service_class,
                    pod_sets=[
                        services.PodSetSpec(
                            name="main",
                            count=shape.pods,
                            template=template,
                            min_count=shape.pods
                            if arrival.gang or shape.pod_set_topology
                            else None,
                            topology=shape.pod_set_topology,
                        )
                    ],
                )
                simulations_record(
                    workload,
                    arrival_s=arrival.at_s,
                    duration_s=arrival.duration_s,
                    utilization=arrival.utilization.as_json(),
                )
        except services.ServiceError as exc:  # a restarted simulator meets its own old names
            logger.info("arrival %s skipped: %s", arrival.name, exc)


# Columns of a holder's rows that _holder and _charge_contention never read.
_HOLDERS_UNUSED = (
    "allocation__numa_cpu_milli",
    *(f"allocation__pod__{name}" for name in ("extended_resources", "pending_explanation")),
    *(
        f"allocation__pod__workload__{name}"
        for name in ("pod_sets", "flavors", "quota_usage", "node_selector", "tolerations")
    ),
)


@dataclass
class Simulator:
    spec: ClusterSpec
    speed: float = 60.0
    clock: Callable[[], datetime] = timezone.now
    stream: ArrivalStream | None = None  # the spec's arrivals unless given (an experiment's trace)
    arrivals: Arrivals = field(init=False)
    started_at: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.started_at = self.clock()
        self.arrivals = Arrivals(
            self.spec, started_at=self.started_at, speed=self.speed, stream=self.stream
        )
        self._last_tick: datetime | None = None

    def setup(self) -> int:
        """Register (or refresh) every node of the spec; returns how many."""
        nodes = build_nodes(list(self.spec.pools))
        for spec in nodes:
            services.node_register(spec=spec, source=Node.Source.SIMULATOR)
        return len(nodes)

    def run_once(self) -> SimReport:
        now = self.clock()
        report = SimReport(sim_time_s=self.arrivals.sim_seconds(now))

        # 1. Arrivals up to now.
        report.submitted = self.arrivals.submit_due(now)

        # 2. Bound pods start running.
        bound = list(Pod.objects.filter(phase=Pod.Phase.BOUND).select_related("workload__tenant"))
        services.pods_start(pods=bound, now=now)
        report.started = len(bound)

        # 3. Running pods progress; on an over-subscribed GPU (the pods on it want more than the
        # whole GPU) they all progress slower, and the time they lose is recorded.
        slowed = self._charge_contention(now)
        report.slowed = len(slowed)

        # 4. Pods whose work is done finish and free their GPUs.
        running = Pod.objects.filter(phase=Pod.Phase.RUNNING).select_related(
            "workload__tenant", "sim"
        )
        done = [pod for pod in running if self._is_done(pod, now)]
        services.pods_finish(pods=done, now=now)
        report.finished = len(done)
        self._last_tick = now
        return report

    def _charge_contention(self, now: datetime) -> list[Pod]:
        elapsed_sim = (now - (self._last_tick or now)).total_seconds() * self.speed
        if elapsed_sim <= 0:
            return []
        lost: dict[int, tuple[Pod, float]] = {}
        for holders in self._holders().values():
            wanted = demand([self._holder(a, now) for a in holders if a.mig_slot is None])
            if wanted <= 1.0:
                continue
            for assignment in holders:
                pod = assignment.allocation.pod
                share = lost_seconds(wanted, elapsed_sim)
                if share > lost.get(pod.pk, (pod, 0.0))[1]:
                    lost[pod.pk] = (pod, share)
        runs = []
        for pod, seconds in lost.values():
            run = simulation_of(pod)
            if run is not None:  # a pod no simulated cluster submitted runs until stopped
                run.lose(seconds, pod.started_at)
                runs.append(run)
        PodSimulation.objects.bulk_update(runs, ["lost_s", "lost_since"])
        return [pod for pod, _ in lost.values()]

    def _is_done(self, pod: Pod, now: datetime) -> bool:
        run = simulation_of(pod)
        if pod.started_at is None or run is None or run.duration_s <= 0:
            return False
        lost = run.lost_in(pod.started_at)
        return now >= pod.started_at + timedelta(seconds=(run.duration_s + lost) / self.speed)

    def dcgm_states(self, now: datetime | None = None) -> list[GpuState]:
        """Every GPU (every MIG instance) as dcgm-exporter would report it now."""
        now = now or self.clock()
        holders = self._holders()
        states: list[GpuState] = []
        for gpu in Gpu.objects.select_related("node").order_by("node__name", "index"):
            states.extend(self._gpu_states(gpu, holders.get(gpu.pk, []), now))
        return states

    def _holders(self) -> dict[int, list[GpuAssignment]]:
        """Per GPU id, the running pods' assignments on it."""
        holders: dict[int, list[GpuAssignment]] = defaultdict(list)
        active = (
            GpuAssignment.objects.filter(active=True, allocation__pod__phase=Pod.Phase.RUNNING)
            .select_related("allocation__pod__workload__tenant", "allocation__pod__sim")
            # Read every tick and at every scrape: decoding the JSON no holder needs (the
            # workload's pod sets above all) was most of the simulator's CPU under bench_stack.
            .defer(*_HOLDERS_UNUSED)
        )
        for assignment in active:
            holders[assignment.gpu_id].append(assignment)
        return holders

    def _gpu_states(self, gpu: Gpu, holders: list[GpuAssignment], now: datetime) -> list[GpuState]:
        base = GpuState(
            hostname=gpu.node.name,
            gpu=gpu.index,
            uuid=gpu.uuid,
            model_name=gpu.model.replace("-", " "),
        )
        if gpu.sharing == SharingMode.MIG.value:
            held = {a.mig_slot: self._holder(a, now) for a in holders}
            return [
                mig_instance_state(base, gpu.memory_mib, profile, slot, held.get(slot))
                for slot, profile in enumerate(gpu.mig_layout)
            ]
        return whole_gpu_states(base, gpu.memory_mib, [self._holder(a, now) for a in holders])

    def _holder(self, assignment: GpuAssignment, now: datetime) -> Holder:
        pod = assignment.allocation.pod
        return Holder(
            pod=pod.name,
            namespace=pod.workload.tenant.namespace,
            uid=str(pod.uid),
            busy=self._busy(assignment, now),
            memory=self._memory(assignment),
            milli=assignment.milli,
        )

    def _busy(self, assignment: GpuAssignment, now: datetime) -> float:
        pod = assignment.allocation.pod
        if pod.started_at is None:
            return 0.0
        return _profile(pod).at((now - pod.started_at).total_seconds() * self.speed)

    def _memory(self, assignment: GpuAssignment) -> float:
        return _profile(assignment.allocation.pod).memory


def _profile(pod: Pod) -> UtilizationProfile:
    run = simulation_of(pod)
    return UtilizationProfile.from_json(run.utilization if run is not None else None)
