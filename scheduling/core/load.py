"""Estimated GPU load from DCGM measurements, corrected for pods placed since the measurement.

Koordinator's LoadAware estimate (shared/reference/scheduler-anchors.md §1), per GPU instead of per
node: busy = measured - what DCGM already attributes to recently placed pods + max(expected,
measured) for each of them. A pod placed a moment ago shows as idle in the last scrape; without the
correction a burst of pods would all land on the same idle-looking GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from scheduling.core.snapshot import ClusterSnapshot, FloatArray


@dataclass(frozen=True, slots=True)
class GpuMeasurement:
    busy: float  # share of the GPU busy, 0..1 (DCGM_FI_PROF_GR_ENGINE_ACTIVE, else GPU_UTIL / 100)
    age_s: float


@dataclass(frozen=True, slots=True)
class RecentPlacement:
    """A pod placed too recently for the measurement to show it in full."""

    node: str
    gpus: tuple[int, ...]
    expected: float  # busy share of each of its GPUs it is expected to reach
    measured: float = 0.0  # what the last measurement already attributes to it, per GPU


def estimated_load(
    snapshot: ClusterSnapshot,
    measurements: Mapping[tuple[str, int], GpuMeasurement],
    recent: Iterable[RecentPlacement] = (),
) -> tuple[FloatArray, FloatArray]:
    """(load per node and GPU, measurement age per node). Unmeasured GPUs keep the snapshot's
    request-based estimate; a node's age is its oldest GPU's (inf when none was measured)."""
    load = snapshot.gpu_load.copy()
    age = np.full(len(snapshot), np.inf)
    for (node, gpu), measurement in measurements.items():
        i = snapshot.index.get(node)
        if i is None or gpu >= load.shape[1]:
            continue
        load[i, gpu] = measurement.busy
        age[i] = measurement.age_s if np.isinf(age[i]) else max(age[i], measurement.age_s)
    for placement in recent:
        i = snapshot.index.get(placement.node)
        if i is None or np.isinf(age[i]):
            continue
        for gpu in placement.gpus:
            load[i, gpu] += max(placement.expected, placement.measured) - placement.measured
    return load, age
