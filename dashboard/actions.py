"""Admin actions from the dashboard: cordon, uncordon and drain a node, cancel a workload, change
a tenant's quota. Each is a POST (CSRF-checked by Django's middleware; the page asks for
confirmation first), staff only, done through the REST API's own services, which record the
audit event (scheduling/services/audit.py) in the same transaction as the change."""

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
from scheduling.models import Node, Tenant, Workload


def _back(request: HttpRequest, fallback: str) -> HttpResponse:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect(target)
    return redirect(fallback)


@require_POST
@staff_required
def node_cordon(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    cordon = request.POST.get("cordoned", "1") == "1"
    api_services.node_cordon(node=node, cordoned=cordon, actor=request.user.get_username())
    messages.success(request, f"{node.name} {'cordoned' if cordon else 'uncordoned'}.")
    return _back(request, f"/nodes/{node.name}/")


@require_POST
@staff_required
def node_drain(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
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
