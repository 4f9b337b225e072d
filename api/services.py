"""Writes of the REST API (HackSoft services). Cluster state is still written only by
scheduling.services; these add what the API needs around them: tokens, tenant policies,
validated and idempotent submits, node drain."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from api import pending_limits, selectors
from api import quantities as q
from api import specs as workload_specs
from api.authentication import TOKEN_PREFIX, token_digest
from api.exceptions import ApplicationError, Conflict, InvalidInput, Unprocessable
from api.models import ApiToken, IdempotencyKey, TenantPolicy
from scheduling import services
from scheduling.core.queueing import config as queue_config
from scheduling.core.types import GPU_MILLI_RESOURCE, ServiceClass
from scheduling.models import (
    ClusterQueue,
    LocalQueue,
    Node,
    NodeAction,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Workload,
)
from scheduling.services.audit import admin_action_record

IDEMPOTENCY_TTL = timedelta(hours=24)
PREFIX_LENGTH = 12
DEFAULT_FLAVOR = "default-flavor"  # Kueue's conventional name for a flavor matching every node


def request_fingerprint(data: Any) -> str:
    """A request body's identity for Idempotency-Key: sha256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


# --- tokens ---------------------------------------------------------------------------------------


def token_create(
    *, tenant: Tenant | None = None, user: User | None = None, name: str = ""
) -> tuple[ApiToken, str]:
    """A new token for a tenant or an admin user. The token itself is returned once; only its
    digest is stored."""
    if (tenant is None) == (user is None):
        raise ValueError("a token belongs to a tenant or to a user")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        tenant=tenant,
        user=user,
        name=name,
        prefix=token[:PREFIX_LENGTH],
        digest=token_digest(token),
    )
    return row, token


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=token.revoked_at)
    return token


# --- tenants and their policies -------------------------------------------------------------------


def policy_errors(
    *,
    default_requests: Mapping[str, object],
    min_per_pod: Mapping[str, object],
    max_per_pod: Mapping[str, object],
    prefix: str = "",
) -> dict[str, list[str]]:
    """Field-level problems of a policy (paths `maxPerPod.cpu`, ...)."""
    errors: dict[str, list[str]] = {}
    groups: list[tuple[str, Mapping[str, object]]] = [
        ("defaultRequests", default_requests),
        ("minPerPod", min_per_pod),
        ("maxPerPod", max_per_pod),
    ]
    for group, doc in groups:
        for resource, value in doc.items():
            path = f"{prefix}{group}.{resource}"
            if not q.known_resource(resource):
                errors[path] = [q.unknown_resource_message(resource)]
                continue
            if group == "defaultRequests" and resource not in (q.CPU, q.MEMORY):
                errors[path] = ["defaults are for cpu and memory only"]
                continue
            try:
                q.pod_amount(resource, value)
            except q.QuantityError as exc:
                errors[path] = [str(exc)]
    for resource in set(min_per_pod) & set(max_per_pod):
        if f"{prefix}minPerPod.{resource}" in errors or f"{prefix}maxPerPod.{resource}" in errors:
            continue
        if q.pod_amount(resource, min_per_pod[resource]) > q.pod_amount(
            resource, max_per_pod[resource]
        ):
            errors[f"{prefix}minPerPod.{resource}"] = ["must not be above maxPerPod"]
    return errors


def _texts(doc: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v).strip() for k, v in doc.items()}


def quota_errors(quota: Mapping[str, object], path: str = "quota") -> dict[str, list[str]]:
    """Problems of a cluster queue's nominal quota (resource -> quantity)."""
    errors: dict[str, list[str]] = {}
    for resource, value in quota.items():
        where = f"{path}.{resource}"
        if resource == GPU_MILLI_RESOURCE or not (
            q.known_resource(resource, quota=True) or q.counted_only(resource)
        ):
            errors[where] = [
                f"not a queue resource {resource!r} (cpu, memory, nvidia.com/gpu, "
                "nvidia.com/mig-<profile>, pods or an extended resource such as "
                "example.com/credits; GPU shares count under nvidia.com/gpu)"
            ]
            continue
        try:
            q.quota_amount(resource, value)
        except q.QuantityError as exc:
            errors[where] = [str(exc)]
    return errors


