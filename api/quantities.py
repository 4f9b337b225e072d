"""Kubernetes resource names and quantities as the API accepts them, in the units the scheduler
counts: `cpu` in milli-CPU, `memory` in MiB, `nvidia.com/gpu` whole GPUs (in quotas: milli-GPU,
so GPU shares count), `gpusched.io/gpu-milli` a share of one GPU in 1..999,
`nvidia.com/mig-<profile>` MIG instances, `pods` a count. Any other valid resource name (extended
resources such as `example.com/credits`, `ephemeral-storage`, `hugepages-<size>`) is counted
against queue quota in the units of scheduling.core.queueing.resources. The numbers themselves are
read by the one bounded parser of scheduling/core/quantity.py, as everywhere else."""

from __future__ import annotations

import re

from scheduling.core import quantity
from scheduling.core.quantity import CPU, MEMORY, PODS, QuantityError, pod_amount
from scheduling.core.queueing import resources as queue_resources
from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE, MIG_RESOURCE_PREFIX

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

MIG_PROFILE = re.compile(r"^[1-9][0-9]?g\.[1-9][0-9]{0,3}gb(\+me)?$")
POD_RESOURCES = (CPU, MEMORY, GPU_RESOURCE, GPU_MILLI_RESOURCE)


def mig_profile(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb` -> `1g.10gb`; None when `resource` is not a MIG resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    return resource[len(MIG_RESOURCE_PREFIX) :]


def counted_only(resource: str) -> bool:
    """A valid resource name the scheduler counts against quota but does not place (module doc)."""
    return (
        queue_resources.is_extended(resource)
        and queue_resources.resource_name_error(resource) is None
    )


def extended_amount(resource: str, value: object) -> int:
    """One pod's request of a counted-only resource, in the queues' canonical units."""
    try:
        return queue_resources.parse_quantity(resource, value)
    except QuantityError as exc:
        raise QuantityError(str(exc).removeprefix(f"{resource}: ")) from None


def quota_amount(resource: str, value: object) -> int:
    """A quota or limit of `resource` in canonical units: GPUs in milli-GPUs (shares count)."""
    if counted_only(resource):
        return extended_amount(resource, value)
    return quantity.quota_amount(resource, value)


def known_resource(resource: str, *, quota: bool = False) -> bool:
    if resource in POD_RESOURCES or (quota and resource == PODS):
        return True
    profile = mig_profile(resource)
    return profile is not None and MIG_PROFILE.match(profile) is not None


def unknown_resource_message(resource: str, *, quota: bool = False) -> str:
    profile = mig_profile(resource)
    if profile is not None:
        return f"unknown MIG profile {profile!r} (profiles look like 1g.10gb or 3g.40gb)"
    known = ", ".join((*POD_RESOURCES, "nvidia.com/mig-<profile>", *((PODS,) if quota else ())))
    return f"unknown resource {resource!r} (known: {known})"
