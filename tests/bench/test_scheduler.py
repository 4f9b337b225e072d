import json

import pytest
from django.core.management import call_command

from bench.reference import NaiveCluster
from bench.scheduler import run
from scheduling.core.types import PodRequest
from scheduling.profile_files import load_profile
from sim.cluster import build_nodes, synthetic_pools


def test_small_run_places_everything_in_the_best_scope() -> None:
    result = run(load_profile("topology"), nodes=40, pods=150, topology="mixed")
    assert result.placed + result.unschedulable == 150
    assert result.placed == 150
    assert result.multi_gpu_placed > 0
    assert result.best_scope_ratio == 1.0


def test_command_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    call_command(
        "bench_scheduler", "--nodes", "20", "--pods", "50", "--profile", "topology", "--json"
    )
    report = json.loads(capsys.readouterr().out)
    for key in ("pods_per_s", "p50_ms", "p99_ms", "cpu_p99_ms", "placed", "best_scope_ratio"):
        assert key in report


def test_reference_runs_the_same_stream_in_the_same_run() -> None:
    result = run(load_profile("gpusched"), nodes=30, pods=120, topology="mixed", reference=True)
    assert result.reference is not None
    assert result.reference.placed == 120
    assert result.ratio_to_reference == round(result.pods_per_s / result.reference.pods_per_s, 3)
    assert result.max_rss_mib > 0


def test_reference_takes_whole_gpus_from_one_numa_node() -> None:
    nodes = build_nodes(synthetic_pools(1, "dgx-h100"))
    cluster = NaiveCluster(nodes)
    two = PodRequest(uid="a", cpu_milli=1000, memory_mib=1, gpus=2)
    assert cluster.place(PodRequest(uid="b", cpu_milli=1000, memory_mib=1, gpus=3)) == (
        0,
        (0, 1, 2),
    )
    # NUMA node 0 has one free GPU left, NUMA node 1 four: the pair comes from NUMA node 1.
    assert cluster.place(two) == (0, (4, 5))
    share = PodRequest(uid="c", cpu_milli=1000, memory_mib=1, gpu_milli=300)
    assert cluster.place(share) == (0, (3,))  # free GPUs 3, 6, 7 equally full: the lowest
    assert cluster.place(share) == (0, (3,))  # then the fullest that has room
