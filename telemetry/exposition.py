"""Render dcgm-exporter `/metrics` text from GPU states. Pure: no Django, no I/O.

The output follows dcgm-exporter's renderer (`reference/wire-formats.md` §1): one family per
field (`# HELP`, `# TYPE`, then a line per GPU), labels in the exporter's order

    gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], [Hostname],
    [DCGM_FI_DRIVER_VERSION], [container, namespace, pod, [pod_uid]]

and values printed with `%d` for integer fields and `%f` for the others. A field whose value is
None is left out for that GPU, as the exporter does for unsupported fields. `ExporterFlavor`
selects the variants real exporters produce: `hostname` on master, `--use-old-namespace`, the
empty pod labels of 2.x releases. The simulator serves this text on its `/metrics`; the tests
feed it to Prometheus.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from telemetry.dcgm import FIELDS, FieldSpec

__all__ = ["EXTRA_FIELDS", "ExporterFlavor", "GpuState", "render_exposition"]


@dataclass(frozen=True)
class GpuState:
    """One GPU (or MIG instance) as dcgm-exporter would report it, in exporter units."""

    hostname: str
    gpu: int
    uuid: str
    model_name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = ""  # default: derived from the index
    gpu_util: float | None = 0.0  # % 0-100; None on MIG instances
    mem_copy_util: float | None = 0.0  # % 0-100; None on MIG instances
    fb_used_mib: float | None = 0.0
    fb_free_mib: float | None = 81559.0
    power_w: float | None = 70.0
    temp_c: float | None = 35.0
    xid_last: float | None = 0.0
    gr_engine_active: float | None = 0.0  # ratio 0-1; None before Volta
    tensor_active: float | None = 0.0
    dram_active: float | None = 0.0
    namespace: str | None = None  # pod labels; None for a GPU no pod holds
    pod: str | None = None
    container: str | None = None
    pod_uid: str | None = None
    mig_profile: str | None = None  # e.g. "1g.10gb"; with mig_instance for a MIG instance
    mig_instance: int | None = None


@dataclass(frozen=True)
class ExporterFlavor:
    hostname_label: str = "Hostname"  # "hostname" on dcgm-exporter master
    driver_version: str | None = "550.90.07"
    old_namespace: bool = False  # --use-old-namespace: uuid, pod_name, pod_namespace, ...
    empty_pod_labels: bool = False  # 2.x releases: container="",namespace="",pod="" when idle


# Fields beyond the ten GPU_STATE_FIELDS, for benchmarks that ask for more per GPU. Rendered with
# a constant value; the ingester ignores them, as it ignores any field it does not use.
EXTRA_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("DCGM_FI_DEV_SM_CLOCK", "sm_clock", "MHz", 1.0, True, "SM clock frequency (in MHz)."),
    FieldSpec("DCGM_FI_DEV_MEM_CLOCK", "mem_clock", "MHz", 1.0, True, "Memory clock (in MHz)."),
    FieldSpec(
        "DCGM_FI_DEV_MEMORY_TEMP", "memory_temp", "C", 1.0, True, "Memory temperature (in C)."
    ),
    FieldSpec("DCGM_FI_DEV_ENC_UTIL", "enc_util", "%", 1.0, True, "Encoder utilization (in %)."),
    FieldSpec("DCGM_FI_DEV_DEC_UTIL", "dec_util", "%", 1.0, True, "Decoder utilization (in %)."),
)
_EXTRA_VALUES = {"sm_clock": 1980.0, "mem_clock": 2619.0, "memory_temp": 40.0}

ALL_FIELDS: tuple[FieldSpec, ...] = (*FIELDS.values(), *EXTRA_FIELDS)


def render_exposition(
    gpus: Sequence[GpuState],
    *,
    flavor: ExporterFlavor | None = None,
    fields: Iterable[FieldSpec] | None = None,
) -> str:
    """dcgm-exporter text for `gpus`; `fields` defaults to the ten fields in FIELDS."""
    flavor = flavor or ExporterFlavor()
    blocks = [_label_block(gpu, flavor) for gpu in gpus]
    out: list[str] = []
    for spec in FIELDS.values() if fields is None else fields:
        metric = spec.metric
        constant = None if metric in FIELDS else _EXTRA_VALUES.get(spec.attr, 0.0)
        rows: list[str] = []
        for gpu, block in zip(gpus, blocks, strict=True):
            value = getattr(gpu, spec.attr) if constant is None else constant
            if value is None:
                continue  # unsupported on this GPU: dcgm-exporter leaves the line out
            text = f"{round(value):d}" if spec.integer else f"{value:f}"
            rows.append(f"{metric}{{{block}}} {text}\n")
        if rows:
            out.append(f"# HELP {metric} {spec.help}\n# TYPE {metric} gauge\n")
            out.append("".join(rows))
    return "".join(out)


def _label_block(gpu: GpuState, flavor: ExporterFlavor) -> str:
    labels: list[tuple[str, str]] = [
        ("gpu", str(gpu.gpu)),
        ("uuid" if flavor.old_namespace else "UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id or f"00000000:{(0x18 + gpu.gpu * 0x11) % 0x100:02X}:00.0"),
        ("device", f"nvidia{gpu.gpu}"),
        ("modelName", gpu.model_name),
    ]
    if gpu.mig_profile is not None and gpu.mig_instance is not None:
        labels.append(("GPU_I_PROFILE", gpu.mig_profile))
        labels.append(("GPU_I_ID", str(gpu.mig_instance)))
    labels.append((flavor.hostname_label, gpu.hostname))
    if flavor.driver_version is not None:
        labels.append(("DCGM_FI_DRIVER_VERSION", flavor.driver_version))
    if gpu.pod is not None:
        pod_labels = [
            ("container", gpu.container or ""),
            ("namespace", gpu.namespace or ""),
            ("pod", gpu.pod),
        ]
        if gpu.pod_uid is not None:
            pod_labels.append(("pod_uid", gpu.pod_uid))
    elif flavor.empty_pod_labels:
        pod_labels = [("container", ""), ("namespace", ""), ("pod", "")]
    else:
        pod_labels = []
    if flavor.old_namespace:
        renamed = {"container": "container_name", "namespace": "pod_namespace", "pod": "pod_name"}
        pod_labels = [(renamed.get(name, name), value) for name, value in pod_labels]
    labels.extend(sorted(pod_labels))
    return ",".join(f'{name}="{_escape(value)}"' for name, value in labels)


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value
