"""Every dashboard page and admin action, driven in Debian's headless Chromium against a real web
process, checked against what the REST API returns for the same data: the Tenants page's held,
busy and overRequest equal /api/v1/usage; a pod not placed shows, per group of nodes, the reasons
the API's pending status counts; the GPU ids shown are the ones allocated; cordon, cancel and a
tenant's quota change (two flavors, POST-redirect-GET) go through after the confirmation dialog.
Screenshots land in pages/ under $GPUSCHED_E2E_ARTIFACTS (or tmp)."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from api.services import tenant_onboard, token_create
from scheduling import events
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.core.types import TopologyPolicy
from scheduling.models import Allocation, ClusterQueue, Event, Node, Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.services import queues_apply
from scheduling.worker.database_side import database_cycle
from telemetry.models import GpuMinute, PodMinute
from tests.dashboard.servers import web_server
from tests.dashboard.test_e2e import artifacts, browser, in_thread, pytestmark, sign_in  # noqa: F401
from tests.scheduling import factories

MINUTES = 6


def setup_world() -> dict[str, Any]:
    """Two H100 nodes; vision trains on 4 GPUs (half busy for six measured minutes), nlp asks for
    16 GPUs on one node (never fits); an admin; a token per tenant."""
    nodes = factories.nodes(2, "dgx-h100")
    vision, nlp = factories.tenant("vision"), factories.tenant("nlp")
    factories.workload(vision, "train", gpus=4, policy=TopologyPolicy.SINGLE_NUMA_NODE)
    factories.workload(nlp, "huge", gpus=16)
    database_cycle(Framework(load_profile("topology")), identity="e2e").run_once()
    now = timezone.now().replace(second=0, microsecond=0)
    Allocation.objects.update(bound_at=now - timedelta(minutes=30))
    pod = Pod.objects.get(workload__name="train")
    for k in range(1, MINUTES + 1):
        minute = now - timedelta(minutes=k)
        GpuMinute.objects.create(minute=minute, node=nodes[0].name, gpu_index=0, samples=4)
        PodMinute.objects.create(
            minute=minute,
            namespace="vision",
            pod=pod.name,
            samples=4,
            gpus_avg=4,
            used_avg=1.5 + k / 10,
            used_max=2.5,
            used_p95=2.0,
            fb_used_avg=1000,
            fb_used_max=1000,
        )
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    return {
        "node": pod.allocations.get(active=True).node.name,
        "gpus": sorted(pod.allocations.get(active=True).gpus.values_list("gpu__index", flat=True)),
        "tokens": {t.name: token_create(tenant=t, name="e2e")[1] for t in (vision, nlp)},
    }


def api_get(base: str, token: str, path: str) -> Any:
    request = urllib.request.Request(
        f"{base}/api/v1{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_every_page_shows_what_the_api_says_and_actions_go_through(
    browser: Any,  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    world = in_thread(setup_world)
    shots = artifacts / "pages"  # apart from test_e2e's, which checks its own list of files
    shots.mkdir(exist_ok=True)
    with web_server(log=shots / "web.log") as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
        page.goto(f"{base}/login/")
        sign_in(page)
        page.wait_for_selector("article.node-card svg.topo")
        page.screenshot(path=str(shots / "dashboard-cluster.png"), full_page=True)

        # Tenants: the table's numbers are the API's.
        usage = api_get(base, world["tokens"]["vision"], "/usage?window=1h")
        page.goto(f"{base}/tenants/")
        row = page.locator('#efficiency tr[data-tenant="vision"]')
        row.wait_for(timeout=20_000)
        assert float(row.locator("td.held").inner_text()) == round(usage["requestedGpus"], 2)
        assert float(row.locator("td.busy").inner_text()) == round(usage["usedP95Gpus"], 2)
        shown = float(row.locator("td.over").inner_text().rstrip("×"))
        assert shown == pytest.approx(usage["overRequest"], abs=0.051)  # one decimal shown
        assert page.locator('#tenants tr[data-tenant="vision"] td.held-now').inner_text() == "4"
        page.wait_for_selector('#charts [data-tenant="vision"] .uplot')
        page.screenshot(path=str(shots / "dashboard-tenants.png"), full_page=True)

        # Placements: the pod not placed, per group of nodes, as the API's status counts them.
        status = api_get(base, world["tokens"]["nlp"], "/workloads/huge/status")
        page.goto(f"{base}/placements/")
        page.locator("#decisions tbody tr[data-id]").first.wait_for()
        page.select_option('[data-filter="outcome"]', "unschedulable")
        page.locator("#decisions tbody tr[data-id]").first.click()
        page.wait_for_selector("#why-pending")
        why = page.inner_text("#why-pending")
        assert "no node fits even empty" in why
        for reason in status["reasons"]:
            assert reason["reason"] in why
        page.screenshot(path=str(shots / "dashboard-placements-pending.png"))
        page.select_option('[data-filter="outcome"]', "bound")
        page.locator("#decisions tbody tr[data-id]").first.click()
        page.wait_for_selector("#gpu-set")
        assert f"GPU {', '.join(map(str, world['gpus']))}" in page.inner_text("#gpu-set")
        page.screenshot(path=str(shots / "dashboard-placements.png"))

        # Queues: the waiting workload, filtered by tenant, cancelled after the confirmation.
        page.goto(f"{base}/queues/")
        page.wait_for_selector("#pending-filters")
        page.select_option('[data-filter="tenant"]', "nlp")
        page.locator("#pending-table tr[data-uid]").first.wait_for()
        page.screenshot(path=str(shots / "dashboard-queues.png"), full_page=True)
        page.locator("#pending-table tr[data-uid] form button").first.click()
        page.wait_for_selector(".message.success")
        assert "nlp/huge cancelled" in page.inner_text("#messages")
        assert in_thread(lambda: Workload.objects.get(name="huge").state) == "Cancelled"

        # Node: cordoned after the confirmation, through the API's service.
        page.goto(f"{base}/nodes/{world['node']}/")
        page.wait_for_selector("#diagram svg.topo")
        page.screenshot(path=str(shots / "dashboard-node.png"), full_page=True)
        page.click("#cordon")
        page.wait_for_selector(".message.success")
        assert in_thread(lambda: Node.objects.get(name=world["node"]).cordoned) is True

        # An unknown page is the site's own 404, not Django's debug page.
        response = page.goto(f"{base}/no-such-page/")
        assert response is not None and response.status == 404
        assert errors == []


TWO_FLAVORS = [
    {"kind": "ResourceFlavor", "metadata": {"name": "h100"}},
    {"kind": "ResourceFlavor", "metadata": {"name": "a100"}},
    {
        "kind": "ClusterQueue",
        "metadata": {"name": "vision"},
        "spec": {
            "cohort": "research",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4}
                            ],
                        },
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 4, "lendingLimit": 2}
                            ],
                        },
                    ],
                }
            ],
        },
    },
]


def setup_tenants() -> None:
    """vision and nlp onboarded (their own ClusterQueues), vision's with two flavors (h100: 8
    GPUs, borrowing limit 4; a100: 4 GPUs, lending limit 2); an admin."""
    tenant_onboard(name="vision", quota={"nvidia.com/gpu": "8"})
    tenant_onboard(name="nlp", quota={"nvidia.com/gpu": "4"})
    queues_apply(config=parse_documents(TWO_FLAVORS))
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()


def vision_limits() -> dict[str, dict[str, int]]:
    groups = ClusterQueue.objects.get(name="vision").resource_groups
    return {
        fq["name"]: {k: v for k, v in fq["resources"][0].items() if k != "name" and v is not None}
        for group in groups
        for fq in group["flavors"]
    }


def audited_quota_changes() -> list[tuple[str, str, dict[str, Any]]]:
    rows = Event.objects.filter(type=events.AdminActed.TYPE).order_by("id")
    records = [events.read(row.type, row.payload) for row in rows]
    return [(r.actor, r.target, r.detail["limits"]) for r in records]  # type: ignore[attr-defined]


def test_an_admin_changes_a_two_flavor_quota_and_a_reload_does_not_post_again(
    browser: Any,  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    in_thread(setup_tenants)
    with web_server(log=artifacts / "web-quota.log") as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        questions: list[str] = []
        posts: list[str] = []
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)

        def answer(dialog: Any) -> None:
            questions.append(dialog.message)
            dialog.accept()

        page.on("dialog", answer)
        page.goto(f"{base}/login/")
        sign_in(page)
        page.goto(f"{base}/tenants/")
        page.locator('#tenants tr[data-tenant="vision"] a.quota-link').click()
        page.wait_for_url(f"{base}/tenants/vision/quota/")
        field = {
            (flavor, limit): page.locator(f'input[name="{flavor}/nvidia.com/gpu.{limit}"]')
            for flavor, limit in (
                ("h100", "nominalQuota"),
                ("h100", "borrowingLimit"),
                ("a100", "nominalQuota"),
                ("a100", "lendingLimit"),
            )
        }
        assert [f.input_value() for f in field.values()] == ["8", "4", "4", "2"]
        assert page.locator('input[name="h100/nvidia.com/gpu.lendingLimit"]').count() == 0

        field[("h100", "nominalQuota")].fill("12")
        field[("a100", "nominalQuota")].fill("6")
        field[("a100", "lendingLimit")].fill("3")
        page.locator("form.quota-form button[type=submit]").click()
        page.wait_for_selector(".message.success")
        assert questions == ["Change the quota of ClusterQueue vision?"]
        assert page.url == f"{base}/tenants/vision/quota/"  # redirected: the page is a GET
        assert in_thread(vision_limits) == {
            "h100": {"nominalQuota": 12000, "borrowingLimit": 4000},
            "a100": {"nominalQuota": 6000, "lendingLimit": 3000},
        }
        assert [f.input_value() for f in field.values()] == ["12", "4", "6", "3"]
        page.screenshot(path=str(artifacts / "pages" / "quota-changed.png"), full_page=True)

        page.reload()
        page.wait_for_selector("form.quota-form")
        assert len(posts) == 2  # the sign-in and the one change: the reload posted nothing
        assert len(in_thread(audited_quota_changes)) == 1

        # A lending limit above the nominal quota: 400, the problem beside its field.
        field[("a100", "lendingLimit")].fill("9")
        with page.expect_response(lambda r: r.url.endswith("/tenants/vision/quota/")) as refused:
            page.locator("form.quota-form button[type=submit]").click()
        assert refused.value.status == 400
        invalid = page.locator('input[name="a100/nvidia.com/gpu.lendingLimit"][aria-invalid=true]')
        invalid.wait_for()
        assert "above the nominal quota 6" in page.inner_text("form.quota-form")
        assert len(in_thread(audited_quota_changes)) == 1
        assert errors == []
