"""What the simulated kubelet reads of a pod, by its own reading of Kubernetes' rules, never by the
scheduler's (kube.translate, scheduling.core.pod_spec): a wrong rule there then shows as a pod
the kubelet refuses or runs otherwise, instead of passing on both sides.

- Effective requests, as https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/
  ("Resource sharing within containers") states them: app containers and sidecars (init
  containers with `restartPolicy: Always`) run together and add up; each other init container
  runs alone beside the sidecars started before it; the pod asks the larger of the two, plus its
  overhead. A container's requests default to its limits (the API server's defaulting).
  Quantities by the official client's parser (kubernetes.utils.parse_quantity).
- The annotations gpusched writes at bind naming the devices it chose (a device plugin that
  honours them reads them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from kubernetes.utils import parse_quantity

ANNOTATION_GPU_IDS = "gpusched.io/gpu-ids"  # "0,1,2,3"
ANNOTATION_MIG_SLOTS = "gpusched.io/mig-slots"  # "<gpu>:<slot>,..."
ANNOTATION_GPU_SHARE = "gpusched.io/gpu-share-milli"


def effective_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    running: dict[str, Fraction] = defaultdict(Fraction)  # together, once the pod has started
    init_peak: dict[str, Fraction] = defaultdict(Fraction)  # the most one init step needs
    sidecars: dict[str, Fraction] = defaultdict(Fraction)
    for container in spec.get("initContainers") or []:
        asked = _asked(container)
        if container.get("restartPolicy") == "Always":
            for resource, amount in asked.items():
                sidecars[resource] += amount
                running[resource] += amount
        else:
            for resource in set(sidecars) | set(asked):
                step = sidecars[resource] + asked.get(resource, Fraction(0))
                init_peak[resource] = max(init_peak[resource], step)
    for container in spec.get("containers") or []:
        for resource, amount in _asked(container).items():
            running[resource] += amount
    wanted = {r: max(running[r], init_peak[r]) for r in set(running) | set(init_peak)}
    for resource, amount in _quantities((spec.get("overhead") or {}).items()).items():
        wanted[resource] = wanted.get(resource, Fraction(0)) + amount
    return wanted


def _asked(container: Mapping[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return _quantities(asked.items())


def _quantities(items: Iterable[tuple[Any, Any]]) -> dict[str, Fraction]:
    return {str(name): Fraction(parse_quantity(value)) for name, value in items}
