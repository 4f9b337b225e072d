"""Build the Kubernetes scheduler against the fake API server."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kube.api import KubeApi
from kube.leader import KubernetesLease, LeaseElector
from kube.side import KubernetesSide, kubernetes_cycle
from scheduling.core.profiles import load_profiles
from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def profile_text(path: str) -> str:
    """The profile in a ConfigMap manifest under deploy/."""
    for doc in yaml.safe_load_all((DEPLOY / path).read_text()):
        if doc and doc.get("kind") == "ConfigMap":
            return str(doc["data"]["profile.yaml"])
    raise AssertionError(f"no profile ConfigMap in deploy/{path}")


def seeds_profile_text() -> str:
    """The seeds' profile, unchanged (deploy/examples/seed-profile.yaml)."""
    return profile_text("examples/seed-profile.yaml")


def shipped_profile_text() -> str:
    """The profile deploy/ mounts into the scheduler: gpusched's default one."""
    return profile_text("scheduler-profile.yaml")


def framework() -> Framework:
    return Framework(load_profiles(seeds_profile_text())[0])


class Clock:
    """A settable monotonic clock (seconds) and the matching wall clock."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return datetime.fromtimestamp(1_767_225_600 + self.t, UTC)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def scheduler(
    fake: SimulatedKubernetes,
    identity: str = "gpusched-0",
    *,
    lease: bool = True,
    clock: Clock | None = None,
    now: Callable[[], datetime] | None = None,
) -> SchedulingCycle:
    api = KubeApi(fake.api_client(), reporting_instance=identity)
    elector = None
    if lease:
        clock = clock or Clock()
        elector = LeaseElector(
            api.coordination,
            name="gpusched-scheduler",
            namespace="gpu-system",
            identity=identity,
            clock=clock.now,
            monotonic=clock.monotonic,
        )
    options = {"clock": now} if now is not None else {}
    return kubernetes_cycle(
        api, framework(), elector, identity=identity, watch_timeout_s=5, **options
    )


def gpusched_cycle(
    fake: SimulatedKubernetes, clock: Clock | None = None, **options: Any
) -> SchedulingCycle:
    """The cycle with gpusched's own profile (schedulerName `gpusched`), without a lease;
    `options` go to kubernetes_cycle (`admission="kueue"`, `list_interval_s=0`, ...)."""
    api = KubeApi(fake.api_client(), reporting_instance="gpusched-test")
    return kubernetes_cycle(
        api,
        Framework(load_profile("gpusched")),
        None,
        identity="gpusched-test",
        watch_timeout_s=5,
        clock=(clock or Clock()).now,
        **options,
    )


def side_of(cycle: SchedulingCycle) -> KubernetesSide:
    assert isinstance(cycle.side, KubernetesSide)
    return cycle.side


def elector_of(cycle: SchedulingCycle) -> LeaseElector:
    assert isinstance(cycle.elector, KubernetesLease) and cycle.elector.elector is not None
    return cycle.elector.elector


def kubeconfig(tmp_path: Path, server: str) -> Path:
    """A kubeconfig file pointing at `server` (commands that connect like kubectl)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "gpusched", "user": {"token": "not-checked"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpusched"}}],
                "current-context": "fake",
            }
        )
    )
    return path
