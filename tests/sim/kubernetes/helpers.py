"""Test helpers: a settable clock, requests the typed client cannot make (bodies it would refuse
to send, any content type), the Status body of an ApiException, minimal pod bodies."""

from __future__ import annotations

import http.client
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes


class Clock:
    """A settable clock for the store's timestamps and the kubelets."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def status(exc: ApiException) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(str(exc.body))
    return doc


def client_for(kind: Any, kube: SimulatedKubernetes) -> Any:
    """An API of the official client on `kube`. Typed as Any: the tests send plain dict bodies,
    as users of the client do, which its model-typed signatures do not admit."""
    return kind(kube.api_client())


def raw(
    kube: SimulatedKubernetes,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", kube.server.port, timeout=10)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"Content-Type": content_type, "Accept": accept}
    connection.request(method, path, data, headers)
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, text


def pod(name: str, **spec: Any) -> dict[str, Any]:
    """A minimal pod body: one container, optional spec fields and metadata."""
    metadata = {"name": name, **spec.pop("metadata", {})}
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    if "gpus" in spec:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(spec.pop("gpus"))}}
    return {"metadata": metadata, "spec": {"containers": [container], **spec}}
