"""The openb replay protocol (reference/fgd-and-baselines.md §6) on small synthetic traces."""

from __future__ import annotations

import json
import math
import random
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from bench.replay import openb, report
from scheduling.core.profiles import load_profiles
from scheduling.core.types import MILLI_PER_GPU
from scheduling.profile_files import load_profile

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "openb"


def write_nodes(path: Path, rows: list[tuple[str, int, int, int, str]]) -> Path:
    path.write_text(
        NODE_HEADER + "".join(f"{n},{c},{m},{g},{model}\n" for n, c, m, g, model in rows)
    )
    return path


def write_pods(path: Path, rows: list[tuple[str, int, int, int, int, str]]) -> Path:
    path.write_text(
        POD_HEADER
        + "".join(
            f"{n},{c},{m},{g},{milli},{spec},LS,Running,0,1,0\n" for n, c, m, g, milli, spec in rows
        )
    )
    return path


def small_cluster(
    tmp_path: Path, nodes: int = 24, pods: int = 300, seed: int = 0
) -> tuple[Path, Path]:
    """A cluster of 8-, 4- and 2-GPU nodes and a pod list shaped like openb's (shares, whole GPUs,
    CPU-only pods), about 98% of the GPU capacity."""
    rng = random.Random(seed)
    node_rows = []
    for i in range(nodes):
        gpus, cpu, model = ((8, 96_000, "G2"), (4, 48_000, "V100M32"), (2, 104_000, "T4"))[i % 3]
        node_rows.append((f"node-{i:03d}", cpu, 256 * 1024, gpus, model))
    capacity = sum(r[3] for r in node_rows) * MILLI_PER_GPU
    pod_rows = []
    demand = 0
    k = 0
    while demand < 0.98 * capacity and k < pods:
        kind = rng.random()
        if kind < 0.4:
            row = (
                f"pod-{k:04d}",
                rng.choice((3152, 4000, 8000)),
                1024,
                1,
                rng.choice((810, 470, 320, 230)),
                "",
            )
        elif kind < 0.85:
            row = (f"pod-{k:04d}", rng.choice((8000, 11300, 12000)), 1024, 1, 1000, "")
        elif kind < 0.9:
            row = (f"pod-{k:04d}", 16_000, 1024, rng.choice((2, 4, 8)), 1000, "")
        else:
            row = (f"pod-{k:04d}", rng.choice((4000, 16000)), 1024, 0, 0, "")
        pod_rows.append(row)
        demand += row[3] * row[4]
        k += 1
    return (
        write_nodes(tmp_path / "openb_node_list_gpu_node.csv", node_rows),
        write_pods(tmp_path / "openb_pod_list_small.csv", pod_rows),
    )


# --- Loading ------------------------------------------------------------------------------------


def test_load_pods_reads_like_the_simulator(tmp_path: Path) -> None:
    path = write_pods(
        tmp_path / "p.csv",
        [
            ("b", 1000, 10, 1, 1500, "V100M16|V100M32"),  # > 1000 is clipped to a whole GPU
            ("a", 2000, 20, 1, 460, ""),
            ("c", 3000, 30, 0, 500, ""),  # no GPU: the milli is ignored
            ("d", 4000, 40, 2, 1000, ""),
        ],
    )
    pods = openb.load_pods(path)
    assert [(p.name, p.num_gpu, p.gpu_milli, p.demand) for p in pods] == [
        ("b", 1, 1000, 1000),
        ("a", 1, 460, 460),
        ("c", 0, 0, 0),
        ("d", 2, 1000, 2000),
    ]
    assert pods[0].gpu_spec == frozenset({"V100M16", "V100M32"})
    requests = [p.request() for p in pods]
    assert (requests[0].gpus, requests[0].gpu_milli) == (1, 0)
    assert (requests[1].gpus, requests[1].gpu_milli) == (0, 460)
    assert not requests[2].wants_gpu
    assert requests[3].gpus == 2


def test_load_nodes_gives_shareable_gpus(tmp_path: Path) -> None:
    nodes = openb.load_nodes(write_nodes(tmp_path / "n.csv", [("n1", 64000, 1024, 2, "P100")]))
    assert nodes[0].name == "n1" and nodes[0].cpu_milli == 64000
    assert [g.model for g in nodes[0].gpus] == ["P100", "P100"]
    assert all(g.sharing.shareable for g in nodes[0].gpus)


