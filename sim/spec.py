"""Simulated cluster specs (YAML): node pools, and where workloads come from.

    nodePools:
    - {name: h100, count: 4, topology: dgx-h100}        # CPU, memory, GPU model from the preset
    - {name: a100-mig, count: 1, topology: dgx-a100, sharing: mig,
       migLayout: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
    - name: tas                                         # nodes spread over topology domains
      count: 64
      topology: dgx-h100
      domains:
        levels:                                         # outermost first, as Kueue's Topology
        - {label: cloud.provider.com/topology-block, count: 2, prefix: b}
        - {label: cloud.provider.com/topology-rack, count: 4, prefix: r}   # per block
        nvlink: cloud.provider.com/topology-rack       # one multi-node NVLink domain per rack
    workload:
      seed: 1
      tenants:
      - name: vision
        arrivalsPerHour: 12
        priority: 100
        serviceClass: batch
        durationMinutes: 40
        shapes:
        - {weight: 3, pods: 1, gpus: 4, topology: {policy: single-numa-node}}
        - {weight: 1, pods: 2, gpus: 8, topology: {policy: restricted, scope: nvlink}}
        utilization: {kind: constant, mean: 0.85}
      # or, instead of tenants: philly: {path: data/philly.csv, maxGpusPerPod: 8}

A pool with `domains` is laid out over nested topology domains, in order: its first
count/(product of the level counts) nodes in the first innermost domain, and so on. Each node
carries one label per level, valued `<prefix><n>` from 1 (values repeat across parents, as in
Kueue's Topology Aware Scheduling examples: rack `r1` exists in block `b1` and in `b2`), and,
with `nvlink`, GPU Feature Discovery's `nvidia.com/gpu.clique` = `<clusterUUID>.<cliqueId>` (one
cluster UUID per domain of that level: a multi-node NVLink domain such as a GB200 NVL72 rack). The
pool becomes one pool per innermost domain, named `<pool>-<value>-<value>` (its nodes
`<pool>-b1-r1-0000`, ...), each labelled `gpusched.io/pool: <pool>`, so the database side and the
simulated Kubernetes label the same nodes alike.

Every key is checked; an unknown or malformed one is an error that names it.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any

from scheduling.core import yaml_documents
from scheduling.core.domains import DomainAsk
from scheduling.core.types import (
    Resources,
    ServiceClass,
    SharingMode,
    TopologyPolicy,
    TopologyScope,
)
from sim.cluster import PRESETS, NodePool
from sim.utilization import SPEC_KEYS, ProfileError, UtilizationProfile

SPEC_DIR = Path(__file__).resolve().parent / "specs"
# GPU Feature Discovery's label for a multi-node NVLink domain, `<clusterUUID>.<cliqueId>`
# (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md and internal/lm/imex.go).
CLIQUE_LABEL = "nvidia.com/gpu.clique"
POOL_LABEL = "gpusched.io/pool"


class SpecError(ValueError):
    """A cluster spec that cannot be used; the message names the offending key."""


@dataclass(frozen=True)
class ShapeSpec:
    weight: float = 1.0
    pods: int = 1
    resources: Resources = Resources(cpu_milli=4000, memory_mib=32_768)  # MIG: one instance
    gpu_models: tuple[str, ...] = ()
    topology_policy: TopologyPolicy = TopologyPolicy.NONE
    topology_scope: TopologyScope | None = None
    # Where across nodes its pod set goes (Kueue TAS); set by experiments, not read from YAML.
    pod_set_topology: DomainAsk | None = None


@dataclass(frozen=True)
class TenantSpec:
    name: str
    arrivals_per_hour: float
    shapes: tuple[ShapeSpec, ...]
    priority: int = 0
    service_class: ServiceClass = ServiceClass.BATCH
    duration_s: float = 1800.0
    utilization: UtilizationProfile = field(default_factory=UtilizationProfile)


@dataclass(frozen=True)
class PhillySpec:
    path: Path
    max_gpus_per_pod: int = 8


@dataclass(frozen=True)
class ClusterSpec:
    pools: tuple[NodePool, ...]
    tenants: tuple[TenantSpec, ...] = ()
    philly: PhillySpec | None = None
    seed: int = 0


def load_spec(name_or_path: str) -> ClusterSpec:
    """A shipped spec by name (`demo`) or a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SPEC_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in SPEC_DIR.glob("*.yaml")))
        raise SpecError(f"no cluster spec {name_or_path!r} (shipped: {shipped})")
    try:
        doc = yaml_documents.load_one(path.read_text())
    except yaml_documents.YamlError as exc:
        raise SpecError(f"{path}: {exc}") from exc
    return parse_spec(doc, base=path.parent)