def _queue_config(
    *,
    namespace: str,
    queue_name: str,
    cluster_queue: str,
    create_cluster_queue: bool,
    quota: Mapping[str, object],
    cohort: str,
    flavor: str,
) -> queue_config.QueueConfig:
    """The Kueue objects of a new tenant: its LocalQueue, and its own ClusterQueue holding the
    nominal quota (in the given flavor, by default one matching every node)."""
    local = queue_config.LocalQueue(
        namespace=namespace, name=queue_name, cluster_queue=cluster_queue
    )
    if not create_cluster_queue:
        return queue_config.QueueConfig(local_queues=(local,))
    flavors: tuple[queue_config.ResourceFlavor, ...] = ()
    if not ResourceFlavor.objects.filter(name=flavor).exists():
        flavors = (queue_config.ResourceFlavor(name=flavor),)
    groups: tuple[queue_config.ResourceGroup, ...] = ()
    if quota:
        amounts = {r: queue_config.ResourceQuota(q.quota_amount(r, v)) for r, v in quota.items()}
        groups = (
            queue_config.ResourceGroup(
                covered=tuple(sorted(amounts)),
                flavors=(queue_config.FlavorQuotas(name=flavor, resources=amounts),),
            ),
        )
    cq = queue_config.ClusterQueue(name=cluster_queue, cohort=cohort, resource_groups=groups)
    return queue_config.QueueConfig(flavors=flavors, cluster_queues=(cq,), local_queues=(local,))


def tenant_onboard(
    *,
    name: str,
    namespace: str | None = None,
    queue_name: str | None = None,
    quota: Mapping[str, object] | None = None,
    cohort: str = "",
    cluster_queue: str | None = None,
    flavor: str | None = None,
    default_requests: Mapping[str, object] | None = None,
    min_per_pod: Mapping[str, object] | None = None,
    max_per_pod: Mapping[str, object] | None = None,
    token_name: str = "default",
) -> tuple[Tenant, TenantPolicy, str]:
    """A tenant with its LocalQueue, its limits and a first API token (returned once).

    The LocalQueue (named `queue_name`, default the tenant's name) points at `cluster_queue` when
    given (it must exist), else at a new ClusterQueue named after the tenant whose nominal quota
    is `quota` (Kueue: resource -> quantity, in `flavor`) in `cohort`: the tenant's one quota,
    checked at admission. The per-pod limits are its LimitRange, checked on every submit."""
    quota = dict(quota or {})
    default_requests = dict(default_requests or {})
    min_per_pod, max_per_pod = dict(min_per_pod or {}), dict(max_per_pod or {})
    errors = policy_errors(
        default_requests=default_requests,
        min_per_pod=min_per_pod,
        max_per_pod=max_per_pod,
    )
    errors.update(quota_errors(quota))
    if cluster_queue is not None:
        if not ClusterQueue.objects.filter(name=cluster_queue).exists():
            errors["clusterQueue"] = [f"ClusterQueue {cluster_queue!r} does not exist"]
        if quota:
            errors["quota"] = ["the quota belongs to the existing cluster queue; give one or other"]
    missing_flavor = flavor is not None and not ResourceFlavor.objects.filter(name=flavor).exists()
    if cluster_queue is None and missing_flavor:
        errors["flavor"] = [f"ResourceFlavor {flavor!r} does not exist"]
    if errors:
        raise InvalidInput(errors)
    namespace = namespace or name
    queue_name = queue_name or name
    try:
        with transaction.atomic():
            if Tenant.objects.filter(name=name).exists():
                raise Conflict(f"tenant {name!r} already exists", {"field": "name"})
            if Tenant.objects.filter(namespace=namespace).exists():
                raise Conflict(f"namespace {namespace!r} is taken", {"field": "namespace"})
            if cluster_queue is None and ClusterQueue.objects.filter(name=name).exists():
                raise Conflict(
                    f"ClusterQueue {name!r} already exists: pass it as the cluster queue to share "
                    "it, or pick another tenant name",
                    {"field": "clusterQueue"},
                )
            tenant = services.tenant_create(name=name, namespace=namespace)
            policy = TenantPolicy.objects.create(
                tenant=tenant,
                queue_name=queue_name,
                default_requests=_texts(default_requests),
                min_per_pod=_texts(min_per_pod),
                max_per_pod=_texts(max_per_pod),
            )
            _, token = token_create(tenant=tenant, name=token_name)
            # Last: queues_apply publishes its outbox event, the transaction's last write.
            services.queues_apply(
                config=_queue_config(
                    namespace=namespace,
                    queue_name=queue_name,
                    cluster_queue=cluster_queue or name,
                    create_cluster_queue=cluster_queue is None,
                    quota=quota,
                    cohort=cohort,
                    flavor=flavor or DEFAULT_FLAVOR,
                )
            )
    except IntegrityError as exc:
        raise Conflict(f"tenant {name!r} or namespace {namespace!r} already exists") from exc
    except services.ServiceError as exc:
        raise ApplicationError(str(exc)) from exc
    return tenant, policy, token