def test_missing_file_and_column_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(openb.TraceError, match="no such file"):
        openb.load_pods(tmp_path / "absent.csv")
    (tmp_path / "bad.csv").write_text("name,cpu_milli\nx,1\n")
    with pytest.raises(openb.TraceError, match="missing column"):
        openb.load_pods(tmp_path / "bad.csv")


def test_trace_name() -> None:
    assert openb.trace_name("/x/openb_pod_list_gpushare40.csv") == "gpushare40"


# --- Building the arrival stream ----------------------------------------------------------------


def pods_of(demands: list[tuple[int, int]]) -> list[openb.TracePod]:
    return [openb.TracePod(f"p{k:02d}", 1000, 0, n, m) for k, (n, m) in enumerate(demands)]


def test_stream_keeps_every_pod_and_appends_draws_up_to_the_cap() -> None:
    pods = pods_of([(1, 1000), (1, 500), (0, 0), (2, 1000)])  # 3500 milli of a 4-GPU cluster
    stream = openb.arrival_order(pods, np.random.default_rng(1), 1.3, 4000)
    assert sorted(p.name for p in stream[:4]) == ["p00", "p01", "p02", "p03"]  # all, shuffled
    demand = sum(p.demand for p in stream)
    assert demand <= 1.3 * 4000
    assert len(stream) > 4
    # the quirk: the stop test adds the per-GPU milli, so a 2x1000 pod can take demand past the cap
    # by at most 1000 - but the last appended pod passed that test
    before_last = demand - stream[-1].demand
    assert before_last + stream[-1].gpu_milli <= 1.3 * 4000


def test_stream_stop_uses_the_per_gpu_milli_quirk() -> None:
    pods = pods_of([(2, 1000)] * 5)  # 10000 milli for 10000 capacity: cap 13000
    stream = openb.arrival_order(pods, np.random.default_rng(0), 1.3, 10_000)
    # 10000 + 1000 <= 13000: append (12000); 12000 + 1000 <= 13000: append (14000); then stop
    assert len(stream) == 7
    assert sum(p.demand for p in stream) == 14_000


def test_stream_thins_a_trace_above_the_cap() -> None:
    pods = pods_of([(1, 1000)] * 20)  # 20000 milli for 10000 capacity
    stream = openb.arrival_order(pods, np.random.default_rng(5), 1.3, 10_000)
    assert sum(p.demand for p in stream) == 13_000
    assert len({p.name for p in stream}) == 13  # deleted, never duplicated


def test_streams_and_tie_orders_are_reproducible_per_seed(tmp_path: Path) -> None:
    nodes_path, pods_path = small_cluster(tmp_path)
    pods = openb.load_pods(pods_path)
    nodes = openb.load_nodes(nodes_path)
    a = openb.arrival_order(pods, np.random.default_rng(42), 1.3, 100_000)
    b = openb.arrival_order(pods, np.random.default_rng(42), 1.3, 100_000)
    c = openb.arrival_order(pods, np.random.default_rng(43), 1.3, 100_000)
    assert [p.name for p in a] == [p.name for p in b] != [p.name for p in c]
    ranks = openb.tie_ranks(nodes, np.random.default_rng(42))
    assert sorted(ranks.tolist()) == list(range(len(nodes)))
    assert ranks.tolist() == openb.tie_ranks(nodes, np.random.default_rng(42)).tolist()


# --- Discretization -----------------------------------------------------------------------------


def test_discretize_rounds_half_to_even_and_averages_buckets() -> None:
    gpus = 10  # 1% of arrival = 100 milli
    # arrived 50 -> 0.5% -> bucket 0 (half to even); 150 -> 1.5 -> 2; 250 -> 2.5 -> 2; 349 -> 3
    arrived = [50, 150, 250, 349]
    allocated = [50, 100, 200, 349]  # -> 0.5%, 1.0%, 2.0%, 3.49%
    values = openb.discretize(arrived, allocated, gpus, max_percent=5)
    assert values[0] == 0.5
    assert values[1] == round((0.5 + 1.0 + 2.0) / 3, 2) == 1.17  # empty: records of buckets 0..2
    assert values[2] == 1.5  # mean of 1.0 and 2.0
    assert values[3] == 3.49
    assert values[4] == 3.49  # empty: neighbours 3..5
    assert math.isnan(values[5])  # nothing in buckets 4..6


def test_discretize_rounds_allocation_to_two_decimals_first() -> None:
    # 6212 GPUs: allocated 62125 milli is 1.000080...% -> 1.0; the mean uses the rounded values
    values = openb.discretize([62120, 62120], [62125, 62179], 6212, max_percent=1)
    assert values[1] == round((1.0 + 1.0) / 2, 2)


