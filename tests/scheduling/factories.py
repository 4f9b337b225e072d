"""Database fixtures built through services, the way the product builds them."""

from __future__ import annotations

from scheduling import services
from scheduling.core.types import Resources, ServiceClass, TopologyPolicy
from scheduling.models import Node, Tenant, Workload
from scheduling.pod_template import PodTemplate
from sim.cluster import build_nodes, synthetic_pools
from sim.runs import simulations_record


def nodes(count: int, topology: str = "dgx-h100") -> list[Node]:
    return [
        services.node_register(spec=spec, source=Node.Source.SIMULATOR)
        for spec in build_nodes(synthetic_pools(count, topology))
    ]


def tenant(name: str = "team-a") -> Tenant:
    return Tenant.objects.filter(name=name).first() or services.tenant_create(name=name)


def workload(
    owner: Tenant,
    name: str,
    *,
    pods: int = 1,
    gpus: int = 0,
    gpu_milli: int = 0,
    cpu_milli: int = 1000,
    policy: TopologyPolicy = TopologyPolicy.NONE,
    priority: int = 0,
    min_count: int | None = None,
    duration_s: float | None = None,
    service_class: ServiceClass = ServiceClass.BATCH,
) -> Workload:
    template = PodTemplate(
        resources=Resources(cpu_milli=cpu_milli, memory_mib=1024, gpus=gpus, gpu_milli=gpu_milli),
        topology_policy=policy,
    )
    submitted = services.workload_submit(
        tenant=owner,
        name=name,
        priority=priority,
        service_class=service_class,
        pod_sets=[
            services.PodSetSpec(name="main", count=pods, template=template, min_count=min_count)
        ],
    )
    if duration_s is not None:  # how long the simulated cluster runs its pods
        simulations_record(submitted, duration_s=duration_s)
    return submitted