def tenant_policy_set(
    *,
    tenant: Tenant,
    queue_name: str | None = None,
    default_requests: Mapping[str, object],
    min_per_pod: Mapping[str, object],
    max_per_pod: Mapping[str, object],
) -> TenantPolicy:
    """Replace the tenant's limits (and queue, when given). Applies to later submits only."""
    errors = policy_errors(
        default_requests=default_requests,
        min_per_pod=min_per_pod,
        max_per_pod=max_per_pod,
    )
    if errors:
        raise InvalidInput(errors)
    with transaction.atomic():
        policy = TenantPolicy.objects.select_for_update().filter(tenant=tenant).first()
        if policy is None:
            policy = TenantPolicy(tenant=tenant, queue_name=queue_name or tenant.name)
        if queue_name:
            policy.queue_name = queue_name
        policy.default_requests = _texts(default_requests)
        policy.min_per_pod = _texts(min_per_pod)
        policy.max_per_pod = _texts(max_per_pod)
        policy.save()
    return policy


def tenant_quota_set(
    *,
    tenant: Tenant,
    quota: Mapping[str, object],
    actor: str,
    cluster_queue: str | None = None,
    flavor: str | None = None,
) -> dict[str, Any]:
    """Change the tenant's quota: the nominal quota of its ClusterQueue (the one its LocalQueues
    point at; `cluster_queue` names one when they point at several), in `flavor` (left out: the
    queue's one flavor with those resources). A queue shared by several tenants is their shared
    quota. Audited as `actor`'s (scheduling.services.cluster_queue_quota_set); returns what
    changed."""
    errors = quota_errors(quota)
    if not quota:
        errors["quota"] = ["name at least one resource, e.g. nvidia.com/gpu: '16'"]
    fed = sorted(
        set(
            LocalQueue.objects.filter(namespace=tenant.namespace).values_list(
                "cluster_queue__name", flat=True
            )
        )
    )
    if cluster_queue is not None and cluster_queue not in fed:
        errors["clusterQueue"] = [
            f"no LocalQueue of tenant {tenant.name!r} points at ClusterQueue {cluster_queue!r} "
            f"(its ClusterQueues: {', '.join(fed) or 'none'})"
        ]
    elif cluster_queue is None and len(fed) != 1:
        errors["clusterQueue"] = [
            f"name one of tenant {tenant.name!r}'s ClusterQueues: {', '.join(fed)}"
            if fed
            else f"no LocalQueue of tenant {tenant.name!r} points at a ClusterQueue"
        ]
    if errors:
        raise InvalidInput(errors)
    try:
        return services.cluster_queue_quota_set(
            name=cluster_queue or fed[0],
            nominal={r: q.quota_amount(r, v) for r, v in quota.items()},
            flavor=flavor,
            actor=actor,
        )
    except services.FieldErrors as exc:
        raise InvalidInput(exc.fields) from exc
    except services.ServiceError as exc:
        raise Conflict(str(exc)) from exc


def tenant_limits_set(
    *,
    tenant: Tenant,
    cluster_queue: str,
    limits: Mapping[tuple[str, str], Mapping[str, object]],
    actor: str,
) -> dict[str, Any]:
    """Change the nominal quota, borrowing and lending limits (quantities as written; "" removes
    a borrowing or lending limit) of flavors and resources of a ClusterQueue one of the tenant's
    LocalQueues points at: the quota form's rows (scheduling.services.cluster_queue_limits_set).
    Each problem is named by its field, `<flavor>/<resource>.<limit>`."""
    errors: dict[str, list[str]] = {}
    if not LocalQueue.objects.filter(
        namespace=tenant.namespace, cluster_queue__name=cluster_queue
    ).exists():
        errors["clusterQueue"] = [
            f"no LocalQueue of tenant {tenant.name!r} points at ClusterQueue {cluster_queue!r}"
        ]
    amounts: dict[tuple[str, str], dict[str, int | None]] = {}
    for (flavor, resource), wanted in limits.items():
        for limit, value in wanted.items():
            where = f"{flavor}/{resource}.{limit}"
            if value == "" and limit != "nominalQuota":
                amounts.setdefault((flavor, resource), {})[limit] = None
                continue
            try:
                amount = q.quota_amount(resource, value)
            except q.QuantityError as exc:
                errors[where] = [str(exc) or "not a quantity"]
                continue
            amounts.setdefault((flavor, resource), {})[limit] = amount
    if errors:
        raise InvalidInput(errors)
    try:
        return services.cluster_queue_limits_set(name=cluster_queue, limits=amounts, actor=actor)
    except services.FieldErrors as exc:
        raise InvalidInput(exc.fields) from exc
    except services.ServiceError as exc:
        raise Conflict(str(exc)) from exc


