"""Which pods hold which GPUs, as dcgm-exporter labels them (`pod`, `namespace`:
reference/wire-formats.md §1, read by telemetry.dcgm.pod_of), and the ingester's one extension
point for them.

Telemetry is a leaf: it knows nothing of what the scheduler recorded. Each cycle the ingester hands
the holders it read to the check the project names in TELEMETRY_HOLDERS_CHECK (gpusched/settings.py
names scheduling.services.assignments_reconcile, which compares them with the recorded GPU ids and
corrects the record) and counts the mismatches it answers with. Unset, the ingester only stores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from telemetry.batch import GpuBatch, GpuSample

PodName = tuple[str, str, str]  # (node, namespace, pod)
Holders = Mapping[PodName, tuple[int, ...]]  # the whole GPU indices each pod holds, sorted


class Mismatch(Protocol):
    @property
    def node(self) -> str: ...
    @property
    def pod_uid(self) -> str: ...
    @property
    def observed(self) -> tuple[int, ...]: ...
    def describe(self) -> str: ...


class Checked(Protocol):
    @property
    def mismatches(self) -> Sequence[Mismatch]: ...
    @property
    def corrected(self) -> int: ...
    @property
    def refused(self) -> Mapping[str, str] | None: ...  # pod uid -> why not corrected


class HoldersCheck(Protocol):
    def __call__(self, observed: Holders, /) -> Checked: ...


def holders_check() -> HoldersCheck | None:
    """The check TELEMETRY_HOLDERS_CHECK names (a dotted path), or None."""
    path = getattr(settings, "TELEMETRY_HOLDERS_CHECK", "")
    return import_string(path) if path else None


def observed_from_samples(
    samples: GpuBatch | Iterable[GpuSample],
) -> dict[PodName, tuple[int, ...]]:
    """The whole GPUs each labelled pod holds, by node (MIG instances are left out): read from
    the batch's columns."""
    batch = samples if isinstance(samples, GpuBatch) else GpuBatch.from_samples(samples)
    found: dict[PodName, set[int]] = defaultdict(set)
    for node, namespace, pod, mig_instance, index in zip(
        batch.node, batch.namespace, batch.pod, batch.mig_instance, batch.gpu_index, strict=True
    ):
        if pod and not mig_instance:
            found[(node, namespace, pod)].add(index)
    return {name: tuple(sorted(gpus)) for name, gpus in found.items()}
