"""Admission fair sharing (Kueue's UsageBasedAdmissionFairSharing,
site/content/en/docs/concepts/admission_fair_sharing.md): each LocalQueue keeps a decayed history
of the resources its admitted workloads used, and a ClusterQueue with
`admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}` admits first from the LocalQueue
that used least.

The arithmetic is Kueue's (pkg/util/admissionfairsharing/admission_fair_sharing.go):
- every `usageSamplingInterval` the history moves toward what the LocalQueue uses now:
  `consumed = consumed * (1 - a) + current * a` with `a = 1 - 0.5 ** (elapsed / usageHalfLifeTime)`
  (a half-life of 0 resets the history to nothing, as Kueue does);
- an admitted workload adds an entry penalty at once, `a(usageSamplingInterval) * its requests`,
  so a tenant that submits many workloads before the next sample does not get them all first;
- the LocalQueue's usage is `sum_r resourceWeights[r] * consumed[r]` (weight 1 unless configured),
  divided by its `fairSharing.weight` (weight 0: last of all).

Amounts are in Kubernetes' base units (CPUs, bytes, GPUs, counts), as Kueue weighs Quantities, so
resourceWeights mean what they mean in a Kueue configuration. The history is state the shell keeps
(a column per LocalQueue, sampled by a service) and passes in; nothing here has a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core.queueing.config import AdmissionFairSharing
from scheduling.core.queueing.quota import Usage
from scheduling.core.queueing.resources import base_units

Consumed = Mapping[str, float]  # resource -> amount in Kubernetes base units
_NONE: Mapping[str, Consumed] = MappingProxyType({})


@dataclass(frozen=True)
class FairUsageState:
    """What the shell keeps: the settings, and each LocalQueue's history ("namespace/name" ->
    consumed, entry penalties included)."""

    settings: AdmissionFairSharing = field(default_factory=AdmissionFairSharing)
    consumed: Mapping[str, Consumed] = field(default_factory=lambda: _NONE)


def alpha(elapsed_s: float, half_life_s: float) -> float:
    """The weight of the present after `elapsed_s` (0 with a half-life of 0, as in Kueue)."""
    if half_life_s <= 0:
        return 0.0
    return 1.0 - math.pow(0.5, max(0.0, elapsed_s) / half_life_s)


def decayed(
    consumed: Consumed, current: Consumed, elapsed_s: float, settings: AdmissionFairSharing
) -> dict[str, float]:
    """The history after `elapsed_s` during which the LocalQueue used `current`."""
    if settings.usage_half_life_s <= 0:
        return {}  # Kueue: "If set to 0, usage will be reset to 0 immediately"
    a = alpha(elapsed_s, settings.usage_half_life_s)
    out = {r: v * (1 - a) for r, v in consumed.items()}
    for resource, amount in current.items():
        out[resource] = out.get(resource, 0.0) + amount * a
    return {r: v for r, v in out.items() if v > 0}


def entry_penalty(request: Consumed, settings: AdmissionFairSharing) -> dict[str, float]:
    a = alpha(settings.usage_sampling_interval_s, settings.usage_half_life_s)
    return {r: v * a for r, v in request.items() if v * a > 0}


def add(consumed: Consumed, more: Consumed) -> dict[str, float]:
    out = dict(consumed)
    for resource, amount in more.items():
        out[resource] = out.get(resource, 0.0) + amount
    return out


def weighted_usage(consumed: Consumed, lq_weight: float, settings: AdmissionFairSharing) -> float:
    """The number LocalQueues are ordered by (lower first)."""
    if lq_weight <= 0:
        return math.inf
    total = sum(
        settings.resource_weights.get(resource, 1.0) * amount
        for resource, amount in sorted(consumed.items())
    )
    return total / lq_weight


def in_base_units(usage: Usage) -> dict[str, float]:
    """Quota usage per (flavor, resource), canonical, as base units per resource (flavors
    flattened, as Kueue's LocalQueue admitted usage is)."""
    out: dict[str, float] = {}
    for (_, resource), amount in usage.items():
        out[resource] = out.get(resource, 0.0) + base_units(resource, amount)
    return out


def amounts_in_base_units(amounts: Mapping[str, int]) -> dict[str, float]:
    return {resource: base_units(resource, amount) for resource, amount in amounts.items()}
