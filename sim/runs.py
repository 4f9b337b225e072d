"""The runs of the pods a simulated cluster submits (sim.models.PodSimulation): recorded with their
workload, read by the embedded simulator, and handed to the Kubernetes side as the annotations the
simulated kubelet runs a pod by (KUBE_POD_ANNOTATIONS, which kube.materialize asks)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from scheduling.models import Pod, Workload
from sim.kubernetes.kubelet import DURATION, UTILIZATION
from sim.models import PodSimulation
from sim.utilization import ProfileError, UtilizationProfile

logger = logging.getLogger(__name__)


def simulation_of(pod: Pod) -> PodSimulation | None:
    """The pod's run, or None for a pod no simulated cluster submitted (it runs until stopped)."""
    try:
        return pod.sim
    except PodSimulation.DoesNotExist:
        return None


def simulations_record(
    workload: Workload,
    *,
    duration_s: float,
    arrival_s: float | None = None,
    utilization: Mapping[str, Any] | None = None,
) -> list[PodSimulation]:
    """How every pod of a just submitted workload runs (call it in the submit's transaction)."""
    return PodSimulation.objects.bulk_create(
        PodSimulation(
            pod=pod,
            arrival_s=arrival_s,
            duration_s=duration_s,
            utilization=dict(utilization or {}),
        )
        for pod in workload.pods.order_by("id")
    )


def kube_annotations(pods: Sequence[Pod]) -> dict[int, dict[str, str]]:
    """KUBE_POD_ANNOTATIONS: per pod id, what the simulated kubelet runs a pod by (how long, how
    busy its GPUs), for the pods the Kubernetes side is about to make."""
    found: dict[int, dict[str, str]] = {}
    for run in PodSimulation.objects.filter(pod__in=list(pods)):
        annotations = {}
        if run.duration_s:
            annotations[DURATION] = _seconds(run.duration_s)
        if run.utilization:
            utilization = _utilization_annotation(run.utilization)
            if utilization is not None:
                annotations[UTILIZATION] = utilization
        found[run.pod_id] = annotations
    return found


def _seconds(value: float) -> str:
    """Whole seconds without a fraction ("60"), others as they are ("2.5")."""
    return str(int(value)) if value.is_integer() else str(value)


def _utilization_annotation(stored: Any) -> str | None:
    """A stored utilization profile (its field names) in the spelling the simulated kubelet reads
    (the specs': `periodSeconds`); None, with a warning, for a profile that is not one."""
    try:
        profile = UtilizationProfile.from_json(stored)
    except (TypeError, ProfileError) as exc:
        logger.warning("utilization profile %r left out: %s", stored, exc)
        return None
    return json.dumps(profile.as_spec())
