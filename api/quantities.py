"""Kubernetes resource names and quantities as the API accepts them, in the units the scheduler
counts: `cpu` in milli-CPU, `memory` in MiB, `nvidia.com/gpu` whole GPUs (in quotas: milli-GPU,
so GPU shares count), `gpusched.io/gpu-milli` a share of one GPU in 1..999,
`nvidia.com/mig-<profile>` MIG instances, `pods` a count. Any other valid resource name (extended
resources such as `example.com/credits`, `ephemeral-storage`, `hugepages-<size>`) is counted
against queue quota in the units of scheduling.core.queueing.resources. The numbers themselves are
read by the one bounded parser of scheduling/core/quantity.py, as everywhere else."""

from __future__ import annotations

from scheduling.core import quantity, resource_requests
from scheduling.core.quantity import CPU, MEMORY, PODS, QuantityError, pod_amount
from scheduling.core.queueing import resources as queue_resources
from scheduling.core.resource_requests import extended as counted_only
from scheduling.core.resource_requests import mig_profile, unknown_resource_message

__all__ = [
    "CPU",
    "MEMORY",
    "PODS",
    "QuantityError",
    "counted_only",
    "extended_amount",
    "known_resource",
    "mig_profile",
    "pod_amount",
    "quota_amount",
    "unknown_resource_message",
]


def quota_amount(resource: str, value: object) -> int:
    """A quota or limit of `resource` in canonical units: GPUs in milli-GPUs (shares count)."""
    if counted_only(resource):
        return extended_amount(resource, value)
    return quantity.quota_amount(resource, value)


def extended_amount(resource: str, value: object) -> int:
    """One pod's request of a counted-only resource, in the queues' canonical units."""
    try:
        return queue_resources.parse_quantity(resource, value)
    except QuantityError as exc:
        raise QuantityError(str(exc).removeprefix(f"{resource}: ")) from None


def known_resource(resource: str, *, quota: bool = False) -> bool:
    return resource_requests.known_placed(resource) or (quota and resource == PODS)
