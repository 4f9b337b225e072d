"""The few Kubernetes API calls the scheduler makes, on the official `kubernetes` client, with the
pitfalls of reference/wire-formats.md §4 handled in one place:

- Binding: `create_namespaced_pod_binding(..., _preload_content=False)`. The server answers 201 with
  a `Status`, which the client would try to read as a `V1Binding` and fail on (`target` is
  required); the raw response is read instead. The Binding carries the pod's uid (a precondition:
  a pod deleted and recreated under the same name is never bound by mistake) and the annotations
  to write on the pod (the API server copies a Binding's annotations onto the pod, atomically with
  `spec.nodeName`).
- Events: events.k8s.io/v1 with `eventTime` as a MicroTime (kube.times), best effort and
  rate-limited as kube-scheduler's are (`EventBudget`): over the budget an event is dropped, never
  waited for, and counted.
- PodScheduled=False: a dict body, which the client sends as a strategic-merge patch (merge key
  `type`), so only that condition changes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kube.times import micro_time, rfc3339

logger = logging.getLogger(__name__)

NOTE_LIMIT = 1024  # events.k8s.io/v1 `note` is at most 1 kB
REPORTING_CONTROLLER = "gpusched.io/scheduler"
NODE_EVENT_NAMESPACE = "default"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
MERGE_PATCH = "application/merge-patch+json"
# Connections the client keeps open to the API server: the Bindings in flight at once
# (kube.binder) and the rest beside them. The client's default is the machine's CPU count, and a
# request finding the pool full opens a connection of its own and drops it after.
CONNECTIONS = 16
# kube-scheduler's client rate limit (KubeSchedulerConfiguration clientConnection: qps 50,
# burst 100), which its event sink goes through: events beyond it queue in its broadcaster, which
# drops them once a thousand wait. Here they are dropped at once (nothing waits on the API).
EVENTS_PER_S = 50.0
EVENT_BURST = 100


class EventBudget:
    """A token bucket (client-go's flowcontrol limiter): `burst` events at once, then `per_s` a
    second; shared by the threads that post events (the binder's pool, the cycle's). `take()`
    never waits: False means over budget (the event is dropped and counted, and `on_drop` told:
    runkube counts them on its /metrics)."""

    def __init__(
        self,
        per_s: float,
        burst: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.per_s = per_s
        self.burst = burst
        self.monotonic = monotonic
        self.on_drop = on_drop
        self.dropped = 0
        self._tokens = float(burst)
        self._at = monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.per_s)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            self.dropped += 1
            first = self.dropped == 1
        if self.on_drop is not None:
            self.on_drop()
        if first:
            logger.warning(
                "events over %s a second (burst %d) are dropped, as kube-scheduler's client drops "
                "them (GPUSCHED_KUBE_EVENTS_PER_S, GPUSCHED_KUBE_EVENT_BURST)",
                self.per_s,
                self.burst,
            )
        return False


def connect(
    *, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
) -> client.ApiClient:
    """An API client from the pod's service account (in a cluster) or a kubeconfig file.
    `in_cluster=None` tries the service account first, then the kubeconfig."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = CONNECTIONS
    if in_cluster or (in_cluster is None and not kubeconfig and _running_in_cluster()):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return client.ApiClient(configuration)


def _running_in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        SERVICE_ACCOUNT_NAMESPACE
    )


