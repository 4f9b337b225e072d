"""Dashboard pages. Each page is a shell: its data arrives over the page's websocket (a snapshot,
then deltas), so the first paint and every later update go through the same code in the browser.
Only static facts (a node's labels and taints) and the per-decision explanation (fetched on click)
come over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from dashboard.consumers import user_group
from dashboard.selectors import placements as placement_selectors
from dashboard.signin import SignInForm
from dashboard.tailer import Tailer
from scheduling.models import Node, Tenant

View = Callable[..., HttpResponse]


def staff_required(view: View) -> View:
    """Signed-in staff only: others are sent to the sign-in page, non-staff users get 403."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not user.is_staff:
            raise PermissionDenied("the dashboard is for platform admins")
        return view(request, *args, **kwargs)

    return wrapper


def _page(
    request: HttpRequest, template: str, page: str, socket: str, **extra: Any
) -> HttpResponse:
    context = {
        "page": page,
        "socket": socket,
        # Tenant colors follow creation order, so they stay put as tenants are added.
        "tenant_order": list(Tenant.objects.order_by("id").values_list("name", flat=True)),
        # The demo's simulated cluster runs its workloads `speed` times faster than the clock.
        "simulated_speed": settings.SIM_SPEED,
        **extra,
    }
    return render(request, template, context)


@require_safe
async def cluster(request: HttpRequest) -> HttpResponse:
    """Async so that it runs on the web process's event loop: it has the tailer start building
    the Cluster view (a thousand nodes take a few hundred ms) while the browser loads the page's
    scripts, instead of after its socket connects."""
    user = await request.auser()
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not user.is_staff:
        raise PermissionDenied("the dashboard is for platform admins")
    if isinstance(request, ASGIRequest):  # served by the web process (not a test client)
        Tailer.for_running_loop().prepare("cluster")
    return await sync_to_async(_page)(
        request, "dashboard/cluster.html", "cluster", "ws/live/cluster/"
    )


@require_safe
@staff_required
def placements(request: HttpRequest) -> HttpResponse:
    return _page(request, "dashboard/placements.html", "placements", "ws/live/placements/")


@require_safe
@staff_required
def queues(request: HttpRequest) -> HttpResponse:
    return _page(request, "dashboard/queues.html", "queues", "ws/live/queues/")


@require_safe
@staff_required
def tenants(request: HttpRequest) -> HttpResponse:
    return tenants_page(request)


def tenants_page(request: HttpRequest) -> HttpResponse:
    """The Tenants page (also the answer to a refused quota change, which says why)."""
    return _page(request, "dashboard/tenants.html", "tenants", "ws/live/tenants/")


@require_safe
@staff_required
def node(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    return _page(
        request,
        "dashboard/node.html",
        "cluster",
        f"ws/live/nodes/{node.name}/",
        node=node,
        labels=sorted(node.labels.items()),
    )


@require_safe
@staff_required
def decision(request: HttpRequest, pk: int) -> JsonResponse:
    detail = placement_selectors.decision_detail(pk)
    if detail is None:
        raise Http404("no such decision (it may have been pruned)")
    return JsonResponse(detail)


class LoginView(auth_views.LoginView):
    """Sign-in, throttled per username and address (dashboard/signin.py)."""

    template_name = "dashboard/login.html"
    authentication_form = SignInForm


@require_POST
def logout(request: HttpRequest) -> HttpResponse:
    """Sign out, and close this user's dashboard sockets in every web process."""
    if request.user.is_authenticated:
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(user_group(request.user.pk), {"type": "live.close"})
    auth.logout(request)
    return redirect("dashboard:login")
