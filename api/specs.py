"""A submitted workload's pod sets -> the scheduler's PodSetSpecs, checked against the tenant's
limits and against what the cluster has. Every problem is collected under its path in the request
(`podSets[0].template.resources.requests.nvidia.com/gpu`), so one 400 names them all.

No writes and no queries: the caller passes the tenant's `Limits` and the `ClusterLimits`."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from api import quantities as q
from api.exceptions import InvalidInput
from scheduling.core import domains, resource_requests
from scheduling.core.domains import DomainAsk
from scheduling.core.types import (
    GPU_MILLI_RESOURCE,
    GPU_RESOURCE,
    TopologyPolicy,
    TopologyScope,
)
from scheduling.pod_template import PodTemplate
from scheduling.services import PodSetSpec

_TOKEN = re.compile(r"[-_ ]+")


@dataclass(frozen=True)
class Limits:
    """A tenant's LimitRange, in scheduler units: resource -> amount (q.pod_amount)."""

    default_requests: Mapping[str, int] = field(default_factory=dict)
    min_per_pod: Mapping[str, int] = field(default_factory=dict)
    max_per_pod: Mapping[str, int] = field(default_factory=dict)
    # The same, as the admin wrote them, for messages and for filling in defaults.
    text: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    max_gpus_per_node: int
    mig_profiles: frozenset[str]
    shareable: bool


@dataclass(frozen=True)
class ClusterLimits:
    """What the registered nodes can offer at most (cordoned nodes included: they come back).
    With no nodes registered nothing is checked."""

    models: Mapping[str, ModelInfo] = field(default_factory=dict)
    max_cpu_milli: int = 0
    max_memory_mib: int = 0
    nodes: int = 0

    def resolve_model(self, wanted: str) -> list[str]:
        """GPU model names matching `wanted`: the exact name, else every model having it as a
        word (`H100` matches `NVIDIA-H100-80GB-HBM3`), case-insensitive."""
        if wanted in self.models:
            return [wanted]
        token = wanted.strip().lower()
        return sorted(
            m
            for m in self.models
            if token and (token in _TOKEN.split(m.lower()) or m.lower() == token)
        )


def pod_sets(
    raw_pod_sets: Sequence[Mapping[str, Any]],
    limits: Limits,
    cluster: ClusterLimits,
    topologies: Mapping[str, Sequence[str]] | None = None,
) -> tuple[list[PodSetSpec], list[dict[str, Any]]]:
    """The specs to submit and the normalized pod sets to store (defaults filled in);
    `topologies`: each Topology's levels, which a topology request's levels must be among.
    Raises InvalidInput naming every offending field."""
    errors: dict[str, list[str]] = defaultdict(list)
    specs: list[PodSetSpec] = []
    stored: list[dict[str, Any]] = []
    seen: set[str] = set()
    total = sum(int(raw["count"]) for raw in raw_pod_sets)
    if total > settings.MAX_PODS_PER_WORKLOAD:
        errors["podSets"].append(
            f"{total} pods in one workload; at most {settings.MAX_PODS_PER_WORKLOAD}"
            " (GPUSCHED_MAX_PODS_PER_WORKLOAD)"
        )
    for i, raw in enumerate(raw_pod_sets):
        path = f"podSets[{i}]"
        name = str(raw["name"])
        if name in seen:
            errors[f"{path}.name"].append(f"pod set {name!r} is listed twice")
        seen.add(name)
        count = int(raw["count"])
        min_count = raw.get("minCount")
        if min_count is not None and min_count > count:
            errors[f"{path}.minCount"].append(f"must be at most count ({count})")
        template, stored_template = _template(
            raw["template"], f"{path}.template", limits, cluster, errors
        )
        ask = _topology_request(raw.get("topologyRequest"), f"{path}.topologyRequest", topologies)
        if isinstance(ask, str):
            errors[f"{path}.topologyRequest"].append(ask)
            ask = None
        elif ask is not None and ask.slice_size and count % ask.slice_size:
            errors[f"{path}.topologyRequest.podSetSliceSize"].append(
                f"must divide count ({count}) into whole slices"
            )
        if ask is not None and min_count is None:
            min_count = count  # as Kueue's TAS places a pod set: whole, in its domains
        specs.append(
            PodSetSpec(name=name, count=count, template=template, min_count=min_count, topology=ask)
        )
        doc = {"name": name, "count": count, "minCount": min_count, "template": stored_template}
        if raw.get("topologyRequest"):
            doc["topologyRequest"] = dict(raw["topologyRequest"])
        stored.append(doc)
    if errors:
        raise InvalidInput(errors)
    return specs, stored


def _topology_request(
    raw: Mapping[str, Any] | None, path: str, topologies: Mapping[str, Sequence[str]] | None
) -> DomainAsk | str | None:
    """Kueue's PodSetTopologyRequest as the request the cycle places by (read as the pod-set
    annotations are: one reader), or what is wrong with it; a level must be one of a Topology's
    (the flavor, and so its Topology, is chosen at admission)."""
    if not raw:
        return None
    as_annotations = {
        annotation: str(raw[key]).lower() if key == "unconstrained" else str(raw[key])
        for key, annotation in (
            ("required", domains.REQUIRED_ANNOTATION),
            ("preferred", domains.PREFERRED_ANNOTATION),
            ("unconstrained", domains.UNCONSTRAINED_ANNOTATION),
            ("podSetSliceRequiredTopology", domains.SLICE_REQUIRED_ANNOTATION),
            ("podSetSliceSize", domains.SLICE_SIZE_ANNOTATION),
        )
        if raw.get(key) is not None
    }
    try:
        ask = domains.ask_of_annotations(as_annotations)
    except domains.DomainError as exc:
        return str(exc)
    known = sorted({level for levels in (topologies or {}).values() for level in levels})
    for level in (ask.level, ask.slice_level) if ask is not None else ():
        if level and level not in known:
            return f"no Topology has level {level!r} (levels: {', '.join(known) or 'none'})"
    return ask


