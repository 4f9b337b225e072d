"""Resources as quotas count them, in canonical integer units. Any Kubernetes resource name can be
covered by a quota (Kueue's `coveredResources` are plain resource names):

- `cpu` in milli-CPU; `memory`, `ephemeral-storage` and `hugepages-<size>` in MiB;
- `nvidia.com/gpu` in milli-GPU: a whole GPU is 1000, a GPU share (`gpu_milli`) counts its milli, so
  four 250-milli inference pods use as much quota as one whole GPU;
- MIG instances count as `nvidia.com/mig-<profile>` (one per instance) when a cluster queue covers
  that resource; otherwise each instance counts its compute slices against `nvidia.com/gpu` (a
  `3g.40gb` instance is 3/7 of a GPU: 429 milli), so a queue with only GPU quota still admits MIG
  pods at a fair price;
- `pods` counts pods (as Kueue counts it: one per pod of the workload);
- extended resources (`example.com/credits`, `rdma/hca`: a name qualified with a domain outside
  `kubernetes.io`) count whole units. Kubernetes measures them, like `pods`, in integers only
  (kubernetes/kubernetes pkg/apis/core/helper/helpers.go, IsIntegerResourceName; the names:
  https://kubernetes.io/docs/tasks/configure-pod-container/extended-resource/).

Quantities follow Kubernetes: `cpu: 500m` or `cpu: 2`, `memory: 64Gi` (a bare number is bytes),
`nvidia.com/gpu: 16` (or `0.5`: a count, never `16Gi`), `example.com/credits: 1k`. Every quantity
the queues read is parsed here (`parse_quantity`, or `to_canonical` for an amount already read),
by the one bounded parser (scheduling/core/quantity.py): a magnitude beyond any cluster is
refused from the text, and no canonical amount exceeds MAX_CANONICAL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType

from scheduling.core import quantity
from scheduling.core.quantity import QuantityError as QuantityError  # re-exported
from scheduling.core.types import (
    GPU_MILLI_RESOURCE,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    MILLI_PER_GPU,
    PodRequest,
)

CPU = "cpu"
MEMORY = "memory"
GPU = GPU_RESOURCE
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"
MIG_SLICES_PER_GPU = 7
MIB = 2**20

_EMPTY: Mapping[str, int] = MappingProxyType({})
# A qualified resource name: `prefix/name` (DNS subdomain prefix) or a bare name (Kubernetes').
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_BYTE_RESOURCES = frozenset({MEMORY, EPHEMERAL_STORAGE})


# The largest canonical amount of any quota: exact in a float64 and in a BIGINT column.
MAX_CANONICAL = 2**53


def mig_resource(profile: str) -> str:
    return MIG_RESOURCE_PREFIX + profile


def mig_gpu_milli(profile: str) -> int:
    """The share of a GPU one MIG instance of `profile` is (`3g.40gb`: 3 of 7 compute slices)."""
    match = re.match(r"^(\d+)g\.", profile)
    slices = int(match.group(1)) if match else 1
    return math.ceil(MILLI_PER_GPU * slices / MIG_SLICES_PER_GPU)


def is_extended(resource: str) -> bool:
    """A resource gpusched counts against quota by name only and does not place on nodes:
    extended resources, `ephemeral-storage`, `hugepages-<size>` (PodRequest.extended)."""
    return resource not in (CPU, MEMORY, GPU, GPU_MILLI_RESOURCE, PODS) and not (
        resource.startswith(MIG_RESOURCE_PREFIX)
    )


def resource_name_error(resource: object) -> str | None:
    """None when `resource` is a name quotas can count (module doc), else why not."""
    if not isinstance(resource, str) or not resource or len(resource) > 253 + 1 + 63:
        return f"{resource!r} is not a resource name"
    if resource in (CPU, MEMORY, GPU, GPU_MILLI_RESOURCE, PODS, EPHEMERAL_STORAGE) or (
        resource.startswith((HUGEPAGES_PREFIX, MIG_RESOURCE_PREFIX))
    ):
        return None
    prefix, slash, name = resource.rpartition("/")
    if not slash:
        return (
            f"unknown resource {resource!r}: a name without a domain must be cpu, memory, "
            f"{EPHEMERAL_STORAGE}, {HUGEPAGES_PREFIX}<size> or {PODS}; extended resources are "
            "qualified with a domain (example.com/credits)"
        )
    if not _DNS_SUBDOMAIN.match(prefix) or len(prefix) > 253:
        return f"{resource!r}: {prefix!r} is not a DNS subdomain"
    if not _NAME_PART.match(name) or len(name) > 63:
        return f"{resource!r}: {name!r} is not a valid name (at most 63 letters, digits, -_.)"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return f"{resource!r}: the kubernetes.io domain has no such resource"
    return None


def to_canonical(resource: str, amount: Fraction | Decimal, *, shown: object = None) -> int:
    """An amount in Kubernetes' base unit (cores, bytes, GPUs, counts) as the canonical integer of
    `resource`; `shown` is what the user wrote, for messages."""
    shown = amount if shown is None else shown
    exact = Fraction(amount)
    if resource in (CPU, GPU):
        scaled = exact * 1000
    elif resource in _BYTE_RESOURCES or resource.startswith(HUGEPAGES_PREFIX):
        scaled = exact / MIB  # bytes (a bare number, or 64Gi = 64 * 2**30) to MiB
    else:
        if exact.denominator != 1:
            raise QuantityError(f"{resource}: {shown!r} is not a whole number of units")
        scaled = exact
    canonical = math.ceil(scaled)
    if canonical > MAX_CANONICAL:
        raise QuantityError(f"{resource}: {shown!r} is more than any cluster has")
    return canonical


def parse_quantity(resource: str, value: object) -> int:
    """A Kubernetes quantity as the canonical integer of `resource` (see the module doc)."""
    try:
        amount = quantity.parse(value, count=quantity.is_count(resource))
    except QuantityError as exc:
        raise QuantityError(f"{resource}: {exc}") from None
    return to_canonical(resource, amount, shown=value)


def base_units(resource: str, amount: float) -> float:
    """A canonical amount in Kubernetes' base unit of `resource` (CPUs, bytes, GPUs, counts): the
    numbers Kueue's admission fair sharing weighs (Quantity.AsApproximateFloat64)."""
    if resource in (CPU, GPU):
        return amount / 1000
    if resource in _BYTE_RESOURCES or resource.startswith(HUGEPAGES_PREFIX):
        return amount * MIB
    return amount


