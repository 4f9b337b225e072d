"""Admin actions from the dashboard: cordon, uncordon and drain a node, cancel a workload, change
a tenant's quota. Each is a POST (CSRF-checked by Django's middleware; the page asks for
confirmation first), staff only, done through the REST API's own services, which record the
audit event (scheduling/services/audit.py) in the same transaction as the change. A node the
Kubernetes cluster manages is cordoned, uncordoned or drained in the cluster (the scheduler's cycle
carries it out: scheduling.worker.node_actions) and the page tells what the cluster said."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from api import services as api_services
from api.exceptions import Conflict, InvalidInput
from dashboard.selectors import quota_form
from dashboard.views import staff_required
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


@require_http_methods(["GET", "POST"])
@staff_required
def tenant_quota(request: HttpRequest, name: str) -> HttpResponse:
    """The quota form of a tenant: one row per flavor and resource of each ClusterQueue its
    LocalQueues point at (nominal quota; borrowing and lending limits where set). A change that
    goes through redirects to the form (POST-redirect-GET: a reload shows it again, never posts
    again); a refused one answers 400 with the form as submitted, each problem beside its field.
    The service audits the change itself."""
    tenant = get_object_or_404(Tenant, name=name)
    forms = quota_form.quota_forms(tenant)
    errors: dict[str, list[str]] = {}
    submitted: dict[str, str] = {}
    if request.method == "POST":
        cq = request.POST.get("cluster_queue", "")
        rows = next((f.rows for f in forms if f.cluster_queue == cq), [])
        limits = {
            (row.flavor, row.resource): {
                limit: request.POST[f"{row.key}.{limit}"].strip()
                for limit in quota_form.LIMITS
                if f"{row.key}.{limit}" in request.POST
            }
            for row in rows
        }
        submitted = {k: request.POST[k] for k in request.POST if "/" in k}
        try:
            changed = api_services.tenant_limits_set(
                tenant=tenant,
                cluster_queue=cq,
                limits=limits,
                actor=request.user.get_username(),
            )
        except InvalidInput as exc:
            errors = exc.fields
        except Conflict as exc:
            messages.error(request, f"Quota of {tenant.name} not changed: {exc.message}")
            return redirect(request.path)
        else:
            steps = "; ".join(
                f"{where} {limit} {step['from'] or 'none'} → {step['to'] or 'none'}"
                for where, by_limit in changed["limits"].items()
                for limit, step in by_limit.items()
            )
            messages.success(request, f"ClusterQueue {cq}: {steps or 'unchanged'}.")
            return redirect(request.path)
    tables = [
        {
            "cluster_queue": form.cluster_queue,
            "shared_with": form.shared_with,
            "rows": [
                {
                    "flavor": row.flavor,
                    "resource": row.resource,
                    "errors": errors.get(row.key, []),
                    "fields": [
                        {
                            "limit": limit,
                            "name": f"{row.key}.{limit}",
                            "value": submitted.get(f"{row.key}.{limit}", row.values[limit]),
                            "errors": errors.get(f"{row.key}.{limit}", []),
                        }
                        if limit in row.values
                        else None
                        for limit in quota_form.LIMITS
                    ],
                }
                for row in form.rows
            ],
        }
        for form in forms
    ]
    response = render(
        request,
        "dashboard/quota.html",
        {
            "page": "tenants",
            "tenant": tenant,
            "tables": tables,
            "limits": quota_form.LIMITS,
            "queue_errors": errors.get("clusterQueue", []),
        },
    )
    response.status_code = 400 if errors else 200
    return response
