"""Stranded GPUs: whole GPUs free on nodes open to placement where no waiting GPU pod fits now.

Whether a pod fits is the profile's own PreFilter and Filter phases (`Framework.filter_nodes`) on
the scheduler's snapshot: the judgement of size, CPU and memory beside the GPUs, topology policy
and scope, MIG, GPU model, node selector and taints that placement applies, on what each node has
left. Cordoned and quarantined nodes are not counted (nothing is placed there now).

The waiting pods come grouped by shape, most common first; each shape is one vectorised pass over
all nodes. The walk stops once every node with a free GPU has a shape that fits it, and after
MAX_SHAPES shapes at the latest, so a queue of many odd shapes bounds the work (the answer then
says how many shapes were judged, and counts as stranded what none of those fits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest

MAX_SHAPES = 64


@dataclass(frozen=True)
class Stranded:
    gpus: int  # whole GPUs free on nodes no judged shape fits
    nodes: int  # the nodes they are on
    shapes: int  # distinct shapes among the waiting GPU pods
    judged: int  # how many of them were judged (fewer: every node was fitted, or MAX_SHAPES)


def stranded_gpus(
    framework: Framework,
    snapshot: ClusterSnapshot,
    shapes: Sequence[PodRequest],
    max_shapes: int = MAX_SHAPES,
) -> Stranded:
    """`shapes`: one pod of each distinct shape that waits, most common first. No shape waiting,
    nothing is stranded: free GPUs are then idle, not unusable."""
    if not shapes:
        return Stranded(gpus=0, nodes=0, shapes=0, judged=0)
    open_to_placement = ~snapshot.cordoned & ~snapshot.quarantined
    unfitted = open_to_placement & (snapshot.full_free_count > 0)
    judged = 0
    for shape in shapes[:max_shapes]:
        if not unfitted.any():
            break
        judged += 1
        decision, feasible = framework.filter_nodes(_alone(shape), snapshot)
        if decision.status.is_success:
            unfitted[feasible] = False
    return Stranded(
        gpus=int(snapshot.full_free_count[unfitted].sum()),
        nodes=int(np.count_nonzero(unfitted)),
        shapes=len(shapes),
        judged=judged,
    )


def _alone(pod: PodRequest) -> PodRequest:
    """One member judged alone, on no node in particular: whether a whole gang fits, and where a
    preemption nominated it, are placement's concern."""
    return replace(
        pod,
        uid=f"stranded-{pod.uid}",
        gang=None,
        nominated_node="",
    )