def own_namespace(default: str = "default") -> str:
    """The namespace this pod runs in (POD_NAMESPACE, else the service account's), for the Lease."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as handle:
            return handle.read().strip() or default
    except OSError:
        return default


@dataclass(frozen=True)
class BindOutcome:
    ok: bool
    status: int  # HTTP status: 201 on success
    message: str = ""

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 404


@dataclass(frozen=True)
class EvictOutcome:
    status: int  # 201: accepted; 429: a disruption budget forbids it now; 404: gone already
    message: str = ""

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300

    @property
    def refused(self) -> bool:
        return self.status == 429


@dataclass(frozen=True)
class CreateOutcome:
    status: int  # 201: created; 409: it exists already
    obj: dict[str, Any]
    message: str = ""

    @property
    def created(self) -> bool:
        return 200 <= self.status < 300


class KubeApi:
    """Thin adapter: typed calls in, plain results out; ApiException never escapes `bind`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        reporting_instance: str,
        timeout_s: float = 10.0,
        reporting_controller: str = REPORTING_CONTROLLER,
        event_budget: EventBudget | None = None,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.events = client.EventsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance[:128]
        self.timeout_s = timeout_s
        self.event_budget = event_budget or EventBudget(EVENTS_PER_S, EVENT_BURST)

    def bind(
        self, *, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> BindOutcome:
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = annotations
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        status, data = self._post(
            "/api/v1/namespaces/{namespace}/pods/{name}/binding",
            {"namespace": namespace, "name": name},
            body,
        )
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        if 200 <= status < 300 and doc.get("status", "Success") == "Success":
            return BindOutcome(True, status)
        return BindOutcome(False, status, str(doc.get("message", "")))

    def _post(
        self, path: str, path_params: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, bytes]:
        """POST a JSON document through the client's REST layer (its authentication, TLS and
        connection pool) without the generated model classes: Bindings and their events are the
        requests the scheduler makes per pod, and building and validating the models cost as
        much client CPU as the HTTP exchange. The status, and the body read whole, so that the
        connection goes back to the pool."""
        method, url, headers, _, post_params = self.api_client.param_serialize(
            "POST",
            path,
            path_params=path_params,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            auth_settings=["BearerToken"],
        )
        # The body is plain JSON already: it goes to the REST layer as it is, not through the
        # serializer's walk over it looking for models to convert.
        response = self.api_client.call_api(
            method, url, headers, body, post_params, _request_timeout=self.timeout_s
        )
        return int(response.status), bytes(response.read() or b"")

    def event(
        self,
        *,
        namespace: str,
        pod_name: str,
        pod_uid: str,
        kind: str,  # "Normal" | "Warning"
        reason: str,  # "Scheduled" | "FailedScheduling"
        action: str,  # "Binding" | "Scheduling"
        note: str,
        now: datetime,
        budgeted: bool = True,  # False: the caller took the budget's token (kube.bind_request)
    ) -> bool:
        regarding = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "namespace": namespace,
            "uid": pod_uid,
        }
        return self._event(namespace, regarding, kind, reason, action, note, now, budgeted)

    def node_event(
        self, *, node: str, uid: str, kind: str, reason: str, action: str, note: str, now: datetime
    ) -> bool:
        """An event about a Node (cluster-scoped: recorded in `default`, as the kubelet does)."""
        regarding = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
        return self._event(NODE_EVENT_NAMESPACE, regarding, kind, reason, action, note, now)

    def _event(
        self,
        namespace: str,
        regarding: dict[str, str],
        kind: str,
        reason: str,
        action: str,
        note: str,
        now: datetime,
        budgeted: bool = True,
    ) -> bool:
        """Post it if the budget allows; False when dropped, refused or not delivered."""
        if budgeted and not self.event_budget.take():
            return False
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": f"{regarding['name']}.", "namespace": namespace},
            "eventTime": micro_time(now).isoformat(),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action,
            "reason": reason,
            "type": kind,
            "regarding": regarding,
            "note": truncate_note(note),
        }
        try:
            status, data = self._post(
                "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                {"namespace": namespace},
                body,
            )
        except urllib3.exceptions.HTTPError as exc:  # a dropped connection: still best effort
            logger.warning(
                "event %s for %s %s: %s", reason, regarding["kind"], regarding["name"], exc
            )
            return False
        if not 200 <= status < 300:  # an event is best effort, as in kube-scheduler
            logger.warning(
                "event %s for %s %s: %s", reason, regarding["kind"], regarding["name"], status
            )
            return False
        return True

    def mark_unschedulable(
        self, *, namespace: str, name: str, message: str, now: datetime, reason: str
    ) -> bool:
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(now),
                    }
                ]
            }
        }
        return self._patch_pod_status(namespace, name, patch, "PodScheduled=False")

    def evict(self, *, namespace: str, name: str, uid: str) -> EvictOutcome:
        """policy/v1 Eviction: the API server checks the pod's disruption budgets and answers 429
        when evicting it now would violate one; the uid precondition guards against a pod
        recreated under the same name."""
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            _drain(
                self.core.create_namespaced_pod_eviction(
                    name, namespace, body, _preload_content=False, _request_timeout=self.timeout_s
                )
            )
        except ApiException as exc:
            return EvictOutcome(int(exc.status or 0), _status_message(exc))
        return EvictOutcome(201)

    def mark_nominated(self, *, namespace: str, name: str, node: str) -> bool:
        """status.nominatedNodeName: the node a preemption is emptying for the pod."""
        patch = {"status": {"nominatedNodeName": node or None}}
        return self._patch_pod_status(namespace, name, patch, "nominatedNodeName")

    def _patch_pod_status(
        self, namespace: str, name: str, patch: dict[str, Any], what: str
    ) -> bool:
        """Best effort: a refused status patch is logged (`what` on the pod) and reported False."""
        try:
            _drain(
                self.core.patch_namespaced_pod_status(
                    name, namespace, patch, _preload_content=False, _request_timeout=self.timeout_s
                )
            )
        except ApiException as exc:
            logger.warning("%s on %s/%s: %s", what, namespace, name, exc.status)
            return False
        return True

    def create(self, obj: dict[str, Any]) -> CreateOutcome:
        """Create a namespaced core/v1 object (a Pod or a ConfigMap); 409 means it exists."""
        namespace = obj["metadata"]["namespace"]
        creators: dict[str, Callable[..., Any]] = {
            "Pod": self.core.create_namespaced_pod,
            "ConfigMap": self.core.create_namespaced_config_map,
        }
        create = creators[obj["kind"]]
        try:
            response: Any = create(
                namespace, obj, _preload_content=False, _request_timeout=self.timeout_s
            )
        except ApiException as exc:
            return CreateOutcome(int(exc.status or 0), {}, _status_message(exc))
        return CreateOutcome(201, json.loads(response.data or b"{}"))

    def read_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self.core.read_namespaced_config_map, name, namespace)

    def delete_config_map(self, namespace: str, name: str) -> bool:
        """Delete it and, through the garbage collector, everything it owns (background)."""
        try:
            _drain(
                self.core.delete_namespaced_config_map(
                    name,
                    namespace,
                    body=client.V1DeleteOptions(propagation_policy="Background"),
                    _preload_content=False,
                    _request_timeout=self.timeout_s,
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return True
            logger.warning("delete ConfigMap %s/%s: %s", namespace, name, exc.status)
            return False
        return True

    def delete_pod(self, namespace: str, name: str, uid: str) -> tuple[int, str]:
        """Delete a pod (graceful, its uid as precondition: a pod recreated under the name is
        left alone): the HTTP status (404: gone already) and the server's message on failure."""
        try:
            _drain(
                self.core.delete_namespaced_pod(
                    name,
                    namespace,
                    body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                    _preload_content=False,
                    _request_timeout=self.timeout_s,
                )
            )
        except ApiException as exc:
            return int(exc.status or 0), _status_message(exc)
        return 200, ""

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self._read(self.core.read_node, name)

    def set_unschedulable(self, name: str, unschedulable: bool) -> tuple[int, bool | None, str]:
        """Cordon or uncordon a Node as kubectl does (a strategic-merge patch of
        spec.unschedulable: true, or null to uncordon), then read it back: the HTTP status, the
        node's spec.unschedulable as the API server now has it (None when the patch failed), and
        the server's message on failure."""
        patch = {"spec": {"unschedulable": True if unschedulable else None}}
        try:
            _drain(
                self.core.patch_node(
                    name, patch, _preload_content=False, _request_timeout=self.timeout_s
                )
            )
            node = self.read_node(name)
        except ApiException as exc:
            return int(exc.status or 0), None, _status_message(exc)
        if node is None:
            return 404, None, f'nodes "{name}" not found'
        return 200, bool((node.get("spec") or {}).get("unschedulable")), ""

    def annotate_node(self, name: str, annotations: dict[str, str | None]) -> None:
        """Set (None: remove) annotations of a Node with a strategic-merge patch, which leaves
        every other annotation alone. ApiException on failure."""
        patch = {"metadata": {"annotations": annotations}}
        _drain(
            self.core.patch_node(
                name, patch, _preload_content=False, _request_timeout=self.timeout_s
            )
        )

    def patch_job(
        self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False
    ) -> tuple[int, str]:
        """A JSON merge patch of a batch/v1 Job (or of its status subresource): the HTTP status
        (200: done) and the server's message on failure."""
        call = self.batch.patch_namespaced_job_status if status else self.batch.patch_namespaced_job
        try:
            _drain(
                call(
                    name,
                    namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self.timeout_s,
                )
            )
        except ApiException as exc:
            return int(exc.status or 0), _status_message(exc)
        return 200, ""

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self.core.read_namespaced_pod, name, namespace)

    def _read(self, read: Callable[..., Any], *names: str) -> dict[str, Any] | None:
        """An object as JSON, None when it does not exist; other API errors raise
        ApiException."""
        try:
            response: Any = read(*names, _preload_content=False, _request_timeout=self.timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        doc: dict[str, Any] = json.loads(response.data)
        return doc


def _drain(response: Any) -> None:
    """Read a raw answer whole (`_preload_content=False`), so that its connection goes back to
    the client's pool rather than a new one being opened for the next request."""
    response.data  # noqa: B018 - reading it is the point


def truncate_note(note: str) -> str:
    """kube-scheduler's rule: at most 1 kB, cut with " ..." when longer."""
    encoded = note.encode()
    if len(encoded) <= NOTE_LIMIT:
        return note
    return encoded[: NOTE_LIMIT - 4].decode(errors="ignore") + " ..."


def _status_message(exc: ApiException) -> str:
    try:
        doc = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        doc = {}
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])
    return f"{exc.status} {exc.reason}"
