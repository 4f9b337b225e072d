"""Admin actions from the dashboard: cordon, uncordon and drain a node, cancel a workload, change
a tenant's quota. Each is a POST (CSRF-checked by Django's middleware; the page asks for
confirmation first), staff only, done through the REST API's own services, which record the
audit event (scheduling/services/audit.py) in the same transaction as the change. A node the
Kubernetes cluster manages is cordoned, uncordoned or drained in the cluster (the scheduler's cycle
carries it out: scheduling.worker.node_actions) and the page tells what the cluster said."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from api import services as api_services
from api.exceptions import Conflict, InvalidInput
from dashboard import views
from dashboard.views import staff_required
from scheduling.core.types import GPU_RESOURCE
from scheduling.models import Node, NodeAction, Tenant, Workload


def _back(request: HttpRequest, fallback: str) -> HttpResponse:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect(target)
    return redirect(fallback)


def _cluster_answered(request: HttpRequest, action: NodeAction) -> None:
    """What the Kubernetes cluster said to a node action, as the page's messages."""
    if action.answered_at is None:
        messages.warning(
            request,
            f"{action.kind} of {action.node} asked of the cluster; no answer yet (the scheduler "
            f"carries it out at its next cycle): GET /api/v1/admin/nodeactions/{action.pk}",
        )
        return
    said = action.answer["node"]
    if said["status"] != 200:
        messages.error(
            request,
            f"{action.kind} of {action.node}: the cluster answered {said['status']}: "
            f"{said['message']}",
        )
        return
    messages.success(
        request,
        f"{action.node} {action.kind}ed: the cluster answered {said['status']}, the Node's "
        f"spec.unschedulable is now {str(said['unschedulable']).lower()}.",
    )
    for pod in action.answer.get("pods", []):
        note = messages.success if pod["evicted"] else messages.error
        outcome = "evicted" if pod["evicted"] else "not evicted, its workload keeps its pods"
        note(request, f"pod {pod['pod']}: {outcome} (Eviction API: {pod['status']})")


@require_POST
@staff_required
def node_cordon(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    cordon = request.POST.get("cordoned", "1") == "1"
    if node.source == Node.Source.KUBERNETES:
        kind = NodeAction.Kind.CORDON if cordon else NodeAction.Kind.UNCORDON
        actor = request.user.get_username()
        _cluster_answered(request, api_services.node_action(node=node, kind=kind, actor=actor))
        return _back(request, f"/nodes/{node.name}/")
    api_services.node_cordon(node=node, cordoned=cordon, actor=request.user.get_username())
    messages.success(request, f"{node.name} {'cordoned' if cordon else 'uncordoned'}.")
    return _back(request, f"/nodes/{node.name}/")


@require_POST
@staff_required
def node_drain(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    if node.source == Node.Source.KUBERNETES:
        action = api_services.node_action(
            node=node, kind=NodeAction.Kind.DRAIN, actor=request.user.get_username()
        )
        _cluster_answered(request, action)
        return _back(request, f"/nodes/{node.name}/")
    _, evicted = api_services.node_drain(node=node, actor=request.user.get_username())
    messages.success(
        request, f"{node.name} drained: cordoned, {len(evicted)} workload(s) requeued."
    )
    return _back(request, f"/nodes/{node.name}/")


@require_POST
@staff_required
def workload_cancel(request: HttpRequest, uid: str) -> HttpResponse:
    workload = get_object_or_404(Workload.objects.select_related("tenant"), uid=uid)
    target = f"{workload.tenant.namespace}/{workload.name}"
    try:
        api_services.workload_cancel(workload=workload, actor=request.user.get_username())
    except Conflict as exc:
        messages.error(request, f"{target} not cancelled: {exc.message}")
    else:
        messages.success(request, f"{target} cancelled.")
    return _back(request, "/queues/")


@require_POST
@staff_required
def tenant_quota(request: HttpRequest, name: str) -> HttpResponse:
    """The nominal quota of one resource (GPUs unless the form says) of the tenant's ClusterQueue.
    Bad input answers 400 with the Tenants page, each problem named by its field; the service
    audits the change itself (the REST API's quota change is the same call)."""
    tenant = get_object_or_404(Tenant, name=name)
    resource = request.POST.get("resource", GPU_RESOURCE)
    quantity = request.POST.get("quantity", "").strip()
    try:
        changed = api_services.tenant_quota_set(
            tenant=tenant,
            quota={resource: quantity},
            cluster_queue=request.POST.get("cluster_queue") or None,
            flavor=request.POST.get("flavor") or None,
            actor=request.user.get_username(),
        )
    except InvalidInput as exc:
        for field, problems in exc.fields.items():
            messages.error(
                request, f"Quota of {tenant.name} not changed: {field}: {' '.join(problems)}"
            )
        response = views.tenants_page(request)
        response.status_code = 400
        return response
    except Conflict as exc:
        messages.error(request, f"Quota of {tenant.name} not changed: {exc.message}")
        return _back(request, "/tenants/")
    steps = ", ".join(
        f"{r} {change['from']} → {change['to']}" for r, change in changed["nominalQuota"].items()
    )
    where = f"ClusterQueue {changed['clusterQueue']} (flavor {changed['flavor']})"
    messages.success(request, f"{where}: {steps or 'unchanged'}.")
    return _back(request, "/tenants/")
