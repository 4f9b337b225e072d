"""One Binding as the binder sends it, in this process or the binding process
(kube.binding_process): plain data in, the API server's answer out; nothing here touches the
database, so a process without Django can send it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kube.api import BindOutcome, KubeApi

# Bindings in flight at once (kube-scheduler binds each pod in a goroutine of its own).
BIND_CONCURRENCY = 8


@dataclass(frozen=True)
class BindRequest:
    namespace: str
    name: str
    uid: str
    node: str
    annotations: dict[str, str]
    event: bool  # a `Scheduled` event once bound: the sender's event budget had room for it
    now: datetime


def send_binding(api: KubeApi, request: BindRequest) -> BindOutcome:
    """The Binding, then its event (best effort: its failure changes nothing)."""
    outcome = api.bind(
        namespace=request.namespace,
        name=request.name,
        uid=request.uid,
        node=request.node,
        annotations=request.annotations,
    )
    if outcome.ok and request.event:
        api.event(
            namespace=request.namespace,
            pod_name=request.name,
            pod_uid=request.uid,
            kind="Normal",
            reason="Scheduled",
            action="Binding",
            note=f"Successfully assigned {request.namespace}/{request.name} to {request.node}",
            now=request.now,
            budgeted=False,
        )
    return outcome
