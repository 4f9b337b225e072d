"""When simulated workloads arrive: a Poisson process per tenant of a spec, or the Philly trace.

Both are streams over simulated time: `due(until_s)` returns, once, every arrival up to `until_s`.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from scheduling.core.types import Resources, ServiceClass, TopologyPolicy
from sim.spec import ClusterSpec, PhillySpec, ShapeSpec, SpecError, TenantSpec
from sim.utilization import UtilizationProfile

MIN_DURATION_S = 60.0


@dataclass(frozen=True)
class Arrival:
    at_s: float
    tenant: str
    name: str
    shape: ShapeSpec
    duration_s: float
    utilization: UtilizationProfile
    priority: int = 0
    service_class: ServiceClass = ServiceClass.BATCH

    @property
    def gang(self) -> bool:
        return self.shape.pods > 1


class ArrivalStream(Protocol):
    def due(self, until_s: float) -> list[Arrival]: ...


def arrivals_for(spec: ClusterSpec) -> ArrivalStream:
    if spec.philly is not None:
        return PhillyArrivals(spec.philly, seed=spec.seed)
    return GeneratedArrivals(spec.tenants, seed=spec.seed)


class GeneratedArrivals:
    """Each tenant submits at its own rate (exponential gaps); shapes drawn by weight."""

    def __init__(self, tenants: tuple[TenantSpec, ...], *, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.tenants = tenants
        self.next_at = [self._gap(t) for t in tenants]
        self.counter = 0

    def _gap(self, tenant: TenantSpec) -> float:
        if tenant.arrivals_per_hour <= 0:
            return math.inf
        return self.rng.expovariate(tenant.arrivals_per_hour / 3600.0)

    def due(self, until_s: float) -> list[Arrival]:
        out: list[Arrival] = []
        for k, tenant in enumerate(self.tenants):
            while self.next_at[k] <= until_s:
                out.append(self._arrival(tenant, self.next_at[k]))
                self.next_at[k] += self._gap(tenant)
        return sorted(out, key=lambda a: a.at_s)

    def _arrival(self, tenant: TenantSpec, at_s: float) -> Arrival:
        self.counter += 1
        shape = self.rng.choices(tenant.shapes, [s.weight for s in tenant.shapes])[0]
        mean = min(1.0, max(0.01, tenant.utilization.mean * self.rng.uniform(0.8, 1.2)))
        return Arrival(
            at_s=at_s,
            tenant=tenant.name,
            name=f"{tenant.name}-{self.counter:05d}",
            shape=shape,
            duration_s=max(MIN_DURATION_S, self.rng.expovariate(1.0 / tenant.duration_s)),
            utilization=replace(tenant.utilization, mean=mean, seed=self.rng.randrange(1 << 30)),
            priority=tenant.priority,
            service_class=tenant.service_class,
        )


class PhillyArrivals:
    """Microsoft Philly jobs (the Pollux digest: submit time, duration, GPUs, virtual cluster), in
    submit order; each virtual cluster is a tenant. Jobs larger than one server become gangs of
    equal pods. The digest has no utilization, so each tenant gets a synthetic one (seeded)."""

    def __init__(self, spec: PhillySpec, *, seed: int = 0) -> None:
        if not spec.path.is_file():
            raise SpecError(f"workload.philly.path: no such file {spec.path}")
        self.rng = random.Random(seed)
        self.max_gpus = spec.max_gpus_per_pod
        with spec.path.open(newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row.get("timestamp")]
        rows.sort(key=lambda row: row["timestamp"])
        start = _parse_time(rows[0]["timestamp"]) if rows else datetime(2017, 1, 1, tzinfo=UTC)
        self.jobs = [(_parse_time(r["timestamp"]) - start).total_seconds() for r in rows]
        self.rows = rows
        self.position = 0
        self.tenant_usage: dict[str, float] = {}

    def due(self, until_s: float) -> list[Arrival]:
        out = []
        while self.position < len(self.rows) and self.jobs[self.position] <= until_s:
            out.append(self._arrival(self.position))
            self.position += 1
        return out

    def _arrival(self, k: int) -> Arrival:
        row = self.rows[k]
        tenant = f"vc-{row['cluster']}"
        gpus = max(1, int(row["num_gpus"]))
        pods = math.ceil(gpus / self.max_gpus)
        per_pod = math.ceil(gpus / pods)
        if tenant not in self.tenant_usage:
            self.tenant_usage[tenant] = self.rng.uniform(0.15, 0.9)
        shape = ShapeSpec(
            pods=pods,
            resources=Resources(
                cpu_milli=4000 * per_pod, memory_mib=32_768 * per_pod, gpus=per_pod
            ),
            topology_policy=TopologyPolicy.BEST_EFFORT if per_pod > 1 else TopologyPolicy.NONE,
        )
        return Arrival(
            at_s=self.jobs[k],
            tenant=tenant,
            name=f"philly-{k:06d}",
            shape=shape,
            duration_s=max(MIN_DURATION_S, float(row["duration"])),
            utilization=UtilizationProfile(mean=self.tenant_usage[tenant], seed=k),
        )


def _parse_time(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
