"""DCGM field semantics and dcgm-exporter label conventions. Pure: no Django, no I/O.

Samples (from `telemetry.parsing`) become one `GpuSample` per GPU (or MIG instance) and pod:
the fields of one GPU are gathered, their units normalized, and the labels that name the node,
the GPU and the pod are read in every spelling dcgm-exporter and Prometheus produce
(`reference/wire-formats.md` §1):

- node: `Hostname` (releases), `hostname` (master), else the host part of Prometheus' `instance`,
  else the scrape target's host given by the caller;
- GPU: `gpu` (index), `UUID` / `uuid` (`--use-old-namespace`), `modelName`, `pci_bus_id`;
  MIG instances add `GPU_I_PROFILE` and `GPU_I_ID` (the UUID stays the parent GPU's);
- pod: `exported_pod` / `pod` / `pod_name`, and the same for namespace and container. A
  Prometheus that scrapes the exporter with `honor_labels: false` and its own `pod`/`namespace`
  target labels (prometheus-operator does) renames the exporter's labels `exported_*`; the
  unprefixed ones then name the *exporter's* pod. Such series carry the operator's `service` /
  `endpoint` target labels, and on them an unprefixed `pod` is not a workload. Empty values
  (`pod=""`, 2.x releases) mean no pod.

Units: utilizations become ratios 0-1 (`DCGM_FI_DEV_GPU_UTIL` is in %, the `PROF_*` fields are
already ratios), framebuffer stays MiB, power W, temperature °C; `XID_ERRORS` is the last XID
seen, not a count. DCGM's "blank" sentinels (values from 0x7ffffff0 up, printed raw by old
releases) and NaN mean "no value". Fields that are absent stay absent: the `PROF_*` fields on
pre-Volta GPUs, `GPU_UTIL` and `MEM_COPY_UTIL` on MIG instances.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from telemetry.parsing import Sample, SeriesGroup

__all__ = [
    "FIELDS",
    "FieldSpec",
    "GpuKey",
    "GpuSample",
    "MapStats",
    "PodRef",
    "busy_ratio",
    "gpu_samples",
    "gpu_samples_from_groups",
]


@dataclass(frozen=True)
class FieldSpec:
    metric: str
    attr: str  # the key in GpuSample.values
    unit: str
    scale: float  # exposition value * scale = value in `unit`
    integer: bool  # dcgm-exporter prints it with %d (else %f)
    help: str


FIELDS: dict[str, FieldSpec] = {
    spec.metric: spec
    for spec in (
        FieldSpec(
            "DCGM_FI_DEV_GPU_UTIL", "gpu_util", "ratio", 0.01, True, "GPU utilization (in %)."
        ),
        FieldSpec(
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "mem_copy_util",
            "ratio",
            0.01,
            True,
            "Memory utilization (in %).",
        ),
        FieldSpec(
            "DCGM_FI_DEV_FB_USED",
            "fb_used_mib",
            "MiB",
            1.0,
            True,
            "Framebuffer memory used (in MiB).",
        ),
        FieldSpec(
            "DCGM_FI_DEV_FB_FREE",
            "fb_free_mib",
            "MiB",
            1.0,
            True,
            "Framebuffer memory free (in MiB).",
        ),
        FieldSpec("DCGM_FI_DEV_POWER_USAGE", "power_w", "W", 1.0, False, "Power draw (in W)."),
        FieldSpec("DCGM_FI_DEV_GPU_TEMP", "temp_c", "C", 1.0, True, "GPU temperature (in C)."),
        FieldSpec(
            "DCGM_FI_DEV_XID_ERRORS",
            "xid_last",
            "xid",
            1.0,
            True,
            "Value of the last XID error encountered.",
        ),
        FieldSpec(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gr_engine_active",
            "ratio",
            1.0,
            False,
            "Ratio of time the graphics engine is active.",
        ),
        FieldSpec(
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "tensor_active",
            "ratio",
            1.0,
            False,
            "Ratio of cycles the tensor (HMMA) pipe is active.",
        ),
        FieldSpec(
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "dram_active",
            "ratio",
            1.0,
            False,
            "Ratio of cycles the device memory interface is active sending or receiving data.",
        ),
    )
}

# Values from here up are DCGM "blank" sentinels (DCGM_INT32_BLANK = 0x7ffffff0; the int64 and
# fp64 blanks are larger still), not measurements.
DCGM_BLANK = float(0x7FFFFFF0)


class GpuKey(NamedTuple):
    node: str
    gpu_index: int
    mig_instance: str  # GPU_I_ID, "" for a whole GPU


class PodRef(NamedTuple):
    namespace: str
    pod: str
    container: str


@dataclass(slots=True)
class GpuSample:
    """The fields of one GPU (or MIG instance) as seen for one pod, or for no pod."""

    key: GpuKey
    uuid: str
    model_name: str = ""
    pci_bus_id: str = ""
    mig_profile: str = ""
    pod: PodRef | None = None
    values: dict[str, float] = field(default_factory=dict)  # FieldSpec.attr -> value in unit
    timestamp: float | None = None  # Unix seconds, when the source gave one

    @property
    def busy(self) -> float | None:
        return busy_ratio(self.values)


def busy_ratio(values: Mapping[str, float]) -> float | None:
    """How busy a GPU is, 0-1: PROF_GR_ENGINE_ACTIVE where measured, else GPU_UTIL/100."""
    busy = values.get("gr_engine_active")
    if busy is None:
        busy = values.get("gpu_util")
    if busy is None:
        return None
    return min(max(busy, 0.0), 1.0)


@dataclass
class MapStats:
    samples: int = 0
    used: int = 0  # samples that filled a field of a GPU
    unknown_metric: int = 0  # other DCGM fields, other exporters' metrics, 1.x lowercase names
    no_gpu: int = 0  # samples of a known field without a usable node or GPU index
    blank: int = 0  # NaN or DCGM blank sentinels

    def merge(self, other: MapStats) -> None:
        self.samples += other.samples
        self.used += other.used
        self.unknown_metric += other.unknown_metric
        self.no_gpu += other.no_gpu
        self.blank += other.blank


# What a label set says of its GPU: key, pod, uuid, model name, PCI bus id, MIG profile.
_Identity = tuple[GpuKey, PodRef | None, str, str, str, str]


def gpu_samples(
    samples: Iterable[Sample], *, default_node: str = ""
) -> tuple[list[GpuSample], MapStats]:
    """Gather samples into GpuSamples, one per (GPU or MIG instance, pod).

    `default_node` names the node when no label does (a direct scrape knows its target).
    A GPU shared by several pods (time-slicing, MPS) appears once per pod, with the same values.
    """
    groups: dict[frozenset[tuple[str, str]], SeriesGroup] = {}
    for sample in samples:
        key = frozenset(sample.labels.items())
        group = groups.get(key)
        if group is None:
            group = groups[key] = SeriesGroup(sample.labels)
        group.add(sample.name, sample.value, sample.timestamp)
    return gpu_samples_from_groups(groups.values(), default_node=default_node)


_ATTR = {metric: spec.attr for metric, spec in FIELDS.items()}
_SCALED = tuple((spec.attr, spec.scale) for spec in FIELDS.values() if spec.scale != 1.0)


def gpu_samples_from_groups(
    groups: Iterable[SeriesGroup], *, default_node: str = ""
) -> tuple[list[GpuSample], MapStats]:
    """gpu_samples() for the output of parsing.parse_grouped(): each label set is read once."""
    stats = MapStats()
    gpus: dict[tuple[GpuKey, PodRef | None], GpuSample] = {}
    samples = known = blank = no_gpu = 0
    for group in groups:
        values = group.values
        samples += len(values)
        found = _known_values(values)
        if len(found) == len(values):
            known += len(found)
        else:
            in_fields = len(values.keys() & _ATTR.keys())
            known += in_fields
            blank += in_fields - len(found)
        if not found:
            continue
        identity = _identity(group.labels, default_node)
        if identity is None:
            no_gpu += len(found)
            continue
        key, pod = identity[0], identity[1]
        gpu = gpus.get((key, pod))
        if gpu is None:
            gpu = gpus[(key, pod)] = GpuSample(key, *identity[2:], pod, found)
        else:
            gpu.values.update(found)
        if group.timestamps:
            newest = max(group.timestamps.values())
            if gpu.timestamp is None or newest > gpu.timestamp:
                gpu.timestamp = newest
    stats.samples = samples
    stats.unknown_metric = samples - known
    stats.blank = blank
    stats.no_gpu = no_gpu
    stats.used = known - blank - no_gpu
    return list(gpus.values()), stats


def _known_values(values: Mapping[str, float]) -> dict[str, float]:
    """The DCGM fields among `values`, renamed to FieldSpec.attr and scaled to their unit,
    without NaN and blank sentinels."""
    if values and values.keys() <= _ATTR.keys():
        # The usual case, all fields known: checked and renamed with C-level builtins.
        numbers = values.values()
        total = sum(numbers)
        if total == total and max(numbers) < DCGM_BLANK:  # no NaN, no blank
            found = dict(zip(map(_ATTR.__getitem__, values), numbers, strict=True))
            for attr, scale in _SCALED:
                if attr in found:
                    found[attr] *= scale
            return found
    return {
        _ATTR[metric]: value * FIELDS[metric].scale
        for metric, value in values.items()
        if metric in _ATTR and value == value and value < DCGM_BLANK
    }


def _identity(labels: Mapping[str, str], default_node: str) -> _Identity | None:
    get = labels.get
    node = get("Hostname") or get("hostname") or _instance_host(get("instance", ""))
    index = get("gpu", "")
    if not (node := node or default_node) or not index.isdecimal():
        return None
    return (
        GpuKey(node, int(index), get("GPU_I_ID", "")),
        pod_of(labels),
        get("UUID") or get("uuid") or "",
        get("modelName", ""),
        get("pci_bus_id", ""),
        get("GPU_I_PROFILE", ""),
    )


def pod_of(labels: Mapping[str, str]) -> PodRef | None:
    """The workload pod a series belongs to, in any label spelling; None for an idle GPU."""
    get = labels.get
    if "service" in labels or "endpoint" in labels:
        # prometheus-operator's target labels: the unprefixed pod labels are the exporter's own.
        pod = get("exported_pod")
        if not pod:
            return None
        return PodRef(get("exported_namespace", ""), pod, get("exported_container", ""))
    pod = get("exported_pod") or get("pod") or get("pod_name")
    if not pod:
        return None
    return PodRef(
        get("exported_namespace") or get("namespace") or get("pod_namespace") or "",
        pod,
        get("exported_container") or get("container") or get("container_name") or "",
    )


def _instance_host(instance: str) -> str:
    """`10.0.1.5:9400` -> `10.0.1.5`, `[::1]:9400` -> `::1`, `node-1` -> `node-1`."""
    if not instance:
        return ""
    if instance.startswith("["):
        return instance[1:].partition("]")[0]
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance
