"""The dcgm-exporter text generator: exact wire format, and round trips through the parsers."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from telemetry.dcgm import FIELDS, GpuKey, PodRef
from telemetry.exposition import (
    ALL_FIELDS,
    EXTRA_FIELDS,
    ExporterFlavor,
    GpuState,
    render_exposition,
)
from telemetry.mapping import gpu_samples
from telemetry.parsing import parse_exposition

TRAINER = GpuState(
    hostname="gpu-node-01",
    gpu=0,
    uuid="GPU-5fd4b2c3-1a2b-4c5d-8e9f-0a1b2c3d4e5f",
    pci_bus_id="00000000:18:00.0",
    gpu_util=87,
    fb_used_mib=61234,
    power_w=312.456,
    gr_engine_active=0.734512,
    namespace="ml-team",
    pod="llama-ft-0",
    container="trainer",
)
IDLE = GpuState(
    hostname="gpu-node-01",
    gpu=1,
    uuid="GPU-9c8b7a65-4321-4fed-bcba-987654321000",
    pci_bus_id="00000000:2A:00.0",
    power_w=71.214,
)
MIG = GpuState(
    hostname="gpu-node-01",
    gpu=2,
    uuid="GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77",
    pci_bus_id="00000000:3B:00.0",
    gpu_util=None,
    mem_copy_util=None,
    gr_engine_active=0.734512,
    mig_profile="1g.10gb",
    mig_instance=9,
    namespace="serving",
    pod="tts-predictor-5554f75554-8j8pl",
    container="kserve-container",
)


def lines_of(text: str, metric: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(metric + "{")]


def test_the_exact_dcgm_exporter_lines() -> None:
    text = render_exposition([TRAINER, IDLE, MIG])

    assert lines_of(text, "DCGM_FI_DEV_GPU_UTIL") == [
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-5fd4b2c3-1a2b-4c5d-8e9f-0a1b2c3d4e5f",'
        'pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07",container="trainer",'
        'namespace="ml-team",pod="llama-ft-0"} 87',
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-9c8b7a65-4321-4fed-bcba-987654321000",'
        'pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07"} 0',
    ]  # no line for the MIG instance: GPU_UTIL is unsupported there
    assert lines_of(text, "DCGM_FI_DEV_POWER_USAGE")[1].endswith("} 71.214000")  # %f
    assert lines_of(text, "DCGM_FI_DEV_FB_USED")[0].endswith("} 61234")  # %d
    assert lines_of(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[2] == (
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77",'
        'pci_bus_id="00000000:3B:00.0",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",'
        'GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",Hostname="gpu-node-01",'
        'DCGM_FI_DRIVER_VERSION="550.90.07",container="kserve-container",namespace="serving",'
        'pod="tts-predictor-5554f75554-8j8pl"} 0.734512'
    )


def test_families_have_help_and_type_first() -> None:
    text = render_exposition([TRAINER])
    lines = text.splitlines()
    assert lines[0] == "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)."
    assert lines[1] == "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"
    assert text.endswith("\n")
    assert [line.split()[2] for line in lines if line.startswith("# TYPE")] == list(FIELDS)


def test_round_trip_through_prometheus_client() -> None:
    text = render_exposition([TRAINER, IDLE, MIG])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == set(FIELDS)
    assert all(f.type == "gauge" for f in families.values())
    (util0, util1) = families["DCGM_FI_DEV_GPU_UTIL"].samples
    assert util0.value == 87 and util0.labels["pod"] == "llama-ft-0"
    assert util1.value == 0 and "pod" not in util1.labels
    mig = families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples[2]
    assert mig.labels["GPU_I_ID"] == "9" and mig.value == pytest.approx(0.734512)


def test_round_trip_through_parsing_and_dcgm() -> None:
    samples, stats = parse_exposition(render_exposition([TRAINER, IDLE, MIG]))
    assert stats.skipped == 0
    gpus = {g.key: g for g in gpu_samples(samples)[0]}
    trainer = gpus[GpuKey("gpu-node-01", 0, "")]
    assert trainer.pod == PodRef("ml-team", "llama-ft-0", "trainer")
    assert trainer.values["gpu_util"] == pytest.approx(0.87)
    assert trainer.values["power_w"] == pytest.approx(312.456)
    assert trainer.values["fb_free_mib"] == 81559
    assert gpus[GpuKey("gpu-node-01", 1, "")].pod is None
    mig = gpus[GpuKey("gpu-node-01", 2, "9")]
    assert mig.mig_profile == "1g.10gb" and "gpu_util" not in mig.values


def test_flavors() -> None:
    old = render_exposition(
        [TRAINER, IDLE], flavor=ExporterFlavor(old_namespace=True, empty_pod_labels=True)
    )
    line = lines_of(old, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert 'uuid="GPU-5fd4' in line and "UUID=" not in line
    assert line.endswith(
        'container_name="trainer",pod_name="llama-ft-0",pod_namespace="ml-team"} 87'
    )
    assert lines_of(old, "DCGM_FI_DEV_GPU_UTIL")[1].endswith(
        'container_name="",pod_name="",pod_namespace=""} 0'
    )
    master = render_exposition([IDLE], flavor=ExporterFlavor(hostname_label="hostname"))
    assert 'hostname="gpu-node-01"' in master and "Hostname" not in master
    no_driver = render_exposition([IDLE], flavor=ExporterFlavor(driver_version=None))
    assert "DCGM_FI_DRIVER_VERSION" not in no_driver


def test_pod_uid_and_escaping() -> None:
    state = GpuState(
        hostname="n", gpu=0, uuid="GPU-1", pod='we"ird\\pod', namespace="ns", pod_uid="u-1"
    )
    text = render_exposition([state], fields=[FIELDS["DCGM_FI_DEV_GPU_UTIL"]])
    assert 'pod="we\\"ird\\\\pod",pod_uid="u-1"} 0' in text
    samples, stats = parse_exposition(text)
    assert stats.skipped == 0 and samples[0].labels["pod"] == 'we"ird\\pod'


def test_extra_fields_for_benchmarks() -> None:
    text = render_exposition([IDLE], fields=ALL_FIELDS)
    assert len([line for line in text.splitlines() if not line.startswith("#")]) == len(ALL_FIELDS)
    assert lines_of(text, EXTRA_FIELDS[0].metric)[0].endswith("} 1980")
    samples, _ = parse_exposition(text)
    gpus, stats = gpu_samples(samples)
    assert stats.unknown_metric == len(EXTRA_FIELDS)
    assert len(gpus[0].values) == len(FIELDS)


def test_no_gpus_no_text() -> None:
    assert render_exposition([]) == ""