def parse_spec(doc: object, *, base: Path = Path(".")) -> ClusterSpec:
    top = _map(doc, "spec", {"nodePools", "workload"})
    pools = tuple(
        pool
        for k, item in enumerate(_list(top.get("nodePools"), "nodePools"))
        for pool in _pools(item, f"nodePools[{k}]")
    )
    if not pools:
        raise SpecError("nodePools must list at least one pool")
    names = [pool.name for pool in pools]
    if len(set(names)) != len(names):
        clash = next(name for name in names if names.count(name) > 1)
        raise SpecError(f"nodePools: pool names must be unique ({clash!r} twice)")
    workload = _map(top.get("workload", {}), "workload", {"seed", "tenants", "philly"})
    seed = _int(workload.get("seed", 0), "workload.seed")
    tenants = tuple(
        _tenant(item, f"workload.tenants[{k}]")
        for k, item in enumerate(_list(workload.get("tenants", []), "workload.tenants"))
    )
    philly = None
    if "philly" in workload:
        doc_philly = _map(workload["philly"], "workload.philly", {"path", "maxGpusPerPod"})
        path = Path(str(doc_philly.get("path", "")))
        if not path.is_absolute():
            path = (base / path).resolve()
        philly = PhillySpec(
            path, _int(doc_philly.get("maxGpusPerPod", 8), "workload.philly.maxGpusPerPod")
        )
    if tenants and philly:
        raise SpecError("workload: give either tenants or philly, not both")
    return ClusterSpec(pools=pools, tenants=tenants, philly=philly, seed=seed)


def _pools(raw: object, path: str) -> tuple[NodePool, ...]:
    doc = _map(
        raw,
        path,
        {
            "name",
            "count",
            "topology",
            "gpuModel",
            "gpuMemoryMiB",
            "cpuMilli",
            "memoryMiB",
            "sharing",
            "migLayout",
            "labels",
            "domains",
        },
    )
    pool = _pool(doc, path)
    if "domains" not in doc:
        return (pool,)
    return _spread(pool, doc["domains"], f"{path}.domains")


def _spread(pool: NodePool, raw: object, path: str) -> tuple[NodePool, ...]:
    """One pool per innermost domain of `raw`'s levels, its nodes labelled with their domains."""
    doc = _map(raw, path, {"levels", "nvlink"})
    levels = []
    for k, item in enumerate(_list(doc.get("levels"), f"{path}.levels")):
        level = _map(item, f"{path}.levels[{k}]", {"label", "count", "prefix"})
        label = str(level.get("label") or "")
        if not label:
            raise SpecError(f"{path}.levels[{k}].label is required")
        count = _int(level.get("count", 0), f"{path}.levels[{k}].count")
        if count < 1:
            raise SpecError(f"{path}.levels[{k}].count must be at least 1")
        levels.append((label, count, str(level.get("prefix", ""))))
    if not levels:
        raise SpecError(f"{path}.levels must list at least one level")
    labels = [label for label, _, _ in levels]
    if len(set(labels)) != len(labels):
        raise SpecError(f"{path}.levels: each label once")
    nvlink = str(doc.get("nvlink", ""))
    if nvlink and nvlink not in labels:
        raise SpecError(f"{path}.nvlink {nvlink!r} is not one of the levels' labels")
    domains = math.prod(count for _, count, _ in levels)
    if pool.count == 0 or pool.count % domains:
        raise SpecError(
            f"{path}: count {pool.count} does not divide into {domains} domains of equal size"
        )
    pools = []
    for indices in product(*(range(count) for _, count, _ in levels)):
        values = [f"{prefix}{i + 1}" for (_, _, prefix), i in zip(levels, indices, strict=True)]
        node_labels = {POOL_LABEL: pool.name, **dict(zip(labels, values, strict=True))}
        if nvlink:
            depth = labels.index(nvlink) + 1
            domain = "/".join(values[:depth])
            cluster = uuid.uuid5(uuid.NAMESPACE_URL, f"gpusched-sim/{pool.name}/{domain}")
            node_labels[CLIQUE_LABEL] = f"{cluster}.1"
        pools.append(
            replace(
                pool,
                name="-".join((pool.name, *values)),
                count=pool.count // domains,
                labels={**pool.labels, **node_labels},
            )
        )
    return tuple(pools)


