"""A Pod row's resources: the one conversion each way between the Pod model's columns and the
core's Resources (scheduling/core/types.py). A new resource is a column here, nowhere else in the
shell."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from scheduling.core.types import Resources
from scheduling.models import Pod

# The Pod columns that hold its resources, in Resources' field order (for values_list reads).
COLUMNS = (
    "cpu_milli",
    "memory_mib",
    "gpus",
    "gpu_milli",
    "mig_profile",
    "mig_count",
    "extended_resources",
)


def resources_of(pod: Pod) -> Resources:
    return from_values([getattr(pod, column) for column in COLUMNS])


def from_values(values: Sequence[Any]) -> Resources:
    """Resources from the values of COLUMNS, in that order (a `values_list(*COLUMNS)` row)."""
    cpu_milli, memory_mib, gpus, gpu_milli, mig_profile, mig_count, extended = values
    return Resources(
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpus=gpus,
        gpu_milli=gpu_milli,
        mig_profile=mig_profile,
        mig_count=mig_count,
        extended=MappingProxyType(dict(extended or {})),
    )


def row_fields(resources: Resources) -> dict[str, Any]:
    """The Pod columns for `resources`: `Pod(**row_fields(r), ...)`."""
    return {
        "cpu_milli": resources.cpu_milli,
        "memory_mib": resources.memory_mib,
        "gpus": resources.gpus,
        "gpu_milli": resources.gpu_milli,
        "mig_profile": resources.mig_profile,
        "mig_count": resources.mig_count,
        "extended_resources": dict(resources.extended),
    }