def _template(
    raw: Mapping[str, Any],
    path: str,
    limits: Limits,
    cluster: ClusterLimits,
    errors: dict[str, list[str]],
) -> tuple[PodTemplate, dict[str, Any]]:
    requests_path = f"{path}.resources.requests"
    given: dict[str, Any] = dict((raw.get("resources") or {}).get("requests") or {})
    # LimitRange defaultRequest: what the template leaves out.
    for resource, text in limits.text.get("defaultRequests", {}).items():
        given.setdefault(resource, text)
    resources, problems = resource_requests.read(given)
    for resource, problem in problems.items():
        errors[f"{requests_path}.{resource}"].append(problem)
    amounts = resource_requests.amounts(resources)
    mig = {r: n for r, n in amounts.items() if q.mig_profile(r) is not None}
    _check_limits(amounts, requests_path, limits, errors)

    models: list[str] = []
    for j, wanted in enumerate(raw.get("gpuModels") or []):
        if not cluster.nodes:
            models.append(wanted)
            continue
        matches = cluster.resolve_model(wanted)
        if not matches:
            known = ", ".join(sorted(cluster.models)) or "none"
            errors[f"{path}.gpuModels[{j}]"].append(
                f"no node has GPU model {wanted!r} (models: {known})"
            )
        models.extend(m for m in matches if m not in models)
    if cluster.nodes:
        _check_cluster(amounts, mig, models, requests_path, cluster, errors)

    topology = raw.get("topology") or {}
    policy_text = topology.get("policy")
    policy = TopologyPolicy(policy_text) if policy_text else None
    scope_text = topology.get("scope")
    template = PodTemplate(
        resources=resources,
        gpu_models=tuple(models),
        topology_policy=policy,
        topology_scope=TopologyScope(scope_text) if scope_text else None,
        node_selector=dict(raw.get("nodeSelector") or {}),
        tolerations=tuple(dict(t) for t in raw.get("tolerations") or []),
    )
    stored: dict[str, Any] = {
        "resources": {"requests": {r: str(v) for r, v in given.items()}},
        "gpuModels": list(raw.get("gpuModels") or []),
        "topology": {
            **({"policy": policy.value} if policy else {}),
            **({"scope": scope_text} if scope_text else {}),
        },
    }
    if template.node_selector:
        stored["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        stored["tolerations"] = [dict(t) for t in template.tolerations]
    return template, stored


def _check_limits(
    amounts: Mapping[str, int], path: str, limits: Limits, errors: dict[str, list[str]]
) -> None:
    text = limits.text
    for resource, minimum in limits.min_per_pod.items():
        if amounts.get(resource, 0) < minimum:
            errors[f"{path}.{resource}"].append(
                f"below the tenant's minimum per pod ({resource}: {text['minPerPod'][resource]})"
            )
    for resource, maximum in limits.max_per_pod.items():
        if amounts.get(resource, 0) > maximum:
            errors[f"{path}.{resource}"].append(
                f"above the tenant's maximum per pod ({resource}: {text['maxPerPod'][resource]})"
            )


def _check_cluster(
    amounts: Mapping[str, int],
    mig: Mapping[str, int],
    models: Sequence[str],
    path: str,
    cluster: ClusterLimits,
    errors: dict[str, list[str]],
) -> None:
    """Requests no node could ever satisfy: say so now rather than leave them pending forever."""
    if amounts.get(q.CPU, 0) > cluster.max_cpu_milli:
        errors[f"{path}.cpu"].append(
            f"{amounts[q.CPU] / 1000:g} CPUs per pod: the largest node has "
            f"{cluster.max_cpu_milli / 1000:g}"
        )
    if amounts.get(q.MEMORY, 0) > cluster.max_memory_mib:
        errors[f"{path}.memory"].append(
            f"{amounts[q.MEMORY]}Mi per pod: the largest node has {cluster.max_memory_mib}Mi"
        )
    candidates = {m: cluster.models[m] for m in (models or cluster.models) if m in cluster.models}
    of_models = f" of model {', '.join(models)}" if models else ""
    gpus = amounts.get(GPU_RESOURCE, 0)
    if gpus:
        most = max((info.max_gpus_per_node for info in candidates.values()), default=0)
        if gpus > most:
            errors[f"{path}.{GPU_RESOURCE}"].append(
                f"{gpus} GPUs per pod: no node{of_models} has more than {most} GPUs"
            )
    if amounts.get(GPU_MILLI_RESOURCE, 0) and not any(i.shareable for i in candidates.values()):
        errors[f"{path}.{GPU_MILLI_RESOURCE}"].append(
            f"no node{of_models} shares its GPUs (time-slicing or MPS)"
        )
    for resource in mig:
        profile = q.mig_profile(resource)
        offered = sorted({p for info in candidates.values() for p in info.mig_profiles})
        if profile not in offered:
            errors[f"{path}.{resource}"].append(
                f"no node{of_models} offers MIG profile {profile} "
                f"(offered: {', '.join(offered) or 'none'})"
            )