# --- Replay -------------------------------------------------------------------------------------

FGD = load_profile("fgd")


def test_failed_pods_count_as_arrived_and_the_stream_goes_on(tmp_path: Path) -> None:
    nodes = openb.load_nodes(write_nodes(tmp_path / "n.csv", [("n1", 32000, 1024, 2, "T4")]))
    pods = [
        openb.TracePod("a", 1000, 0, 8, 1000),  # needs 8 GPUs: fails
        openb.TracePod("b", 1000, 0, 1, 500),
        openb.TracePod("c", 1000, 0, 1, 1000),
    ]
    tune = 9500 / 2000  # the list's demand exactly: nothing appended, nothing deleted
    run = openb.replay_seed(nodes, pods, FGD, seed=1, tune=tune)
    assert run.pods == 3 and run.failed == 1
    order = openb.arrival_order(pods, np.random.default_rng(1), tune, 2000)
    expected_arrived = np.cumsum([p.demand for p in order])
    assert run.arrived.tolist() == expected_arrived.tolist()
    assert run.allocated[-1] == 1500  # b and c placed whatever the order


def test_small_replay_is_reproducible_and_reports_every_percent(tmp_path: Path) -> None:
    nodes_path, pods_path = small_cluster(tmp_path)
    nodes, pods = openb.load_nodes(nodes_path), openb.load_pods(pods_path)
    first = openb.replay(nodes, pods, FGD, [1, 2], policy="fgd", trace="small")
    again = openb.replay(nodes, pods, FGD, [1, 2], policy="fgd", trace="small")
    doc = first.to_json()
    assert doc["alloc_ratio"] == again.to_json()["alloc_ratio"]
    assert list(doc["alloc_ratio"]) == [str(k) for k in range(131)]
    assert list(doc["frag_rate"]) == [str(k) for k in range(131)]
    assert doc["seeds"] == [1, 2]
    assert [run["seed"] for run in doc["per_seed"]] == [1, 2]
    assert 50 < doc["alloc_ratio"]["100"] <= 100
    assert doc["alloc_ratio"]["130"] >= doc["alloc_ratio"]["100"] - 1e-9
    assert all(run["failed_pods"] > 0 for run in doc["per_seed"])  # 130% cannot all fit


def test_parallel_replay_equals_serial(tmp_path: Path) -> None:
    nodes_path, pods_path = small_cluster(tmp_path, nodes=12, pods=150)
    nodes, pods = openb.load_nodes(nodes_path), openb.load_pods(pods_path)
    serial = openb.replay(nodes, pods, FGD, [3, 4]).to_json()["alloc_ratio"]
    parallel = openb.replay(nodes, pods, FGD, [3, 4], jobs=2).to_json()["alloc_ratio"]
    assert serial == parallel


@pytest.mark.parametrize(
    "policy", ["random-fit", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "gpusched"]
)
def test_every_shipped_policy_replays(tmp_path: Path, policy: str) -> None:
    nodes_path, pods_path = small_cluster(tmp_path, nodes=12, pods=150)
    nodes, pods = openb.load_nodes(nodes_path), openb.load_pods(pods_path)
    run = openb.replay_seed(nodes, pods, load_profile(policy), seed=7)
    assert run.failed < run.pods
    assert run.allocated[-1] <= sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU


def test_profile_workload_is_kept_when_set(tmp_path: Path) -> None:
    profile = load_profiles(
        """
profiles:
- schedulerName: mine
  plugins:
    score: {enabled: [{name: Fragmentation}]}
  pluginConfig:
  - {name: Fragmentation, args: {workload: [{cpuMilli: 1000, gpuMilli: 500, weight: 1}]}}
"""
    )[0]
    prepared = openb.prepare_profile(profile, [openb.TracePod("a", 1, 0, 1, 1000)], seed=1)
    assert prepared.plugin_args["Fragmentation"]["workload"] == [
        {"cpuMilli": 1000, "gpuMilli": 500, "weight": 1}
    ]
    installed = openb.prepare_profile(FGD, [openb.TracePod("a", 1, 0, 1, 1000)], seed=1)
    assert installed.plugin_args["Fragmentation"]["workload"] == [
        {"cpuMilli": 1, "gpuMilli": 1000, "gpus": 1, "models": [], "weight": 1.0}
    ]


