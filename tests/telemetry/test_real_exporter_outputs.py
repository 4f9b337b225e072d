"""dcgm-exporter /metrics texts as real exporters printed them (tests/data/dcgm_exporter/, each
cited in its sources.json), parsed and mapped against facts written by hand from each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.dcgm import GpuSample, MapStats
from telemetry.mapping import gpu_samples, gpu_samples_from_groups
from telemetry.parsing import ParseStats, parse_grouped, samples_from_vector
from telemetry.placement import BY_HOSTNAME, BY_NODE_LABEL, BY_TARGET, NODE_UNKNOWN, Attribution

OUTPUTS = Path(__file__).resolve().parents[1] / "data" / "dcgm_exporter"
NODE = "gpu-node-1"  # the node the scrape target runs on, in these tests
CLUSTER = Attribution(known=frozenset({NODE, "k8s-gpu1", "node-1"}))


def read(
    name: str, *, target: str = NODE, attribution: Attribution | None = None
) -> tuple[dict[tuple[str, int, str], GpuSample], ParseStats, MapStats]:
    groups, parsed = parse_grouped((OUTPUTS / f"{name}.prom").read_text())
    gpus, mapped = gpu_samples_from_groups(
        groups, default_node=target, attribution=attribution or Attribution(known=CLUSTER.known)
    )
    return (
        {(gpu.key.node, gpu.key.gpu_index, gpu.key.mig_instance): gpu for gpu in gpus},
        parsed,
        mapped,
    )


def test_every_exporter_output_is_cited() -> None:
    sources = json.loads((OUTPUTS / "sources.json").read_text())
    files = sorted(path.name for path in OUTPUTS.glob("*.prom"))
    assert len(files) >= 8 and files == sorted(k for k in sources if not k.startswith("_"))
    assert all(sources[f]["source"].startswith("https://github.com/") for f in files)


def test_a_2020_exporter_without_hostname_is_placed_on_its_scrape_target() -> None:
    gpus, parsed, mapped = read("gpu-monitoring-tools-138")
    assert (parsed.lines, parsed.samples, parsed.skipped) == (8, 8, 0)
    (gpu,) = gpus.values()
    assert gpu.key == (NODE, 0, "") and gpu.pod is None
    assert gpu.uuid == "GPU-6bf47ca9-ad3e-15db-beed-1079a7d74116"
    assert gpu.values == {"gpu_util": 0.44, "temp_c": 55.0, "power_w": 302.206}
    assert mapped.unknown_metric == 5 and mapped.attributed == {BY_TARGET: 1}


def test_fields_the_ingester_does_not_use_are_counted_not_stored() -> None:
    gpus, parsed, mapped = read("dcgm-exporter-58-titan-v")
    assert not gpus and parsed.samples == 5 and mapped.unknown_metric == 5


def test_lower_case_names_mig_instances_and_old_namespace_labels() -> None:
    gpus, _, mapped = read("dcgm-exporter-272-mig-lowercase")
    assert sorted(gpus) == [(NODE, 0, "1"), (NODE, 0, "2"), (NODE, 1, "1")]
    assert gpus[(NODE, 0, "2")].mig_profile == "4g.40gb"
    assert gpus[(NODE, 1, "1")].uuid == "GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb"
    assert gpus[(NODE, 1, "1")].model_name == "NVIDIA A100 80GB PCIe"
    assert all(g.values == {"gr_engine_active": 0.0} and g.pod is None for g in gpus.values())
    assert mapped.unknown_metric == 0 and mapped.used == 3


def test_a_hostname_holding_the_exporter_pods_name_invents_no_node() -> None:
    gpus, _, mapped = read("fake-gpu-operator-93-sorted-labels")
    assert sorted(gpus) == [(NODE, i, "") for i in range(4)]
    assert all(g.values == {"fb_free_mib": 11441.0} for g in gpus.values())
    assert mapped.attributed == {BY_TARGET: 4}
    # Scraped through a Service address that is no node: nothing is placed, nothing invented.
    gpus, _, mapped = read("fake-gpu-operator-93-sorted-labels", target="10.96.0.15")
    assert not gpus and mapped.skipped == {NODE_UNKNOWN: 4}
    assert mapped.unknown_nodes == ["nvidia-dcgm-exporter-5e5b02"]


def test_a_hostname_holding_the_nodes_name_places_it() -> None:
    gpus, _, mapped = read("dcgm-exporter-363-driver-version", target="172.16.140.23")
    (gpu,) = gpus.values()
    assert gpu.key == ("k8s-gpu1", 0, "") and gpu.model_name == "NVIDIA RTX A5000"
    assert gpu.values == {"gpu_util": 0.0, "fb_used_mib": 21383.0}
    assert mapped.attributed == {BY_HOSTNAME: 1}


def test_the_1x_metric_names_are_other_metrics() -> None:
    gpus, parsed, mapped = read("dcgm-exporter-188-old-names")
    assert not gpus and parsed.samples == 7 and mapped.unknown_metric == 7


def test_a_mig_instance_of_an_a30() -> None:
    gpus, _, _ = read("dcgm-exporter-68-mig-a30")
    (gpu,) = gpus.values()
    assert gpu.key == (NODE, 0, "1") and gpu.mig_profile == "2g.12gb"
    assert gpu.values == {"tensor_active": 0.0, "dram_active": 0.0}


def test_the_readmes_spaced_labels_are_read_and_its_ellipses_skipped() -> None:
    gpus, parsed, mapped = read("dcgm-exporter-readme-spaced-labels")
    assert (parsed.samples, parsed.skipped) == (3, 2) and not gpus
    assert mapped.unknown_metric == 3


def test_without_the_clusters_nodes_the_labels_are_taken_as_they_are() -> None:
    """No node list (a source outside a cluster gpusched manages): Hostname wins, as before."""
    gpus, _, mapped = read("fake-gpu-operator-93-sorted-labels", attribution=Attribution())
    assert {key[0] for key in gpus} == {"nvidia-dcgm-exporter-5e5b02"}
    assert mapped.attributed == {BY_HOSTNAME: 4}


# A series as a Prometheus query returns it, labels verbatim from NVIDIA/dcgm-exporter#277
# (2024-03-04): the exporter behind the gpu-operator's Service, Hostname naming the node.
PROMETHEUS_SERIES = {
    "__name__": "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DRIVER_VERSION": "535.154.05",
    "Hostname": "node-1",
    "UUID": "GPU-16355474-d5ef-9c9f-3367-6ff0eaa0e4a7",
    "device": "nvidia2",
    "gpu": "2",
    "instance": "nvidia-dcgm-exporter.gpu-operator:9400",
    "job": "dcgm-nvidia-gpu-operator",
    "modelName": "Quadro RTX 6000",
}


@pytest.mark.parametrize(
    ("extra", "node", "rule"),
    [
        ({}, "node-1", BY_HOSTNAME),
        # Relabelled from __meta_kubernetes_pod_node_name (NVIDIA's kube-prometheus guide).
        (
            {"kubernetes_node": "gpu-node-1", "Hostname": "nvidia-dcgm-exporter-x7k2p"},
            NODE,
            BY_NODE_LABEL,
        ),
        ({"nodename": "gpu-node-1"}, NODE, BY_NODE_LABEL),
    ],
)
def test_a_prometheus_series_is_placed_by_the_first_rule_naming_a_node(
    extra: dict[str, str], node: str, rule: str
) -> None:
    item = {"metric": {**PROMETHEUS_SERIES, **extra}, "value": [1709510400.0, "37"]}
    samples, _ = samples_from_vector([item])
    (gpu,), mapped = gpu_samples(samples, attribution=Attribution(known=CLUSTER.known))
    assert gpu.key == (node, 2, "") and gpu.values == {"gpu_util": 0.37}
    assert mapped.attributed == {rule: 1}
