"""`manage.py runkube` against the fake API server through a kubeconfig file."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kube.leader import LeaseLost
from kube.management.commands.runkube import run_step
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import ClusterQueue, Node, QueueSource
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.common.test_process_probes import probe
from tests.dashboard.servers import free_port
from tests.kube import objects
from tests.kube.helpers import kubeconfig, seeds_profile_text
from tests.kube.kueue_cluster import cluster_queue, create, flavor
from tests.test_observability import running, scrape_until, value

pytestmark = pytest.mark.django_db


def run(tmp_path: Path, fake: SimulatedKubernetes, identity: str, *extra: str) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(seeds_profile_text())
    call_command(
        "runkube",
        "--once",
        "--kubeconfig",
        str(kubeconfig(tmp_path, fake.url)),
        "--profile",
        str(profile),
        "--lease-namespace",
        "gpu-system",
        "--identity",
        identity,
        *extra,
    )


def test_runkube_once_binds_pending_pods_and_releases_the_lease(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("p", gpus=2))
    run(tmp_path, fake, "runkube-a")
    assert fake.pod("ml-team", "p")["spec"]["nodeName"] == "gpu-a"
    assert ("GET", "/api/v1/nodes?limit=500") in fake.requests
    lease = fake.leases["gpu-system/gpusched-scheduler"]
    assert lease["spec"]["holderIdentity"] == ""  # given up on exit: a standby leads at once

    fake.add_pod(objects.pod("q", gpus=2))
    run(tmp_path, fake, "runkube-b")
    assert fake.pod("ml-team", "q")["spec"]["nodeName"] == "gpu-a"
    assert fake.leases["gpu-system/gpusched-scheduler"]["spec"]["leaseTransitions"] == 1


def test_runkube_beside_kueue_places_what_kueue_ungated_and_reads_no_queue(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("gated", gpus=2, gates=["kueue.x-k8s.io/admission"]))
    fake.add_pod(objects.pod("admitted", gpus=2))
    run(tmp_path, fake, "runkube-a", "--admission", "kueue")
    assert fake.pod("ml-team", "admitted")["spec"]["nodeName"] == "gpu-a"
    assert "nodeName" not in fake.pod("ml-team", "gated")["spec"]
    assert QueueSource.objects.get().kind == "kueue"
    assert not [path for _, path in fake.requests if "kueue.x-k8s.io" in path]


def test_runkube_refuses_a_kueue_config_it_would_not_read(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    with pytest.raises(CommandError, match="not NAMESPACE/NAME"):
        run(tmp_path, fake, "runkube-a", "--kueue-config", "kueue-manager-config")
    with pytest.raises(CommandError, match="--admission gpusched"):
        run(tmp_path, fake, "runkube-a", "--admission", "kueue", "--kueue-config", "a/b")


def test_losing_the_lease_ends_the_command() -> None:
    class Losing:
        def run_once(self) -> None:
            raise LeaseLost("replica-a lost lease gpu-system/gpusched-scheduler")

    with pytest.raises(CommandError, match="lost lease .*; exiting"):
        run_step(Losing())  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_runkube_serves_its_metrics_and_probes(tmp_path: Path, fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("p", gpus=2))
    profile = tmp_path / "profile.yaml"
    profile.write_text(seeds_profile_text())
    port = free_port()
    argv = ["runkube", "--loop", "--interval", "0.1", "--profile", str(profile)]
    argv += ["--kubeconfig", str(kubeconfig(tmp_path, fake.url)), "--lease-namespace", "gpu-system"]
    with running([*argv, "--metrics-port", str(port)], log=tmp_path / "runkube.log", env={}):
        series = scrape_until(
            f"http://127.0.0.1:{port}/metrics",
            lambda s: value(s, "gpusched_scheduling_attempts_total", result="scheduled") == 1,
        )
        assert value(series, "gpusched_scheduler_leader") == 1
        assert fake.pod("ml-team", "p")["spec"]["nodeName"] == "gpu-a"
        assert probe(port, "/readyz") == (200, {"status": "ready", "state": "leading"})
        assert probe(port, "/healthz") == (200, {"status": "ok"})


def test_runkube_refuses_a_database_holding_the_simulators_nodes_unless_adopting(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    Node.objects.create(
        name="sim-a", source=Node.Source.SIMULATOR, cpu_milli=64_000, memory_mib=256_000
    )
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("p", gpus=2))
    with pytest.raises(CommandError, match=r"1 of simulator.*--adopt"):
        run(tmp_path, fake, "runkube-a")
    assert Node.objects.filter(name="sim-a").exists()
    assert "nodeName" not in fake.pod("ml-team", "p")["spec"]

    run(tmp_path, fake, "runkube-a", "--adopt")
    assert fake.pod("ml-team", "p")["spec"]["nodeName"] == "gpu-a"


def test_runkube_refuses_applyqueues_queues_where_the_cluster_serves_kueue_unless_adopting(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    services.queues_apply(config=parse_documents([flavor(), cluster_queue("applied")]))
    create(fake, "resourceflavors", flavor())
    create(fake, "clusterqueues", cluster_queue("team"))
    with pytest.raises(CommandError, match=r"1 ClusterQueue of another source.*--adopt"):
        run(tmp_path, fake, "runkube-a")
    assert list(ClusterQueue.objects.values_list("name", flat=True)) == ["applied"]

    run(tmp_path, fake, "runkube-a", "--adopt")
    assert list(ClusterQueue.objects.values_list("name", flat=True)) == ["team"]
    run(tmp_path, fake, "runkube-b")  # the cluster's own queues now: no refusal


def test_runkube_keeps_applyqueues_queues_where_the_cluster_has_no_kueue(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    fake.kueue_versions = ()
    services.queues_apply(config=parse_documents([flavor(), cluster_queue("applied")]))
    run(tmp_path, fake, "runkube-a")
    assert list(ClusterQueue.objects.values_list("name", flat=True)) == ["applied"]