# --- The published results and the command ------------------------------------------------------


def write_paper(path: Path, trace: str) -> Path:
    header = "workload,sc_policy,tune,seed,total_gpus," + ",".join(str(k) for k in range(131))
    rows = [header]
    for policy, base in (("05-BestFit", 90.0), ("06-FGD", 94.0)):
        for seed, shift in ((42, 0.0), (43, 1.0)):
            values = ",".join(str(min(k, base + shift)) for k in range(131))
            rows.append(f"openb_pod_list_{trace},{policy},1.3,{seed},60,{values}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_paper_curves_average_seeds(tmp_path: Path) -> None:
    curves = report.paper_curves(write_paper(tmp_path / "paper.csv", "small"), "small")
    assert set(curves) == {"05-BestFit", "06-FGD"}
    assert curves["06-FGD"][100] == 94.5
    assert report.paper_points(curves)["05-BestFit"] == {"100": 90.5, "130": 90.5}
    assert report.paper_curves(tmp_path / "paper.csv", "other") == {}


def test_replay_command_prints_one_json_object_and_plots(tmp_path: Path) -> None:
    nodes_path, pods_path = small_cluster(tmp_path, nodes=12, pods=150)
    paper = write_paper(tmp_path / "paper.csv", "small")
    out, err = StringIO(), StringIO()
    png = tmp_path / "img" / "plot.png"
    call_command(
        "replay", "openb", nodes=str(nodes_path), pods=str(pods_path), policy="fgd", seeds="1-2",
        paper=str(paper), plot=str(png), json=True, stdout=out, stderr=err,
    )  # fmt: skip
    doc = json.loads(out.getvalue())
    assert doc["policy"] == "fgd" and doc["trace"] == "small" and doc["seeds"] == [1, 2]
    assert set(doc["alloc_ratio"]) == {str(k) for k in range(131)}
    assert doc["paper"]["06-FGD"] == {"100": 94.5, "130": 94.5}
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"


def test_replay_command_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no such file"):
        call_command(
            "replay", "openb", policy="fgd", pods=str(tmp_path / "absent.csv"), seeds="1", json=True
        )
    with pytest.raises(CommandError, match="--seeds"):
        call_command("replay", "openb", policy="fgd", seeds="x-y", json=True)


@pytest.mark.skipif(not (DATA / "openb_pod_list_default.csv").is_file(), reason="openb data absent")
def test_target_workload_of_the_default_trace() -> None:
    """Spec §5 sanity check: 91 types, the top 35 kept (7766 of 8152 pods), top (3152, 1x810)."""
    pods = openb.load_pods(DATA / "openb_pod_list_default.csv")
    assert len({p.task_type() for p in pods}) == 91
    mix = openb.target_workload(pods)
    assert len(mix) == 35
    top, p = mix.items()[0]
    assert (top.cpu_milli, top.gpus, top.gpu_milli) == (3152, 1, 810)
    assert p == pytest.approx(1047 / 7766)
    cpu_only = sum(q for t, q in mix.items() if t.gpus == 0)
    assert cpu_only == pytest.approx(0.136, abs=0.001)


def test_overlay_and_markdown_table(tmp_path: Path) -> None:
    nodes_path, pods_path = small_cluster(tmp_path, nodes=12, pods=150)
    paper = write_paper(tmp_path / "paper.csv", "small")
    common = {"nodes": str(nodes_path), "pods": str(pods_path), "paper": str(paper), "seeds": "1"}
    first = StringIO()
    call_command("replay", "openb", policy="best-fit", json=True, stdout=first, **common)
    saved = tmp_path / "best-fit.json"
    saved.write_text(first.getvalue())
    second = StringIO()
    png = tmp_path / "both.png"
    call_command(
        "replay", "openb", policy="gpusched", json=True, plot=str(png), overlay=[str(saved)],
        stdout=second, **common,
    )  # fmt: skip
    assert png.is_file()
    docs = [json.loads(first.getvalue()), json.loads(second.getvalue())]
    table = report.markdown_table(docs).splitlines()
    assert table[2].startswith("| small | best-fit | 1 | ")
    assert "| 90.50 |" in table[2]  # the paper's best-fit mean
    assert table[3].startswith("| small | gpusched (vs paper FGD) | 1 | ")
    assert "| 94.50 |" in table[3]
    with pytest.raises(CommandError, match="--overlay"):
        call_command("replay", "openb", policy="fgd", plot=str(png), overlay=[str(paper)], **common)
