"""What the Kubernetes side tells the cluster about why (scheduling.worker.side `report`):

- pods: a `FailedScheduling` Warning event and `PodScheduled=False` once per distinct reason
  (kube-scheduler's way), and `status.nominatedNodeName` for a preemptor waiting for its victims;
  pods not mirrored (yet) are remembered here, mirrored ones on their KubePod row;
- nodes: a Node event when the scheduler stops trusting a node's recorded state (quarantine) and
  when it trusts it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kube import services as kube_services
from kube.api import KubeApi
from kube.models import KubePod
from kube.translate import PodInfo
from scheduling.models import Node
from scheduling.worker.side import Waiting


class Teller:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._reported: dict[str, str] = {}  # pod uid -> the last reason told (pods not mirrored)
        self._quarantine_told: dict[str, str] = {}  # node -> the quarantine reason told

    def report(self, waiting: Sequence[Waiting], now: datetime) -> int:
        links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=[w.pod for w in waiting])}
        told = 0
        for item in waiting:
            link = links.get(item.pod.pk)
            if link is None or not item.message or item.message == link.reported_reason:
                continue
            self.unschedulable(link.namespace, link.name, link.uid, item.message, now)
            if item.nominated_node:
                self.api.mark_nominated(
                    namespace=link.namespace, name=link.name, node=item.nominated_node
                )
            kube_services.kube_pod_reported(kube_pod=link, reason=item.message)
            told += 1
        return told

    def tell(self, info: PodInfo, message: str, now: datetime) -> None:
        """Why a pod that is not mirrored (yet) waits, once per distinct reason."""
        if self._reported.get(info.uid) == message:
            return
        self._reported[info.uid] = message
        reason = "SchedulerError" if message.startswith("gpusched cannot") else "Unschedulable"
        self.unschedulable(info.namespace, info.name, info.uid, message, now, reason)

    def forget(self, uid: str) -> None:
        self._reported.pop(uid, None)

    def unschedulable(
        self,
        namespace: str,
        name: str,
        uid: str,
        message: str,
        now: datetime,
        reason: str = "Unschedulable",
    ) -> None:
        self.api.event(
            namespace=namespace,
            pod_name=name,
            pod_uid=uid,
            kind="Warning",
            reason="FailedScheduling",
            action="Scheduling",
            note=message,
            now=now,
        )
        self.api.mark_unschedulable(
            namespace=namespace, name=name, message=message, now=now, reason=reason
        )

    def quarantine(self, nodes: Mapping[str, dict[str, Any]], now: datetime) -> None:
        """A Node event when the scheduler stops trusting a node's recorded state (quarantine,
        decided by the cycle after the previous sync), and when it trusts it again."""
        current = dict(
            Node.objects.filter(source=Node.Source.KUBERNETES)
            .exclude(quarantine_reason="")
            .values_list("name", "quarantine_reason")
        )
        for name in sorted(set(current) | set(self._quarantine_told)):
            reason = current.get(name, "")
            if self._quarantine_told.get(name, "") == reason:
                continue
            uid = str(((nodes.get(name) or {}).get("metadata") or {}).get("uid") or "")
            self.api.node_event(
                node=name,
                uid=uid,
                kind="Warning" if reason else "Normal",
                reason="Quarantined" if reason else "QuarantineLifted",
                action="Scheduling",
                note=f"gpusched places nothing here: {reason}"
                if reason
                else "gpusched trusts this node's recorded state again",
                now=now,
            )
            if reason:
                self._quarantine_told[name] = reason
            else:
                self._quarantine_told.pop(name, None)