# --- workloads ------------------------------------------------------------------------------------


def _replay(tenant: Tenant, key: str, fingerprint: str) -> Workload | None:
    """The workload an earlier submit with this Idempotency-Key made, if any."""
    record = IdempotencyKey.objects.filter(tenant=tenant, key=key).first()
    if record is None:
        return None
    if record.created_at < timezone.now() - IDEMPOTENCY_TTL:
        record.delete()
        return None
    if record.fingerprint != fingerprint:
        raise Unprocessable(
            "this Idempotency-Key was already used with a different request body",
            {"header": "Idempotency-Key"},
        )
    return Workload.objects.filter(tenant=tenant, name=record.workload_name).first()


def workload_create(
    *,
    tenant: Tenant,
    name: str,
    pod_sets: Sequence[Mapping[str, Any]],
    queue_name: str | None = None,
    priority: int | None = None,
    priority_class_name: str = "",
    priority_class_kind: str = "",
    active: bool = True,
    service_class: str = ServiceClass.BATCH.value,
    maximum_execution_time_s: int | None = None,
    idempotency_key: str | None = None,
    fingerprint: str = "",
) -> tuple[Workload, bool]:
    """Submit a workload from the API's (already shape-checked) request. Returns the workload and
    whether it was created now (False: an Idempotency-Key replay).

    Checked before anything is written, every problem named by its field: the queue, each
    quantity, the tenant's LimitRange-style limits, and what the cluster's nodes could ever offer.
    Then, in one transaction: name conflict (409), the submit. Quota is its ClusterQueue's,
    judged at admission (the workload waits, saying why), not at submit.
    The priority class (or the global default one) gives the priority unless `priority` is set."""
    if idempotency_key:
        replayed = _replay(tenant, idempotency_key, fingerprint)
        if replayed is not None:
            return replayed, False
    policy = selectors.tenant_policy(tenant)
    queues = selectors.tenant_queue_names(tenant, policy)
    queue = queue_name or queues[0]
    errors: dict[str, list[str]] = {}
    if queue not in queues:
        errors["queueName"] = [
            f"unknown queue {queue!r} (this tenant's queues: {', '.join(queues)})"
        ]
    if (
        priority_class_name
        and services.priority_class_named(priority_class_name, priority_class_kind) is None
    ):
        classes = PriorityClass.objects.all()
        if priority_class_kind:
            classes = classes.filter(kind=priority_class_kind)
        known = ", ".join(sorted(set(classes.values_list("name", flat=True)))) or "none"
        field = "priorityClassRef" if priority_class_kind else "priorityClassName"
        what = priority_class_kind or "priority class"
        errors[field] = [f"unknown {what} {priority_class_name!r} (classes: {known})"]
    try:
        specs, stored = workload_specs.pod_sets(
            pod_sets,
            selectors.limits_of(policy),
            selectors.cluster_limits(),
            selectors.topology_levels(),
        )
    except InvalidInput as exc:
        errors.update(exc.fields)
    if errors:
        raise InvalidInput(errors)
    try:
        with transaction.atomic():
            if Workload.objects.filter(tenant=tenant, name=name).exists():
                raise Conflict(f"workload {name!r} already exists", {"field": "name"})
            pending_limits.refuse_past_limits(tenant, queue, sum(spec.count for spec in specs))
            if idempotency_key:
                IdempotencyKey.objects.create(
                    tenant=tenant, key=idempotency_key, fingerprint=fingerprint, workload_name=name
                )
            workload = services.workload_submit(
                tenant=tenant,
                name=name,
                pod_sets=specs,
                queue_name=queue,
                priority=priority,
                priority_class_name=priority_class_name,
                priority_class_kind=priority_class_kind,
                active=active,
                service_class=ServiceClass(service_class),
                raw_pod_sets=stored,
                maximum_execution_time_s=maximum_execution_time_s,
            )
    except IntegrityError as exc:
        # A concurrent submit took the name or the key first.
        if idempotency_key:
            replayed = _replay(tenant, idempotency_key, fingerprint)
            if replayed is not None:
                return replayed, False
        raise Conflict(f"workload {name!r} already exists", {"field": "name"}) from exc
    except services.ServiceError as exc:
        raise ApplicationError(str(exc)) from exc
    return workload, True


