"""One pod's Resources as Kubernetes writes them, and back: a map of resource name to quantity (a
pod's summed container requests, a REST pod template's `resources.requests`).

The one conversion each way between Kubernetes quantities and the core's Resources, used by every
side: REST pod templates (api/specs.py), Kubernetes pods (kube/translate.py), pods written into a
cluster (kube/materialize.py) and the API's pod documents. Numbers are read by the one bounded
parser (scheduling/core/quantity.py); extended resources are counted in the queues' canonical
units (scheduling/core/queueing/resources.py).

Known names: `cpu`, `memory`, `nvidia.com/gpu` (whole GPUs), `gpusched.io/gpu-milli` (a share of
one GPU, 1..999), `nvidia.com/mig-<profile>` (instances of one profile); any other valid resource
name is extended (counted against quota, not placed). A pod asks for one GPU form at most.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction

from scheduling.core import limits, quantity
from scheduling.core.queueing import resources as queue_resources
from scheduling.core.types import (
    GPU_MILLI_RESOURCE,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    Resources,
)

CPU = quantity.CPU
MEMORY = quantity.MEMORY
MIG_PROFILE = re.compile(r"^[1-9][0-9]?g\.[1-9][0-9]{0,3}gb(\+me)?$")
PLACED = (CPU, MEMORY, GPU_RESOURCE, GPU_MILLI_RESOURCE)  # and nvidia.com/mig-<profile>
# Requested through the container's requests (overcommittable); the others through its limits
# (device plugins' and extended resources: requests default to limits, Kubernetes refuses a
# request without a limit for them).
REQUESTED = frozenset({CPU, MEMORY})


def mig_profile(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb` -> `1g.10gb`; None when `resource` is not a MIG resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    return resource[len(MIG_RESOURCE_PREFIX) :]


def extended(resource: str) -> bool:
    """A valid resource name counted against quota only (not placed on nodes)."""
    return (
        queue_resources.is_extended(resource)
        and queue_resources.resource_name_error(resource) is None
    )


def unknown_resource_message(resource: str, *, quota: bool = False) -> str:
    profile = mig_profile(resource)
    if profile is not None:
        return f"unknown MIG profile {profile!r} (profiles look like 1g.10gb or 3g.40gb)"
    pods = (quantity.PODS,) if quota else ()
    known = ", ".join((*PLACED, "nvidia.com/mig-<profile>", *pods))
    return f"unknown resource {resource!r} (known: {known})"


def known_placed(resource: str) -> bool:
    profile = mig_profile(resource)
    return resource in PLACED or (profile is not None and MIG_PROFILE.match(profile) is not None)


def read(requests: Mapping[str, object]) -> tuple[Resources, dict[str, str]]:
    """`requests` (resource name -> quantity text, or an exact amount already parsed) as Resources,
    with what is wrong with each resource that cannot be used (resource name -> message, without
    the name); the Resources leave those out. Zero amounts ask for nothing."""
    problems: dict[str, str] = {}
    placed: dict[str, int] = {}
    counted: dict[str, int] = {}
    for resource, value in requests.items():
        if not (known_placed(resource) or extended(resource)):
            problems[resource] = unknown_resource_message(resource)
            continue
        try:
            amount = _exact(resource, value)
            if extended(resource):
                shown = value if not isinstance(value, Fraction) else f"{float(value):g}"
                units = queue_resources.to_canonical(resource, amount, shown=shown)
            else:
                units = quantity.pod_units(resource, amount)
        except quantity.QuantityError as exc:
            problems[resource] = str(exc).removeprefix(f"{resource}: ")
            continue
        if units > 0:
            (counted if extended(resource) else placed)[resource] = units
    for resource in sorted(counted)[limits.MAX_RESOURCE_ENTRIES :]:
        problems[resource] = f"at most {limits.MAX_RESOURCE_ENTRIES} extended resources"
        del counted[resource]
    mig = sorted(r for r in placed if mig_profile(r) is not None)
    forms = [r for r in (GPU_RESOURCE, GPU_MILLI_RESOURCE) if r in placed] + mig
    for extra in forms[1:]:
        problems[extra] = (
            f"ask for whole GPUs, a GPU share or one MIG profile, not several (not also {forms[0]})"
        )
        del placed[extra]
    mig_asked = next((r for r in mig if r in placed), "")
    return Resources(
        cpu_milli=placed.get(CPU, 0),
        memory_mib=placed.get(MEMORY, 0),
        gpus=placed.get(GPU_RESOURCE, 0),
        gpu_milli=placed.get(GPU_MILLI_RESOURCE, 0),
        mig_profile=mig_profile(mig_asked) or "",
        mig_count=placed.get(mig_asked, 0),
        extended=counted,
    ), problems


def amounts(resources: Resources) -> dict[str, int]:
    """`resources` by Kubernetes resource name, in the scheduler's units (milli-CPU, MiB, GPUs,
    milli-GPUs, MIG instances, extended resources' canonical units): `cpu` and `memory` always,
    the rest when asked for."""
    out = {CPU: resources.cpu_milli, MEMORY: resources.memory_mib}
    if resources.gpus:
        out[GPU_RESOURCE] = resources.gpus
    if resources.gpu_milli:
        out[GPU_MILLI_RESOURCE] = resources.gpu_milli
    if resources.mig_count:
        out[MIG_RESOURCE_PREFIX + resources.mig_profile] = resources.mig_count
    for resource, amount in sorted(resources.extended.items()):
        if amount:
            out[resource] = amount
    return out


def write(resources: Resources) -> dict[str, str]:
    """`resources` as Kubernetes quantities (the names of `amounts`); read(write(r)) is r. The
    queues' canonical units are a pod's for every resource but `nvidia.com/gpu` (milli there)."""
    return {
        resource: str(n)
        if resource == GPU_RESOURCE
        else queue_resources.format_quantity(resource, n)
        for resource, n in amounts(resources).items()
    }


def _exact(resource: str, value: object) -> Fraction:
    if isinstance(value, Fraction):
        return value
    return quantity.parse(value, count=quantity.is_count(resource))
