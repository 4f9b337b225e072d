"""DCGM semantics: units, the busy field, and every label spelling of node, GPU and pod."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.dcgm import (
    DCGM_BLANK,
    FIELDS,
    LABEL_LIMITS,
    MAX_GPU_INDEX,
    GpuKey,
    GpuSample,
    PodRef,
    busy_ratio,
    pod_of,
)
from telemetry.mapping import gpu_samples, gpu_samples_from_groups, gpu_samples_from_scrape
from telemetry.parsing import Sample, parse_exposition, parse_grouped, parse_scrape

BASE = {"gpu": "0", "UUID": "GPU-1", "Hostname": "node-1", "modelName": "NVIDIA H100 80GB HBM3"}


def one(name: str, value: float, **labels: str) -> Sample:
    return Sample(name, {**BASE, **labels}, value)


def test_units_are_normalized() -> None:
    gpus, stats = gpu_samples(
        [
            one("DCGM_FI_DEV_GPU_UTIL", 87),
            one("DCGM_FI_DEV_MEM_COPY_UTIL", 40),
            one("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.734512),
            one("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.2),
            one("DCGM_FI_PROF_DRAM_ACTIVE", 0.3),
            one("DCGM_FI_DEV_FB_USED", 61234),
            one("DCGM_FI_DEV_FB_FREE", 20325),
            one("DCGM_FI_DEV_POWER_USAGE", 312.456),
            one("DCGM_FI_DEV_GPU_TEMP", 61),
            one("DCGM_FI_DEV_XID_ERRORS", 79),
        ]
    )
    assert stats.used == 10 and stats.samples == 10
    (sample,) = gpus
    assert sample.key == GpuKey("node-1", 0, "")
    assert sample.uuid == "GPU-1" and sample.model_name == "NVIDIA H100 80GB HBM3"
    assert sample.values == pytest.approx(
        {
            "gpu_util": 0.87,  # % -> ratio
            "mem_copy_util": 0.40,
            "gr_engine_active": 0.734512,  # already a ratio
            "tensor_active": 0.2,
            "dram_active": 0.3,
            "fb_used_mib": 61234,  # MiB
            "fb_free_mib": 20325,
            "power_w": 312.456,
            "temp_c": 61,
            "xid_last": 79,  # the last XID, not a count
        }
    )
    assert {spec.attr for spec in FIELDS.values()} == set(sample.values)


def test_busy_prefers_the_graphics_engine_ratio() -> None:
    assert busy_ratio({"gpu_util": 0.87, "gr_engine_active": 0.5}) == 0.5
    assert busy_ratio({"gpu_util": 0.87}) == 0.87  # pre-Volta: no PROF fields
    assert busy_ratio({"gr_engine_active": 0.3}) == 0.3  # MIG: no GPU_UTIL
    assert busy_ratio({"fb_used_mib": 10}) is None
    assert busy_ratio({"gr_engine_active": 1.02}) == 1.0  # clamped
    assert busy_ratio({"gpu_util": -0.01}) == 0.0


def test_absent_fields_stay_absent() -> None:
    (sample,), _ = gpu_samples([one("DCGM_FI_DEV_FB_USED", 10)])
    assert sample.values == {"fb_used_mib": 10}
    assert sample.busy is None


def test_blank_sentinels_and_nan_are_no_value() -> None:
    gpus, stats = gpu_samples(
        [
            one("DCGM_FI_DEV_GPU_UTIL", 9223372036854775794),  # old releases printed blanks raw
            one("DCGM_FI_DEV_FB_USED", 2147483632),
            one("DCGM_FI_PROF_GR_ENGINE_ACTIVE", float("nan")),
            one("DCGM_FI_DEV_POWER_USAGE", 70.5),
        ]
    )
    assert stats.blank == 3 and stats.used == 1
    assert gpus[0].values == {"power_w": 70.5}


def test_unknown_metrics_and_dcgm_1x_names_are_ignored() -> None:
    gpus, stats = gpu_samples(
        [
            one("dcgm_gpu_utilization", 40),
            one("DCGM_FI_DEV_SM_CLOCK", 1980),
            one("go_goroutines", 12),
        ]
    )
    assert list(gpus) == [] and stats.unknown_metric == 3 and stats.used == 0


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"Hostname": "node-1"}, "node-1"),  # releases
        ({"hostname": "node-1"}, "node-1"),  # master
        ({"instance": "10.0.1.5:9400"}, "10.0.1.5"),  # no hostname: the scraped instance
        ({"instance": "[fd00::5]:9400"}, "fd00::5"),
        ({"instance": "gpu-node-7"}, "gpu-node-7"),
        ({}, "default-node"),  # a direct scrape names the node after its target
    ],
)
def test_node_label_variants(labels: dict[str, str], node: str) -> None:
    sample = Sample("DCGM_FI_DEV_GPU_UTIL", {"gpu": "3", "UUID": "GPU-1", **labels}, 5)
    (gpu,), _ = gpu_samples([sample], default_node="default-node")
    assert gpu.key == GpuKey(node, 3, "")


def test_a_sample_without_node_or_gpu_index_is_counted() -> None:
    samples = [
        Sample("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, 5),  # no node at all
        Sample("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "n", "gpu": "nvidia0"}, 5),
        Sample("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "n"}, 5),
    ]
    gpus, stats = gpu_samples(samples)
    assert list(gpus) == [] and stats.no_gpu == 3


def test_uuid_label_variants() -> None:
    new = Sample("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "Hostname": "a", "UUID": "GPU-A"}, 1)
    old = Sample("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "Hostname": "b", "uuid": "GPU-B"}, 1)
    gpus, _ = gpu_samples([new, old])
    assert {g.key.node: g.uuid for g in gpus} == {"a": "GPU-A", "b": "GPU-B"}


@pytest.mark.parametrize(
    ("labels", "pod"),
    [
        ({"pod": "p", "namespace": "ns", "container": "c"}, PodRef("ns", "p", "c")),
        ({"pod_name": "p", "pod_namespace": "ns", "container_name": "c"}, PodRef("ns", "p", "c")),
        (  # after a Prometheus scrape with colliding target labels
            {
                "exported_pod": "p",
                "exported_namespace": "ns",
                "exported_container": "c",
                "pod": "nvidia-dcgm-exporter-x7k2p",
                "namespace": "gpu-operator",
                "container": "exporter",
            },
            PodRef("ns", "p", "c"),
        ),
        (  # prometheus-operator's target labels on an idle GPU: the exporter's pod, not a workload
            {
                "pod": "nvidia-dcgm-exporter-x7k2p",
                "namespace": "gpu-operator",
                "service": "nvidia-dcgm-exporter",
                "endpoint": "gpu-metrics",
            },
            None,
        ),
        (
            {
                "exported_pod": "p",
                "exported_namespace": "ns",
                "pod": "nvidia-dcgm-exporter-x7k2p",
                "service": "nvidia-dcgm-exporter",
            },
            PodRef("ns", "p", ""),
        ),
        ({}, None),  # current releases: no pod labels on an idle GPU
        ({"pod": "", "namespace": "", "container": ""}, None),  # 2.x releases
        ({"pod_name": "", "pod_namespace": ""}, None),
        ({"pod": "p"}, PodRef("", "p", "")),
    ],
)
def test_pod_label_variants(labels: dict[str, str], pod: PodRef | None) -> None:
    assert pod_of(labels) == pod
    (gpu,), _ = gpu_samples([one("DCGM_FI_DEV_GPU_UTIL", 10, **labels)])
    assert gpu.pod == pod


def test_mig_instances_are_their_own_gpus() -> None:
    mig = {"GPU_I_PROFILE": "1g.10gb"}
    gpus, _ = gpu_samples(
        [
            one("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.5, GPU_I_ID="9", **mig),
            one("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.25, GPU_I_ID="10", **mig),
            one("DCGM_FI_DEV_FB_USED", 5000, GPU_I_ID="9", **mig),
        ]
    )
    by_instance = {g.key.mig_instance: g for g in gpus}
    assert set(by_instance) == {"9", "10"}
    assert by_instance["9"].values == {"gr_engine_active": 0.5, "fb_used_mib": 5000}
    assert by_instance["9"].mig_profile == "1g.10gb"
    assert by_instance["9"].uuid == "GPU-1"  # the parent GPU's
    assert by_instance["10"].busy == 0.25


def test_a_shared_gpu_appears_once_per_pod() -> None:
    gpus, _ = gpu_samples(
        [
            one("DCGM_FI_DEV_GPU_UTIL", 60, pod="a", namespace="ns"),
            one("DCGM_FI_DEV_GPU_UTIL", 60, pod="b", namespace="ns"),
        ]
    )
    assert sorted(g.pod.pod for g in gpus if g.pod) == ["a", "b"]
    assert {g.key for g in gpus} == {GpuKey("node-1", 0, "")}


def test_label_sets_of_one_gpu_with_extra_labels_merge() -> None:
    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n",instance="x:9400",job="a"} 50\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n",instance="x:9400",job="a",extra="1"} 7\n'
    )
    samples, _ = parse_exposition(text)
    (gpu,), _ = gpu_samples(samples)
    assert gpu.values == {"gpu_util": 0.5, "fb_used_mib": 7}


def test_timestamps_keep_the_newest() -> None:
    samples = [
        Sample("DCGM_FI_DEV_GPU_UTIL", BASE, 1, 100.0),
        Sample("DCGM_FI_DEV_FB_USED", BASE, 1, 105.0),
    ]
    (gpu,), _ = gpu_samples(samples)
    assert gpu.timestamp == 105.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(FIELDS)),
            st.one_of(st.floats(allow_nan=True), st.integers(-10, 10**10).map(float)),
            st.one_of(st.text(max_size=6), st.integers(-5, 40_000).map(str)),
            st.text(min_size=0, max_size=300),
        ),
        max_size=30,
    )
)
def test_every_sample_is_stored_in_range_or_counted(
    rows: list[tuple[str, float, str, str]],
) -> None:
    samples = [
        Sample(metric, {"gpu": gpu, "Hostname": host}, value) for metric, value, gpu, host in rows
    ]
    gpus, stats = gpu_samples(samples)
    # What is not stored is accounted for (the same series twice: the later value wins).
    stored = sum(len(g.values) for g in gpus)
    assert stored <= stats.used
    assert stats.used + stats.blank + sum(stats.skipped.values()) == stats.samples
    for gpu in gpus:
        assert 0 <= gpu.key.gpu_index <= MAX_GPU_INDEX
        assert len(gpu.key.node) <= LABEL_LIMITS["node"]
        for metric, spec in FIELDS.items():
            value = gpu.values.get(spec.attr)
            if value is not None:
                assert spec.minimum <= value <= spec.maximum, (metric, value)


def test_dcgm_values_beyond_their_range_are_left_out_or_clamped() -> None:
    gpus, stats = gpu_samples(
        [
            one("DCGM_FI_DEV_GPU_UTIL", 500),
            one("DCGM_FI_DEV_MEM_COPY_UTIL", -5),
            one("DCGM_FI_DEV_POWER_USAGE", float("-inf")),
            one("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.01),
            one("DCGM_FI_DEV_GPU_TEMP", 61),
        ]
    )
    assert gpus[0].values == {"gr_engine_active": 1.0, "temp_c": 61}
    assert stats.skipped == {
        "value out of range: DCGM_FI_DEV_GPU_UTIL": 1,
        "value out of range: DCGM_FI_DEV_MEM_COPY_UTIL": 1,
        "value not finite": 1,
    }
    assert stats.clamped == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1}


_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 1.0, 1.01, 55.0, 101.0, -3.0, DCGM_BLANK, 9223372036854775794.0]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["node-a", "node-b"]), st.integers(0, 3)), unique=True),
    st.lists(
        st.sampled_from([*FIELDS, "DCGM_FI_DEV_SM_CLOCK", "dcgm_fi_dev_gpu_util"]), unique=True
    ),
    st.data(),
)
def test_column_by_column_maps_as_label_set_by_label_set(
    gpus: list[tuple[str, int]], fields: list[str], data: st.DataObject
) -> None:
    """A scrape read as whole families (columns checked and scaled once per field) gives the
    same GPUs, values and counts as the same scrape read label set by label set."""
    lines = []
    for field in fields:
        lines.append(f"# TYPE {field} gauge")
        for node, index in gpus:
            value = data.draw(_VALUE)
            lines.append(f'{field}{{gpu="{index}",Hostname="{node}"}} {value!r}')
    text = "\n".join(lines) + "\n"
    by_columns = gpu_samples_from_scrape(parse_scrape(text))
    by_groups = gpu_samples_from_groups(parse_grouped(text)[0])

    def as_dicts(gpus: Iterable[GpuSample]) -> dict[GpuKey, dict[str, str]]:
        return {gpu.key: {k: repr(v) for k, v in gpu.values.items()} for gpu in gpus}  # NaN-safe

    assert as_dicts(by_columns[0]) == as_dicts(by_groups[0])
    assert by_columns[1] == by_groups[1]
