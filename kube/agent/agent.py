"""One step of the topology agent: probe nvidia-smi, compare with the node's annotation, patch it
when the facts differ (a GPU gone or back, a driver upgrade that changed links or indices, MIG mode
switched), and say what happened.

- A probe that fails (nvidia-smi missing, hung, exiting non-zero, printing what cannot be parsed,
  or two outputs that disagree) writes nothing: the last good annotation stays. It is counted,
  logged and reported by a Warning event `GPUTopologyProbeFailed` on the Node (again only when the
  error changes); the step's report carries the error (the command makes the agent unready).
- A rewrite is reported by a Normal event `GPUTopologyUpdated` saying what changed.
- Facts equal to the annotation's (formatting aside) write nothing: a quiet node costs one GET.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter, Gauge
from urllib3.exceptions import HTTPError

from common.process_metrics import role_registry
from kube.agent.nvidia_smi import ProbeError, probe
from kube.api import KubeApi
from scheduling.core.plugins.gpu_topology import DEFAULT_ANNOTATION
from scheduling.core.topology import TopologyError
from scheduling.core.topology_info import TopologyInfo, parse_topology_info

logger = logging.getLogger(__name__)

REPORTING_CONTROLLER = "gpusched.io/topology-agent"
PROBE_FAILED = "GPUTopologyProbeFailed"
UPDATED = "GPUTopologyUpdated"
ACTION = "ProbeTopology"

registry = role_registry()
probes = Counter(
    "gpusched_topology_agent_probes",
    "nvidia-smi probes by result: ok, failed (nothing was written).",
    ["result"],
    registry=registry,
)
writes = Counter(
    "gpusched_topology_agent_annotation_writes",
    "Times the node's topology annotation was (re)written.",
    registry=registry,
)
api_errors = Counter(
    "gpusched_topology_agent_api_errors",
    "Kubernetes API calls (read or patch the node) that failed; retried next interval.",
    registry=registry,
)
gpus_seen = Gauge(
    "gpusched_topology_agent_gpus", "GPUs the last good probe found.", registry=registry
)
last_success = Gauge(
    "gpusched_topology_agent_last_success_timestamp_seconds",
    "When the annotation was last confirmed or written (alert on time() - this).",
    registry=registry,
)
for _result in ("ok", "failed"):
    probes.labels(result=_result)


@dataclass(frozen=True)
class StepReport:
    probed: bool = False  # nvidia-smi answered with facts that hold together
    written: bool = False  # the annotation was patched
    gpus: int = 0
    error: str = ""


class TopologyAgent:
    def __init__(
        self,
        api: KubeApi,
        node: str,
        *,
        annotation: str = DEFAULT_ANNOTATION,
        nvidia_smi: str = "nvidia-smi",
        timeout_s: float = 30.0,
        clock: Callable[[], datetime] = timezone.now,
    ) -> None:
        self.api = api
        self.node = node
        self.annotation = annotation
        self.nvidia_smi = nvidia_smi
        self.timeout_s = timeout_s
        self.clock = clock
        self._reported_error = ""
        self._node_uid = ""

    def run_once(self) -> StepReport:
        try:
            info = probe(self.node, executable=self.nvidia_smi, timeout_s=self.timeout_s)
        except ProbeError as exc:
            probes.labels(result="failed").inc()
            self._report_failure(str(exc))
            return StepReport(error=str(exc))
        probes.labels(result="ok").inc()
        gpus_seen.set(info.topology.gpu_count)
        try:
            node = self.api.read_node(self.node)
            if node is None:
                return self._api_failed(f"node {self.node} does not exist", info)
            self._node_uid = str((node.get("metadata") or {}).get("uid") or "")
            current = ((node.get("metadata") or {}).get("annotations") or {}).get(self.annotation)
            before = _readable(current)
            if before is not None and before.same_facts(info):
                self._recovered()
                last_success.set(time.time())
                return StepReport(probed=True, gpus=info.topology.gpu_count)
            self.api.annotate_node(self.node, {self.annotation: info.to_json()})
        except (ApiException, HTTPError) as exc:
            return self._api_failed(f"node {self.node}: {getattr(exc, 'status', '') or exc}", info)
        writes.inc()
        last_success.set(time.time())
        change = describe_change(before, info, current)
        logger.info("node %s: topology annotation written: %s", self.node, change)
        self._event("Normal", UPDATED, change)
        self._recovered()
        return StepReport(probed=True, written=True, gpus=info.topology.gpu_count)

    def _api_failed(self, message: str, info: TopologyInfo) -> StepReport:
        api_errors.inc()
        logger.warning("%s; retrying next interval", message)
        return StepReport(probed=True, gpus=info.topology.gpu_count, error=message)

    def _report_failure(self, error: str) -> None:
        logger.warning("node %s: %s; the annotation is left as it was", self.node, error)
        if error != self._reported_error:
            self._reported_error = error
            self._event("Warning", PROBE_FAILED, f"{error}; the annotation is left as it was")

    def _recovered(self) -> None:
        self._reported_error = ""

    def _event(self, kind: str, reason: str, note: str) -> None:
        self.api.node_event(
            node=self.node,
            uid=self._node_uid,
            kind=kind,
            reason=reason,
            action=ACTION,
            note=note,
            now=self.clock(),
        )


def _readable(value: object) -> TopologyInfo | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_topology_info(value)
    except TopologyError:
        return None


def describe_change(before: TopologyInfo | None, after: TopologyInfo, raw: object) -> str:
    """What a rewrite changed, for the event and the log."""
    now = f"{after.topology.gpu_count} GPUs"
    if before is None:
        return f"written ({now})" if not raw else f"replaced an unreadable annotation ({now})"
    changes = []
    if before.topology.gpu_count != after.topology.gpu_count:
        changes.append(f"GPUs {before.topology.gpu_count} -> {after.topology.gpu_count}")
    if before.gpus != after.gpus:
        changes.append("GPU identities or MIG mode")
    if before.topology != after.topology:
        changes.append("links or NUMA/switch placement")
    if before.node_name != after.node_name or before.link_detail != after.link_detail:
        changes.append("node name or link detail")
    return "rewritten: " + (", ".join(changes) or "facts") + f" ({now})"
