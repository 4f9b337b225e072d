from collections import Counter

from scheduling.core.types import TopologyPolicy
from sim.workload import synthetic_pods


def test_stream_is_reproducible_per_seed() -> None:
    assert list(synthetic_pods(200, seed=7)) == list(synthetic_pods(200, seed=7))
    assert list(synthetic_pods(200, seed=7)) != list(synthetic_pods(200, seed=8))


def test_mix_is_mostly_single_and_shared_gpus_with_some_multi_gpu() -> None:
    pods = list(synthetic_pods(5000, seed=1))
    kinds = Counter(
        "multi" if p.gpus > 1 else "share" if p.gpu_milli else "one" if p.gpus else "cpu"
        for p in pods
    )
    assert kinds["one"] + kinds["share"] > 0.75 * len(pods)
    assert 0.05 * len(pods) < kinds["multi"] < 0.15 * len(pods)


def test_no_pod_asks_for_what_no_server_has() -> None:
    for pod in synthetic_pods(5000, seed=2):
        assert not (pod.gpus > 4 and pod.topology_policy is TopologyPolicy.SINGLE_NUMA_NODE)