def format_base_units(resource: str, amount: float) -> str:
    """A (fractional) amount in base units, readable: decayed usage of admission fair sharing."""
    if resource == CPU:
        return f"{round(amount * 1000)}m"
    if resource in _BYTE_RESOURCES or resource.startswith(HUGEPAGES_PREFIX):
        return f"{_trimmed(amount / 2**30)}Gi"
    return _trimmed(amount)


def _trimmed(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


def format_quantity(resource: str, amount: int) -> str:
    """The canonical integer back as a readable Kubernetes quantity."""
    if resource == GPU:
        return _plain(Decimal(amount) / 1000)
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in _BYTE_RESOURCES or resource.startswith(HUGEPAGES_PREFIX):
        if amount % (1 << 20) == 0 and amount:
            return f"{amount >> 20}Ti"
        if amount % (1 << 10) == 0 and amount:
            return f"{amount >> 10}Gi"
        return f"{amount}Mi"
    return str(amount)


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f")


@dataclass(frozen=True, slots=True)
class Demand:
    """What a workload asks for in total, before a cluster queue decides how to count MIG."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0
    mig: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # profile -> instances
    pods: int = 0
    extended: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # resource -> amount

    @classmethod
    def of_pods(cls, pods: Iterable[tuple[PodRequest, int]]) -> Demand:
        """The sum over (pod template, count) pairs."""
        cpu = memory = gpu = n = 0
        mig: dict[str, int] = {}
        extended: dict[str, int] = {}
        for pod, count in pods:
            n += count
            cpu += pod.cpu_milli * count
            memory += pod.memory_mib * count
            gpu += pod.gpu_demand_milli * count
            if pod.mig_count:
                mig[pod.mig_profile] = mig.get(pod.mig_profile, 0) + pod.mig_count * count
            for resource, amount in pod.extended.items():
                extended[resource] = extended.get(resource, 0) + amount * count
        return cls(cpu, memory, gpu, MappingProxyType(mig), n, MappingProxyType(extended))

    def __add__(self, other: Demand) -> Demand:
        return Demand(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_milli + other.gpu_milli,
            MappingProxyType(_sum(self.mig, other.mig)),
            self.pods + other.pods,
            MappingProxyType(_sum(self.extended, other.extended)),
        )

    def amounts(self, covered: Iterable[str] = ()) -> dict[str, int]:
        """Resource -> canonical amount, counting MIG instances by their own resource when it is
        `covered`, else as GPU slices (module doc). Zero amounts are left out."""
        covered = set(covered)
        out = {CPU: self.cpu_milli, MEMORY: self.memory_mib, GPU: self.gpu_milli, PODS: self.pods}
        out.update(self.extended)
        for profile, n in self.mig.items():
            resource = mig_resource(profile)
            if resource in covered:
                out[resource] = out.get(resource, 0) + n
            else:
                out[GPU] += n * mig_gpu_milli(profile)
        return {resource: amount for resource, amount in out.items() if amount > 0}


def _sum(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for key, n in b.items():
        out[key] = out.get(key, 0) + n
    return out
