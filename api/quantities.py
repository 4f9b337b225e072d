"""Kubernetes resource names and quantities as the API accepts them, in the units the scheduler
counts: `cpu` in milli-CPU, `memory` in MiB, `nvidia.com/gpu` whole GPUs (in quotas: milli-GPU,
so GPU shares count), `gpusched.io/gpu-milli` a share of one GPU in 1..999,
`nvidia.com/mig-<profile>` MIG instances, `pods` a count. Any other valid resource name (extended
resources such as `example.com/credits`, `ephemeral-storage`, `hugepages-<size>`) is counted
against queue quota in the units of scheduling.core.queueing.resources, which parses it."""

from __future__ import annotations

import math
import re
from decimal import Decimal

from kubernetes.utils import parse_quantity

from scheduling.core.queueing import resources as queue_resources
from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE, MIG_RESOURCE_PREFIX

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
MIG_PROFILE = re.compile(r"^[1-9][0-9]?g\.[1-9][0-9]{0,3}gb(\+me)?$")
POD_RESOURCES = (CPU, MEMORY, GPU_RESOURCE, GPU_MILLI_RESOURCE)
MAX_TEXT = 64
# Far beyond any node, small enough for every database column they land in.
MAX_CPU_MILLI = 10**9
MAX_MEMORY_MIB = 2**40
MAX_GPUS = 1024
MAX_MIG = 64
MAX_PODS = 10**6


class QuantityError(ValueError):
    """The message is shown to the client under the field's path."""


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
    text = str(value).strip() if isinstance(value, str | int | float) else ""
    if not text or len(text) > MAX_TEXT or isinstance(value, bool):
        raise QuantityError(f"{str(value)[:MAX_TEXT]!r} is not a quantity (e.g. '8', '1k')")
    try:
        return queue_resources.parse_quantity(resource, value)
    except queue_resources.QuantityError as exc:
        raise QuantityError(str(exc)) from None


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


def parse(value: object) -> Decimal:
    """A Kubernetes quantity (`8`, `500m`, `64Gi`, `1e3`) as a non-negative, finite Decimal."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError("must be a quantity string such as '8', '500m' or '64Gi'")
    text = str(value).strip()
    if not text or len(text) > MAX_TEXT:
        raise QuantityError(f"{text[:MAX_TEXT]!r} is not a quantity (e.g. '8', '500m', '64Gi')")
    try:
        amount = parse_quantity(text)
    except (ValueError, ArithmeticError):
        raise QuantityError(f"{text!r} is not a quantity (e.g. '8', '500m', '64Gi')") from None
    if not amount.is_finite():
        raise QuantityError(f"{text!r} is not a finite quantity")
    if amount < 0:
        raise QuantityError(f"must not be negative (got {text!r})")
    return amount


def _whole(amount: Decimal, what: str) -> int:
    if amount != amount.to_integral_value():
        raise QuantityError(f"must be a whole number of {what} (got {amount.normalize()})")
    return int(amount)


def _bounded(value: int, limit: int, what: str) -> int:
    if value > limit:
        raise QuantityError(f"{value} {what} is more than any cluster has (at most {limit})")
    return value


def pod_amount(resource: str, value: object) -> int:
    """One pod's request of `resource` in scheduler units (see the module doc)."""
    amount = parse(value)
    if resource == CPU:
        return _bounded(math.ceil(amount * 1000), MAX_CPU_MILLI, "milli-CPU")
    if resource == MEMORY:
        return _bounded(math.ceil(amount / 2**20), MAX_MEMORY_MIB, "MiB")
    if resource == GPU_RESOURCE:
        if 0 < amount < 1:
            raise QuantityError(
                f"whole GPUs only; ask for a share with {GPU_MILLI_RESOURCE} (e.g. '500')"
            )
        return _bounded(_whole(amount, "GPUs"), MAX_GPUS, "GPUs")
    if resource == GPU_MILLI_RESOURCE:
        milli = _whole(amount, "milli-GPUs")
        if milli >= 1000:
            raise QuantityError(
                f"a share is 1..999 milli-GPUs; ask for whole GPUs with {GPU_RESOURCE}"
            )
        return milli
    if mig_profile(resource) is not None:
        return _bounded(_whole(amount, "MIG instances"), MAX_MIG, "MIG instances")
    raise QuantityError(unknown_resource_message(resource))


def quota_amount(resource: str, value: object) -> int:
    """A quota or limit of `resource` in canonical units: GPUs in milli-GPUs (shares count)."""
    if counted_only(resource):
        return extended_amount(resource, value)
    amount = parse(value)
    if resource == GPU_RESOURCE:
        return _bounded(math.ceil(amount * 1000), MAX_GPUS * 10**6, "milli-GPUs")
    if resource == PODS:
        return _bounded(_whole(amount, "pods"), MAX_PODS, "pods")
    return pod_amount(resource, value)
