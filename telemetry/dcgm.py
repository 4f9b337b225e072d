"""DCGM field semantics and dcgm-exporter label conventions. Pure: no Django, no I/O.

Samples (from `telemetry.parsing`) become one row of a `GpuBatch` per GPU (or MIG instance) and
pod (telemetry.mapping): the fields of one GPU are gathered, their units normalized, and the
labels that name the node, the GPU and the pod are read in every spelling dcgm-exporter and
Prometheus produce (`reference/wire-formats.md` §1):

- node: telemetry.placement (a node label, `Hostname`, `instance`, the scrape target; only the
  cluster's nodes when they are known, at most so many per source);
- GPU: `gpu` (index), `UUID` / `uuid` (`--use-old-namespace`), `modelName`, `pci_bus_id`;
  MIG instances add `GPU_I_PROFILE` and `GPU_I_ID` (the UUID stays the parent GPU's);
- pod: `exported_pod` / `pod` / `pod_name`, and the same for namespace and container. A
  Prometheus that scrapes the exporter with `honor_labels: false` and its own `pod`/`namespace`
  target labels (prometheus-operator does) renames the exporter's labels `exported_*`; the
  unprefixed ones then name the *exporter's* pod. Such series carry the operator's `service` /
  `endpoint` target labels, and on them an unprefixed `pod` is not a workload. Empty values
  (`pod=""`, 2.x releases) mean no pod.

Metric names are read in either case (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, and the lower-case
`dcgm_fi_prof_gr_engine_active` that NVIDIA/dcgm-exporter#272 shows); the 1.x names
(`dcgm_gpu_utilization`, ...) are other metrics, counted unknown.

Units: utilizations become ratios 0-1 (`DCGM_FI_DEV_GPU_UTIL` is in %, the `PROF_*` fields are
already ratios), framebuffer stays MiB, power W, temperature °C; `XID_ERRORS` is the last XID
seen, not a count. DCGM's "blank" sentinels (values from 0x7ffffff0 up, printed raw by old
releases) and NaN mean "no value". Fields that are absent stay absent: the `PROF_*` fields on
pre-Volta GPUs, `GPU_UTIL` and `MEM_COPY_UTIL` on MIG instances.

Nothing outside what a GPU can measure is stored: each field has a range (a ratio 0-1, a
percentage 0-100, framebuffer, power and temperature within physical bounds); a value just past
it (by CLAMP_MARGIN of the range: noise) is kept at its edge and counted, anything further
(-5 or 500 for a percentage, +-Inf) is left out and counted, and so is a whole series whose GPU
index is not one (`-1`, `abc`, `""`, beyond a smallint) or whose labels are longer than their
columns (MapStats.skipped, by reason; `ingesttelemetry` reports them per cycle and in /metrics).
One bad series never costs the others their cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from telemetry.batch import GpuBatch, GpuKey, GpuSample, PodRef, busy_ratio
from telemetry.placement import NO_NODE

__all__ = [
    "FIELDS",
    "FieldSpec",
    "GpuBatch",
    "GpuKey",
    "GpuSample",
    "MapStats",
    "PodRef",
    "busy_ratio",
    "pod_of",
]


@dataclass(frozen=True)
class FieldSpec:
    metric: str
    attr: str  # the key in GpuSample.values
    unit: str
    scale: float  # exposition value * scale = value in `unit`
    integer: bool  # dcgm-exporter prints it with %d (else %f)
    help: str
    maximum: float = 1.0  # in `unit`; the minimum is 0 (`minimum` for temperatures)
    minimum: float = 0.0

    @property
    def exposed_range(self) -> tuple[float, float]:
        """The range in exposition units, widened by CLAMP_MARGIN: values in the margin are
        clamped to the range (measurement noise, such as an engine ratio of 1.02), values
        beyond it are refused (-5 %, 500 %, -Inf)."""
        margin = (self.maximum - self.minimum) * CLAMP_MARGIN
        return (self.minimum - margin) / self.scale, (self.maximum + margin) / self.scale


CLAMP_MARGIN = 0.02
MAX_FB_MIB = 16 * 2**20  # 16 TiB of framebuffer: beyond any GPU
MAX_POWER_W = 10_000.0
MAX_XID = 2**31 - 1

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
            maximum=MAX_FB_MIB,
        ),
        FieldSpec(
            "DCGM_FI_DEV_FB_FREE",
            "fb_free_mib",
            "MiB",
            1.0,
            True,
            "Framebuffer memory free (in MiB).",
            maximum=MAX_FB_MIB,
        ),
        FieldSpec(
            "DCGM_FI_DEV_POWER_USAGE",
            "power_w",
            "W",
            1.0,
            False,
            "Power draw (in W).",
            maximum=MAX_POWER_W,
        ),
        FieldSpec(
            "DCGM_FI_DEV_GPU_TEMP",
            "temp_c",
            "C",
            1.0,
            True,
            "GPU temperature (in C).",
            maximum=150.0,
            minimum=-40.0,
        ),
        FieldSpec(
            "DCGM_FI_DEV_XID_ERRORS",
            "xid_last",
            "xid",
            1.0,
            True,
            "Value of the last XID error encountered.",
            maximum=MAX_XID,
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


# Reasons a sample is skipped (the keys of MapStats.skipped), besides unknown metrics and blanks.
NO_GPU_INDEX = "no gpu label"
BAD_GPU_INDEX = "gpu label not an index"
GPU_INDEX_RANGE = "gpu index out of range"
NOT_FINITE = "value not finite"
OUT_OF_RANGE = "value out of range"  # f"{OUT_OF_RANGE}: {metric}"
LABEL_TOO_LONG = "label too long"  # f"{LABEL_TOO_LONG}: {what}"

# The longest label values stored (telemetry/models.py sizes its columns with these), and the
# largest GPU index (a smallint column). A series beyond them is skipped and counted rather than
# failing the batch it came in (on PostgreSQL, one of them made every cycle fail).
MAX_GPU_INDEX = 32767
LABEL_LIMITS = {
    "node": 253,
    "uuid": 64,
    "model_name": 128,
    "mig_profile": 32,
    "mig_instance": 16,
    "namespace": 253,
    "pod": 253,
    "container": 253,
}


@dataclass
class MapStats:
    samples: int = 0
    used: int = 0  # samples that filled a field of a GPU (clamped ones included)
    unknown_metric: int = 0  # other DCGM fields, other exporters' metrics, 1.x lowercase names
    blank: int = 0  # NaN or DCGM blank sentinels
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> samples left out
    clamped: dict[str, int] = field(default_factory=dict)  # metric -> values kept at its edge
    attributed: dict[str, int] = field(default_factory=dict)  # rule -> label sets it placed
    unknown_nodes: list[str] = field(default_factory=list)  # the first names that matched none

    MAX_EXAMPLES = 5

    @property
    def no_gpu(self) -> int:
        """Samples of a known field without a usable node or GPU index."""
        reasons = (NO_NODE, NO_GPU_INDEX, BAD_GPU_INDEX, GPU_INDEX_RANGE)
        return sum(self.skipped.get(reason, 0) for reason in reasons)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count

    def merge(self, other: MapStats) -> None:
        self.samples += other.samples
        self.used += other.used
        self.unknown_metric += other.unknown_metric
        self.blank += other.blank
        for reason, count in other.skipped.items():
            self.skip(reason, count)
        for metric, count in other.clamped.items():
            self.clamped[metric] = self.clamped.get(metric, 0) + count
        for rule, count in other.attributed.items():
            self.attributed[rule] = self.attributed.get(rule, 0) + count
        room = self.MAX_EXAMPLES - len(self.unknown_nodes)
        self.unknown_nodes.extend(other.unknown_nodes[: max(room, 0)])


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
