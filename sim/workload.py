"""Synthetic pod streams with a realistic GPU mix.

The shape follows Alibaba's openb trace (shared/reference/benchmarks-and-traces.md §1): most GPU
pods ask for one GPU or a share of one (44% of GPU pods are fractional), few ask for several, and
some pods need no GPU. Multi-GPU pods are made more common here (9% instead of 0.9%) so the topology
code is exercised, and they carry topology policies.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from scheduling.core.types import (
    PodRequest,
    Resources,
    ServiceClass,
    TopologyPolicy,
    TopologyScope,
)

# (weight, kind, GPUs) — kind: "cpu" (no GPU), "share" (part of one GPU), "whole".
POD_SHAPES: tuple[tuple[float, str, int], ...] = (
    (0.07, "cpu", 0),
    (0.37, "share", 1),
    (0.47, "whole", 1),
    (0.05, "whole", 2),
    (0.03, "whole", 4),
    (0.01, "whole", 8),
)
# (weight, policy, scope) for multi-GPU pods.
TOPOLOGY_CHOICES: tuple[tuple[float, TopologyPolicy, TopologyScope | None], ...] = (
    (0.35, TopologyPolicy.BEST_EFFORT, None),
    (0.30, TopologyPolicy.SINGLE_NUMA_NODE, None),
    (0.20, TopologyPolicy.RESTRICTED, TopologyScope.NVLINK),
    (0.15, TopologyPolicy.NONE, None),
)


def synthetic_pods(count: int, *, seed: int = 0, tenants: int = 8) -> Iterator[PodRequest]:
    rng = random.Random(seed)
    shapes = [(kind, gpus) for _, kind, gpus in POD_SHAPES]
    shape_weights = [weight for weight, _, _ in POD_SHAPES]
    policies = [(policy, scope) for _, policy, scope in TOPOLOGY_CHOICES]
    policy_weights = [weight for weight, _, _ in TOPOLOGY_CHOICES]
    for k in range(count):
        kind, gpus = rng.choices(shapes, shape_weights)[0]
        tenant = f"tenant-{rng.randrange(tenants)}"
        service_class = rng.choice(list(ServiceClass))
        policy: TopologyPolicy = TopologyPolicy.NONE
        scope: TopologyScope | None = None
        if kind == "cpu":
            cpu, memory, gpu_milli = rng.choice((2000, 4000, 8000)), 8192, 0
        elif kind == "share":
            cpu, memory, gpu_milli = (
                rng.choice((2000, 4000)),
                16_384,
                rng.choice((100, 250, 300, 500, 700)),
            )
        else:
            cpu, memory, gpu_milli = 8000 * gpus, 65_536 * gpus, 0
            if gpus > 1:
                policy, scope = rng.choices(policies, policy_weights)[0]
            if gpus > 4 and policy is TopologyPolicy.SINGLE_NUMA_NODE:
                # No server here has 8 GPUs on one NUMA node; such a pod could never run.
                policy, scope = TopologyPolicy.RESTRICTED, TopologyScope.NVLINK
        resources = Resources(
            cpu_milli=cpu,
            memory_mib=memory,
            gpus=gpus if kind == "whole" else 0,
            gpu_milli=gpu_milli,
        )
        yield PodRequest.of(
            resources,
            uid=f"pod-{k:06d}",
            name=f"pod-{k:06d}",
            namespace=tenant,
            tenant=tenant,
            created_at=float(k),
            service_class=service_class,
            topology_policy=policy,
            topology_scope=scope,
        )