def _pool(doc: dict[str, Any], path: str) -> NodePool:
    topology = str(doc.get("topology", ""))
    if topology not in PRESETS:
        raise SpecError(f"{path}.topology {topology!r} is not one of {', '.join(sorted(PRESETS))}")
    preset = PRESETS[topology]
    try:
        sharing = SharingMode(doc.get("sharing", preset.sharing.value))
    except ValueError as exc:
        raise SpecError(f"{path}.sharing: {exc}") from exc
    mig_layout = tuple(str(p) for p in _list(doc.get("migLayout", []), f"{path}.migLayout"))
    if (sharing is SharingMode.MIG) != bool(mig_layout):
        raise SpecError(f"{path}: sharing mig and migLayout go together")
    labels = _map(doc.get("labels", {}), f"{path}.labels", None)
    return replace(
        preset,
        name=str(doc.get("name") or topology),
        count=_int(doc.get("count", 1), f"{path}.count"),
        gpu_model=str(doc.get("gpuModel", preset.gpu_model)),
        gpu_memory_mib=_int(doc.get("gpuMemoryMiB", preset.gpu_memory_mib), f"{path}.gpuMemoryMiB"),
        cpu_milli=_int(doc.get("cpuMilli", preset.cpu_milli), f"{path}.cpuMilli"),
        memory_mib=_int(doc.get("memoryMiB", preset.memory_mib), f"{path}.memoryMiB"),
        sharing=sharing,
        mig_layout=mig_layout,
        labels={str(k): str(v) for k, v in labels.items()},
    )


def _tenant(raw: object, path: str) -> TenantSpec:
    doc = _map(
        raw,
        path,
        {
            "name",
            "arrivalsPerHour",
            "shapes",
            "priority",
            "serviceClass",
            "durationMinutes",
            "utilization",
        },
    )
    name = str(doc.get("name", ""))
    if not name:
        raise SpecError(f"{path}.name is required")
    try:
        service_class = ServiceClass(doc.get("serviceClass", "batch"))
    except ValueError as exc:
        raise SpecError(f"{path}.serviceClass: {exc}") from exc
    utilization_doc = _map(doc.get("utilization", {}), f"{path}.utilization", None)
    try:
        utilization = UtilizationProfile(
            **{SPEC_KEYS.get(k, k): v for k, v in utilization_doc.items()}
        )
    except (TypeError, ProfileError) as exc:
        raise SpecError(
            f"{path}.{exc}" if isinstance(exc, ProfileError) else f"{path}.utilization: {exc}"
        ) from exc
    shapes = tuple(
        _shape(item, f"{path}.shapes[{k}]")
        for k, item in enumerate(_list(doc.get("shapes"), f"{path}.shapes"))
    )
    if not shapes:
        raise SpecError(f"{path}.shapes must list at least one shape")
    return TenantSpec(
        name=name,
        arrivals_per_hour=_float(doc.get("arrivalsPerHour", 1), f"{path}.arrivalsPerHour"),
        shapes=shapes,
        priority=_int(doc.get("priority", 0), f"{path}.priority"),
        service_class=service_class,
        duration_s=60.0 * _float(doc.get("durationMinutes", 30), f"{path}.durationMinutes"),
        utilization=utilization,
    )


def _shape(raw: object, path: str) -> ShapeSpec:
    doc = _map(
        raw,
        path,
        {
            "weight",
            "pods",
            "cpuMilli",
            "memoryMiB",
            "gpus",
            "gpuMilli",
            "migProfile",
            "gpuModels",
            "topology",
        },
    )
    topology = _map(doc.get("topology", {}), f"{path}.topology", {"policy", "scope"})
    try:
        policy = TopologyPolicy(topology.get("policy", "none"))
        scope = TopologyScope(topology["scope"]) if "scope" in topology else None
    except ValueError as exc:
        raise SpecError(f"{path}.topology: {exc}") from exc
    mig_profile = str(doc.get("migProfile", ""))
    resources = Resources(
        cpu_milli=_int(doc.get("cpuMilli", 4000), f"{path}.cpuMilli"),
        memory_mib=_int(doc.get("memoryMiB", 32_768), f"{path}.memoryMiB"),
        gpus=_int(doc.get("gpus", 0), f"{path}.gpus"),
        gpu_milli=_int(doc.get("gpuMilli", 0), f"{path}.gpuMilli"),
        mig_profile=mig_profile,
        mig_count=1 if mig_profile else 0,
    )
    if sum((resources.gpus > 0, resources.gpu_milli > 0, bool(mig_profile))) > 1:
        raise SpecError(f"{path}: give one of gpus, gpuMilli or migProfile")
    if not 0 <= resources.gpu_milli < 1000:
        raise SpecError(f"{path}.gpuMilli must be 1..999 (use gpus: 1 for a whole GPU)")
    return ShapeSpec(
        weight=_float(doc.get("weight", 1), f"{path}.weight"),
        pods=_int(doc.get("pods", 1), f"{path}.pods"),
        resources=resources,
        gpu_models=tuple(str(m) for m in _list(doc.get("gpuModels", []), f"{path}.gpuModels")),
        topology_policy=policy,
        topology_scope=scope,
    )


_SHAPES = yaml_documents.Shapes(SpecError)
_map = _SHAPES.mapping
_list = _SHAPES.list_of


def _int(value: object, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{path} must be a non-negative integer, got {value!r}")
    return value


def _float(value: object, path: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{path} must be a non-negative number, got {value!r}")
    return float(value)
