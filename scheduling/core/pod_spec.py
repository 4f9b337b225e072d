"""What a Kubernetes PodSpec asks for, by the one set of rules the Kubernetes side
(kube.translate) and the REST API's PodTemplateSpec form (api/views/workload_docs.py) both read it
with: the effective requests as the kubelet counts them (regular containers summed, restartable
init containers as sidecars, at least each regular init container with the sidecars started
before it, plus pod overhead), each quantity by the bounded parser (scheduling.core.quantity), and
the names of the annotations gpusched reads on a pod. Pure: no Django, no I/O.

The simulated kubelet (sim.kubernetes) counts requests by its own reading of the kubelet's rule,
so that it checks these rules instead of echoing them.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from scheduling.core import quantity

SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"  # time-slicing with renameByDefault
ANNOTATION_POLICY = "gpusched.io/topology-policy"
ANNOTATION_SCOPE = "gpusched.io/topology-scope"
ANNOTATION_MODELS = "gpusched.io/gpu-models"
ANNOTATION_SERVICE_CLASS = "gpusched.io/service-class"


class TranslationError(ValueError):
    """An object gpusched cannot represent; the message says which field and why."""


def effective_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """The kubelet's sum: regular containers plus restartable init containers (sidecars), at
    least each regular init container plus the sidecars started before it, plus pod overhead."""
    total: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in spec.get("initContainers") or []:
        asked = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, asked)
        else:
            for name in set(asked) | set(sidecars):
                need = asked.get(name, Fraction(0)) + sidecars.get(name, Fraction(0))
                init_peak[name] = max(init_peak.get(name, Fraction(0)), need)
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    _add(total, sidecars)
    for name, peak in init_peak.items():
        total[name] = max(total.get(name, Fraction(0)), peak)
    overhead = spec.get("overhead") or {}
    _add(total, {str(k): resource_quantity(v, str(k)) for k, v in overhead.items()})
    return total


def resource_quantity(value: object, name: str) -> Fraction:
    """A quantity of resource `name`, by the bounded parser every side uses (counts of devices
    take plain numbers)."""
    try:
        return quantity.parse(value, count=quantity.is_count(name) or name == SHARED_GPU_RESOURCE)
    except quantity.QuantityError as exc:
        raise TranslationError(f"{name}: {exc}") from None


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    asked = dict(resources.get("limits") or {})  # requests default to limits
    asked.update(resources.get("requests") or {})
    return {str(k): resource_quantity(v, str(k)) for k, v in asked.items()}


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Fraction(0)) + value
