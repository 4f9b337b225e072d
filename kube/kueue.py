"""Kueue's queue objects on the Kubernetes side, and who admits (`runkube --admission`).

- `gpusched` (the default): gpusched's queues admit. Where Kueue's CRDs are installed, the queues
  are the cluster's Kueue objects: ResourceFlavors, ClusterQueues, Cohorts, WorkloadPriorityClasses,
  Topologies and the LocalQueues of every namespace (kueue.x-k8s.io v1beta2, else v1beta1; a
  Topology also v1alpha1), with the
  cluster's PriorityClasses and, when named (`--kueue-config`), the admissionFairSharing section
  of Kueue's manager configuration. They are listed every interval, read by the one reader
  (scheduling.core.queueing.kueue_objects) and mirrored whole (services.queues_replace: what is
  gone from the cluster goes). Objects the reader refuses are reported (log, the
  `gpusched_queue_objects_refused` metric, the source shown by the API and the dashboard) and the
  last good queues stay: scheduling never stops for them. A LocalQueue naming a ClusterQueue that
  does not exist is left out and noted, as Kueue keeps such a queue inactive. Without the CRDs,
  the queues are `applyqueues`' and the REST API's, as on the database side.
- `kueue`: Kueue admits. Its webhook gates the pods it manages (`kueue.x-k8s.io/admission`) and
  it removes the gate once their workload is admitted, merging the flavor's node labels into
  `spec.nodeSelector` in the same patch (kubernetes-sigs/kueue
  pkg/controller/jobs/pod/pod_controller.go, `prepare`). gpusched leaves gated pods alone, takes
  the ungated ones as admitted (the cycle's admission admits every workload as it comes) and
  places them, gangs all or nothing, with topology, load and fragmentation; it reads no queue
  object, and Kueue's priority-class label does not change a pod's priority (as in Kueue).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from kube import services as kube_services
from kube.api import KubeApi
from kube.informer import PeriodicList
from scheduling import services
from scheduling.core.queueing.config import QueueConfig, QueueConfigError
from scheduling.core.queueing.kueue_objects import parse_cluster_objects
from scheduling.models import QueueSource
from scheduling.worker import metrics

logger = logging.getLogger(__name__)

GPUSCHED, KUEUE = "gpusched", "kueue"
ADMISSION_MODES = (GPUSCHED, KUEUE)
GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")
# Each collection, and the reader's keyword for its items.
COLLECTIONS = {
    "resourceflavors": "resource_flavors",
    "clusterqueues": "cluster_queues",
    "cohorts": "cohorts",
    "localqueues": "local_queues",
    "workloadpriorityclasses": "workload_priority_classes",
    "topologies": "topologies",
}
# Topology is served in v1alpha1 too (Kueue 0.9-0.10 served it only there).
EXTRA_VERSIONS = {"topologies": ("v1alpha1",)}
# Kueue's manager configuration: the ConfigMap of its manifests (config/components/manager:
# `manager-config` with the `kueue-` prefix, in kueue-system) and the file it holds.
MANAGER_CONFIG = "kueue-system/kueue-manager-config"
MANAGER_CONFIG_KEY = "controller_manager_config.yaml"

Fingerprint = tuple[object, ...]


def kueue_served(api: KubeApi) -> bool:
    """Whether the cluster serves Kueue's ClusterQueues (at any version `KueueObjects` reads):
    its CRDs installed, so that with `--admission gpusched` its objects become the queues."""
    for version in VERSIONS:
        try:
            api.custom.list_cluster_custom_object(GROUP, version, "clusterqueues", limit=1)
        except ApiException as exc:
            if exc.status == 404:  # this version (or the CRD) is not served
                continue
            raise
        return True
    return False


class KueueObjects:
    """What the Kubernetes side does with Kueue's objects in its admission mode; `sync(now)`
    once per cycle, before pods are mirrored (their WorkloadPriorityClasses must be known)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        admission: str = GPUSCHED,
        manager_config: str = "",
        interval_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if admission not in ADMISSION_MODES:
            raise ValueError(f"admission {admission!r} is not one of {', '.join(ADMISSION_MODES)}")
        namespace, _, name = manager_config.partition("/")
        if manager_config and not (namespace and name):
            raise ValueError(f"Kueue's manager ConfigMap {manager_config!r} is not NAMESPACE/NAME")
        self.api = api
        self.admission = admission
        self.manager_config = manager_config
        self.interval_s = interval_s
        self.monotonic = monotonic
        self.collections = {
            plural: [
                PeriodicList(
                    f"{GROUP}/{version}/{plural}",
                    partial(api.custom.list_cluster_custom_object, GROUP, version, plural),
                    interval_s=interval_s,
                    monotonic=monotonic,
                )
                for version in (*VERSIONS, *EXTRA_VERSIONS.get(plural, ()))
            ]
            for plural in COLLECTIONS
        }
        self.priority_classes = PeriodicList(
            "priorityclasses",
            api.scheduling.list_priority_class,
            interval_s=interval_s,
            monotonic=monotonic,
        )
        self._config_map: dict[str, Any] | None = None
        self._config_map_at: float | None = None
        self._seen: Fingerprint | None = None  # the inputs last applied or refused
        self._recorded: tuple[str, str] | None = None  # (kind, error) last recorded
        self._retry_at: float | None = None  # a removed ClusterQueue waits for its workloads

    @property
    def queues_admit(self) -> bool:
        return self.admission == GPUSCHED

    def resync(self) -> None:
        """Apply the cluster's objects again at the next sync, changed or not (whatever changed
        the stored queues meanwhile is put right)."""
        self._seen = None

    def sync(self, now: datetime) -> dict[str, int]:
        if self.admission == KUEUE:
            self._record(QueueSource.Kind.KUEUE, now)
            return {}
        served = self._refresh()
        if not served:
            self._record(QueueSource.Kind.DATABASE, now)
            return {}
        inputs = self._fingerprint(served)
        retry = self._retry_at is not None and self.monotonic() >= self._retry_at
        if inputs == self._seen and not retry:
            return {}
        try:
            config, notes = self._config(served)
            replaced = kube_services.queues_mirror(
                config=config, fair_sharing=bool(self.manager_config), notes=notes, now=now
            )
        except (QueueConfigError, services.ServiceError) as exc:
            self._seen, self._retry_at = inputs, None
            self._refused(str(exc), now)
            return {"queue_objects_refused": 1}
        self._seen = inputs
        self._retry_at = self.monotonic() + self.interval_s if replaced.terminating else None
        self._recorded = (QueueSource.Kind.CLUSTER, "")
        metrics.record_queue_objects(refused=False)
        if replaced.removed:
            logger.info("queues gone from the cluster: %s", ", ".join(replaced.removed))
        for note in notes:
            logger.warning("Kueue objects: %s", note)
        return {"queue_objects_applied": 1}

    # --- reading ------------------------------------------------------------------------------

    def _refresh(self) -> dict[str, PeriodicList]:
        """List what is due; the served version of each collection (v1beta2 first) that the
        cluster has. Empty: Kueue's CRDs are not installed."""
        served: dict[str, PeriodicList] = {}
        for plural, sources in self.collections.items():
            for source in sources:
                source.refresh()
                if source.served:
                    served[plural] = source
                    break
        if served:
            self.priority_classes.refresh()
            self._read_config_map()
        return served

    def _read_config_map(self) -> None:
        if not self.manager_config:
            return
        at = self._config_map_at
        if at is not None and self.monotonic() - at < self.interval_s:
            return
        self._config_map_at = self.monotonic()
        namespace, _, name = self.manager_config.partition("/")
        try:
            self._config_map = self.api.read_config_map(namespace, name) or {}
        except ApiException as exc:  # away for now: the last one read stands
            logger.warning("ConfigMap %s: %s", self.manager_config, exc.status)

    def _fingerprint(self, served: Mapping[str, PeriodicList]) -> Fingerprint:
        def versions(items: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
            return tuple(
                sorted(
                    (key, str((obj.get("metadata") or {}).get("resourceVersion")))
                    for key, obj in items.items()
                )
            )

        config_map = self._config_map
        return (
            tuple(
                (plural, source.name, versions(source.items)) for plural, source in served.items()
            ),
            versions(self.priority_classes.items),
            None if config_map is None else versions({"": config_map}),
        )

    def _config(self, served: Mapping[str, PeriodicList]) -> tuple[QueueConfig, list[str]]:
        lists = {
            COLLECTIONS[plural]: list(source.items.values()) for plural, source in served.items()
        }
        config = parse_cluster_objects(
            **lists,
            priority_classes=list(self.priority_classes.items.values()),
            configuration=self._fair_sharing(),
        )
        queues = {cq.name for cq in config.cluster_queues}
        dangling = [lq for lq in config.local_queues if lq.cluster_queue not in queues]
        notes = [
            f"LocalQueue {lq.key} names ClusterQueue {lq.cluster_queue!r}, which does not exist: "
            "left out (Kueue keeps it inactive); its workloads wait, Inadmissible"
            for lq in dangling
        ]
        kept = tuple(lq for lq in config.local_queues if lq.cluster_queue in queues)
        return replace(config, local_queues=kept), notes

    def _fair_sharing(self) -> dict[str, Any] | None:
        """The admissionFairSharing section of Kueue's manager configuration, as a Configuration
        document the reader takes (the rest configures Kueue's own process, not the queues)."""
        if not self.manager_config:
            return None
        where = f"ConfigMap {self.manager_config}"
        if not self._config_map:
            raise QueueConfigError(f"{where} (Kueue's manager configuration) does not exist")
        text = (self._config_map.get("data") or {}).get(MANAGER_CONFIG_KEY)
        if not isinstance(text, str):
            raise QueueConfigError(f"{where} has no {MANAGER_CONFIG_KEY}")
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise QueueConfigError(
                f"{where}: {MANAGER_CONFIG_KEY} is not valid YAML: {exc}"
            ) from exc
        if not isinstance(doc, dict):
            raise QueueConfigError(f"{where}: {MANAGER_CONFIG_KEY} is not a Configuration")
        section = {key: doc[key] for key in ("apiVersion", "admissionFairSharing") if key in doc}
        return {"kind": doc.get("kind", "Configuration"), **section}

    # --- telling ------------------------------------------------------------------------------

    def _refused(self, message: str, now: datetime) -> None:
        if self._recorded != (QueueSource.Kind.CLUSTER, message):
            logger.warning(
                "Kueue objects in the cluster refused, the last good queues stay: %s", message
            )
        metrics.record_queue_objects(refused=True)
        self._record(QueueSource.Kind.CLUSTER, now, error=message)

    def _record(self, kind: QueueSource.Kind, now: datetime, *, error: str = "") -> None:
        if self._recorded == (kind, error):
            return
        services.queue_source_record(kind=kind, now=now, error=error)
        self._recorded = (kind, error)
        if kind != QueueSource.Kind.CLUSTER:
            metrics.record_queue_objects(refused=False)