def workload_set_active(*, workload: Workload, active: bool) -> Workload:
    try:
        return services.workload_set_active(workload=workload, active=active)
    except services.ServiceError as exc:
        raise Conflict(str(exc), {"state": workload.state}) from exc


def workload_cancel(*, workload: Workload, actor: str | None = None) -> Workload:
    """Cancel a workload: its tenant's request, or an admin's (`actor`), audited in the same
    transaction."""
    try:
        with transaction.atomic():
            cancelled = services.workload_cancel(workload=workload)
            if actor is not None:
                admin_action_record(
                    actor=actor,
                    action="workload.cancel",
                    target=f"{workload.tenant.namespace}/{workload.name}",
                    detail={"state": cancelled.state},
                )
    except services.ServiceError as exc:
        raise Conflict(str(exc), {"state": workload.state}) from exc
    return cancelled


# --- nodes: an admin's actions, each audited (AdminActed) in the transaction of its change -------

NODE_ACTION_POLL_S = 0.2  # how often a waiting request looks for the cycle's answer


def node_action(*, node: Node, kind: str, actor: str) -> NodeAction:
    """Cordon, uncordon or drain a node the Kubernetes cluster manages: asked of the scheduler's
    cycle, which holds the cluster's connection (scheduling.worker.node_actions); waits up to
    NODE_ACTION_WAIT_S for the cluster's answer (unanswered: the caller reads it later)."""
    action = services.node_action_request(node=node, kind=kind, actor=actor, now=timezone.now())
    deadline = time.monotonic() + settings.NODE_ACTION_WAIT_S
    while action.answered_at is None and time.monotonic() < deadline:
        time.sleep(NODE_ACTION_POLL_S)
        action.refresh_from_db()
    return action


def node_cordon(*, node: Node, cordoned: bool, actor: str) -> Node:
    with transaction.atomic():
        if node.cordoned != cordoned:
            node = services.node_set_cordoned(node=node, cordoned=cordoned)
        admin_action_record(
            actor=actor,
            action="node.cordon" if cordoned else "node.uncordon",
            target=node.name,
            detail={"cordoned": cordoned},
        )
    return node


def node_drain(*, node: Node, actor: str) -> tuple[Node, list[Workload]]:
    """Cordon the node, then evict every workload holding anything on it: their pods release
    what they hold and the workloads go back to their queues (requeued, like preemption victims),
    to be placed elsewhere. Cordoning first means nothing new lands meanwhile; repeating a drain
    is harmless.

    Not one transaction: the cordon commits first, the evictions go in the bounded transactions
    of scheduling.services.workloads_evict, and the audit record names the workloads evicted.
    Held across the evictions, the node row the cordon locks would come before the workloads
    in the lock order (docs/architecture.md) and a bind or cancel on the node (workload, then
    node) would deadlock with the drain; thousands of pods would be one transaction."""
    if not node.cordoned:
        node = services.node_set_cordoned(node=node, cordoned=True)
    workloads = selectors.workloads_on_node(node)
    evicted = (
        services.workloads_evict(
            workloads=workloads, reason=f"node {node.name} drained", now=timezone.now()
        )
        if workloads
        else set()
    )
    gone = [w for w in workloads if w.pk in evicted]
    with transaction.atomic():
        admin_action_record(
            actor=actor,
            action="node.drain",
            target=node.name,
            detail={"evicted": sorted(f"{w.tenant.namespace}/{w.name}" for w in gone)},
        )
    return node, gone


def cluster_queue_consolidation_set(*, name: str, policy: str, actor: str) -> dict[str, Any]:
    """Turn consolidation on (Allowed) or off (Never) for a ClusterQueue, audited as `actor`'s
    (scheduling.services.cluster_queue_consolidation_set); returns what changed."""
    try:
        return services.cluster_queue_consolidation_set(
            name=name, policy=queue_config.ConsolidationPolicy(policy), actor=actor
        )
    except services.FieldErrors as exc:
        raise InvalidInput(exc.fields) from exc
    except services.ServiceError as exc:
        raise Conflict(str(exc)) from exc
