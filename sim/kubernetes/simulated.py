"""One simulated Kubernetes API: the store and its controllers (the Job controller among them:
`jobs.tick()` lets time act on Jobs), the HTTP API server, and the objects a fresh cluster has
(the default namespaces, the system PriorityClasses)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from sim.kubernetes import controllers
from sim.kubernetes.http import ApiServer
from sim.kubernetes.jobs import JobController
from sim.kubernetes.kinds.scheduling import SYSTEM_CLASSES
from sim.kubernetes.registry import Registry
from sim.kubernetes.resources import TABLE, named
from sim.kubernetes.state import StateHelpers
from sim.kubernetes.store import Storage

Obj = dict[str, Any]
KUEUE_GROUP = "kueue.x-k8s.io"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class SimulatedKubernetes(StateHelpers):
    """`start()` serves http://127.0.0.1:<port>; `state helpers` (StateHelpers) read and write the
    cluster directly. `watch_linger_s` ends watches early (tests and lock-step experiments step
    informers synchronously); `record` keeps the requests, Bindings and status patches seen."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        port: int = 0,
        watch_linger_s: float | None = None,
        bookmark_interval_s: float = 60.0,
        history_limit: int = 20_000,
        record: bool = False,
    ) -> None:
        self.registry = Registry(Storage(history_limit=history_limit), clock=clock)
        controllers.install(self.registry)
        self.jobs = JobController(self.registry)
        self.registry.reactions.append(self.jobs.react)
        self.server = ApiServer(
            self.registry,
            port=port,
            watch_linger_s=watch_linger_s,
            bookmark_interval_s=bookmark_interval_s,
            record=record,
        )
        for name in SYSTEM_NAMESPACES:
            self.add_namespace(name)
        classes = named("scheduling.k8s.io/priorityclasses")
        for name, value in SYSTEM_CLASSES.items():
            self.registry.create(classes, "", {"metadata": {"name": name}, "value": value})

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> SimulatedKubernetes:
        self.server.start()
        return self

    def close(self) -> None:
        self.server.close()

    def api_client(self) -> client.ApiClient:
        return self.server.api_client()

    def write_kubeconfig(self, path: Path, *, name: str = "gpusched-sim") -> Path:
        """A kubeconfig the official client and kubectl load (no credentials: the simulated
        API server does not authenticate)."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": {}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    # --- what the server was asked (record=True) -------------------------------------------

    @property
    def requests(self) -> list[tuple[str, str]]:
        return self.server.requests

    @property
    def bindings(self) -> list[Obj]:
        return self.server.bindings

    @property
    def status_patches(self) -> list[tuple[str, str, Obj]]:
        return self.server.status_patches

    @property
    def on_binding(self) -> Callable[[str, str], None] | None:
        """Called with (namespace, name) before a Binding is processed: lets a test race it."""
        return self.server.on_binding

    @on_binding.setter
    def on_binding(self, hook: Callable[[str, str], None] | None) -> None:
        self.server.on_binding = hook

    @property
    def nrt_versions(self) -> tuple[str, ...]:
        """The NodeResourceTopology versions served (a cluster may serve only v1alpha1)."""
        return self.server.served[named("noderesourcetopologies").key]

    @nrt_versions.setter
    def nrt_versions(self, versions: tuple[str, ...]) -> None:
        self.server.served[named("noderesourcetopologies").key] = versions

    @property
    def kueue_versions(self) -> tuple[str, ...]:
        """The versions Kueue's queue objects are served at: `()` is a cluster without Kueue's
        CRDs (every request 404), `("v1beta1",)` a Kueue before 0.15."""
        return self.server.served[named("clusterqueues").key]

    @kueue_versions.setter
    def kueue_versions(self, versions: tuple[str, ...]) -> None:
        for resource in TABLE:
            if resource.group == KUEUE_GROUP:
                self.server.served[resource.key] = versions
