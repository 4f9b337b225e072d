"""Resources as quotas count them, in canonical integer units:

- `cpu` in milli-CPU, `memory` in MiB;
- `nvidia.com/gpu` in milli-GPU: a whole GPU is 1000, a GPU share (`gpu_milli`) counts its milli, so
  four 250-milli inference pods use as much quota as one whole GPU;
- MIG instances count as `nvidia.com/mig-<profile>` (one per instance) when a cluster queue covers
  that resource; otherwise each instance counts its compute slices against `nvidia.com/gpu` (a
  `3g.40gb` instance is 3/7 of a GPU: 429 milli), so a queue with only GPU quota still admits MIG
  pods at a fair price.

Quantities in YAML follow Kubernetes: `cpu: 500m` or `cpu: 2`, `memory: 64Gi` (a bare number is
bytes), `nvidia.com/gpu: 16` (or `0.5`: a count, never `16Gi`); MIG instances are whole counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core import quantity
from scheduling.core.quantity import QuantityError
from scheduling.core.types import GPU_RESOURCE, MIG_RESOURCE_PREFIX, MILLI_PER_GPU, PodRequest

CPU = "cpu"
MEMORY = "memory"
GPU = GPU_RESOURCE
MIG_SLICES_PER_GPU = 7

_EMPTY: Mapping[str, int] = MappingProxyType({})


def mig_resource(profile: str) -> str:
    return MIG_RESOURCE_PREFIX + profile


def mig_gpu_milli(profile: str) -> int:
    """The share of a GPU one MIG instance of `profile` is (`3g.40gb`: 3 of 7 compute slices)."""
    match = re.match(r"^(\d+)g\.", profile)
    slices = int(match.group(1)) if match else 1
    return math.ceil(MILLI_PER_GPU * slices / MIG_SLICES_PER_GPU)


def parse_quantity(resource: str, value: object) -> int:
    """A Kubernetes quantity as the canonical integer of `resource` (see the module doc), read by
    the bounded parser of scheduling/core/quantity.py."""
    try:
        return quantity.quota_amount(resource, value)
    except QuantityError as exc:
        raise QuantityError(f"{resource}: {exc}") from None


def format_quantity(resource: str, amount: int) -> str:
    """The canonical integer back as a readable Kubernetes quantity."""
    if resource == GPU:
        return f"{amount / 1000:g}"
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource == MEMORY:
        if amount % (1 << 20) == 0 and amount:
            return f"{amount >> 20}Ti"
        if amount % (1 << 10) == 0 and amount:
            return f"{amount >> 10}Gi"
        return f"{amount}Mi"
    return str(amount)


@dataclass(frozen=True, slots=True)
class Demand:
    """What a workload asks for in total, before a cluster queue decides how to count MIG."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0
    mig: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # profile -> instances

    @classmethod
    def of_pods(cls, pods: Iterable[tuple[PodRequest, int]]) -> Demand:
        """The sum over (pod template, count) pairs."""
        cpu = memory = gpu = 0
        mig: dict[str, int] = {}
        for pod, count in pods:
            cpu += pod.cpu_milli * count
            memory += pod.memory_mib * count
            gpu += pod.gpu_demand_milli * count
            if pod.mig_count:
                mig[pod.mig_profile] = mig.get(pod.mig_profile, 0) + pod.mig_count * count
        return cls(cpu, memory, gpu, MappingProxyType(mig))

    def __add__(self, other: Demand) -> Demand:
        mig = dict(self.mig)
        for profile, n in other.mig.items():
            mig[profile] = mig.get(profile, 0) + n
        return Demand(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_milli + other.gpu_milli,
            MappingProxyType(mig),
        )

    def amounts(self, covered: Iterable[str] = ()) -> dict[str, int]:
        """Resource -> canonical amount, counting MIG instances by their own resource when it is
        `covered`, else as GPU slices (module doc). Zero amounts are left out."""
        covered = set(covered)
        out = {CPU: self.cpu_milli, MEMORY: self.memory_mib, GPU: self.gpu_milli}
        for profile, n in self.mig.items():
            resource = mig_resource(profile)
            if resource in covered:
                out[resource] = out.get(resource, 0) + n
            else:
                out[GPU] += n * mig_gpu_milli(profile)
        return {resource: amount for resource, amount in out.items() if amount > 0}

    def as_json(self) -> dict[str, object]:
        return {
            "cpuMilli": self.cpu_milli,
            "memoryMiB": self.memory_mib,
            "gpuMilli": self.gpu_milli,
            "mig": dict(self.mig),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Demand:
        mig = doc.get("mig") or {}
        assert isinstance(mig, Mapping)
        return cls(
            int(str(doc.get("cpuMilli", 0))),
            int(str(doc.get("memoryMiB", 0))),
            int(str(doc.get("gpuMilli", 0))),
            MappingProxyType({str(k): int(str(v)) for k, v in mig.items()}),
        )
