"""Kubernetes resource names and quantities as the API accepts them, in the units the scheduler
counts: `cpu` in milli-CPU, `memory` in MiB, `nvidia.com/gpu` whole GPUs (in quotas: milli-GPU,
so GPU shares count), `gpusched.io/gpu-milli` a share of one GPU in 1..999,
`nvidia.com/mig-<profile>` MIG instances, `pods` a count. The numbers themselves are read by the
one bounded parser of scheduling/core/quantity.py, as everywhere else."""

from __future__ import annotations

import re

from scheduling.core.quantity import (
    CPU,
    MEMORY,
    PODS,
    QuantityError,
    pod_amount,
    quota_amount,
)
from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE, MIG_RESOURCE_PREFIX

__all__ = [
    "CPU",
    "MEMORY",
    "PODS",
    "QuantityError",
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
