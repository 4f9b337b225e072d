"""End to end in Debian's headless Chromium, driven by Playwright, against a real web process: an
admin signs in, sees the node map, a tenant submits a workload through the REST API, the scheduler
places it, and the placement appears on the Cluster page without a reload. Every page is saved as
a screenshot (in $GPUSCHED_E2E_ARTIFACTS when set, else the test's tmp dir)."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from dashboard.frames import FRAME_BYTES
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import TopologyPolicy
from scheduling.models import Node, Pod, QueueSource, Tenant
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from tests.dashboard.servers import web_server
from tests.scheduling import factories

T = TypeVar("T")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Headless on a machine with a closed network: no GPU, no sandbox (root), nothing phoning home.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed"),
]


def sign_in(page: Any) -> None:
    """Fill in and send the login form the page shows, as the staff user of the tests."""
    page.fill("#id_username", "admin")
    page.fill("#id_password", "e2e-password-1")
    page.click("button[type=submit]")


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("GPUSCHED_E2E_ARTIFACTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Database work while Playwright's sync API holds an event loop on this thread: Django
    refuses ORM calls there, so they run on a thread of their own (its connection closed after,
    or PostgreSQL could not drop the test database)."""

    def call() -> T:
        try:
            return fn(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh profile
            executable_path=CHROMIUM,
            args=FLAGS,
            headless=True,
            viewport={"width": 1440, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


def submit_through_the_api(base: str, tenant: Tenant) -> None:
    """POST /api/v1/workloads with the tenant's bearer token: one pod, 4 GPUs on one NUMA node."""
    body = {
        "name": "e2e-train",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "template": {
                    "resources": {"requests": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4}},
                    "topology": {"policy": "single-numa-node"},
                },
            }
        ],
    }
    if not apps.is_installed("api"):  # the REST API app is optional in this tree
        factories.workload(tenant, "e2e-train", gpus=4, policy=TopologyPolicy.SINGLE_NUMA_NODE)
        return
    from api.services import token_create

    _, token = token_create(tenant=tenant, name="e2e")
    request = urllib.request.Request(
        f"{base}/api/v1/workloads",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201, response.read()


def setup_cluster() -> tuple[list[str], Tenant]:
    nodes = factories.nodes(2, "dgx-h100")
    tenant = services.tenant_create(name="e2e")
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    return [node.name for node in nodes], tenant


def refuse_cluster_queues() -> None:
    now = timezone.now()
    services.queue_source_record(kind=QueueSource.Kind.CLUSTER, now=now, applied=True)
    services.queue_source_record(
        kind=QueueSource.Kind.CLUSTER,
        now=now,
        error="clusterqueues[0] (ClusterQueue team).spec.admissionChecks: Kueue's admission "
        "checks are not supported by gpusched",
    )


def schedule() -> str:
    """One scheduler cycle; returns the node the e2e pod was bound to."""
    report = database_cycle(Framework(load_profile("topology")), identity="e2e").run_once()
    assert report.bound == 1, report
    pod = Pod.objects.get(workload__name="e2e-train")
    return pod.allocations.get(active=True).node.name


def test_admin_watches_a_placement_appear_live(browser: Any, artifacts: Path) -> None:
    names, tenant = in_thread(setup_cluster)

    with web_server(log=artifacts / "web.log") as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))

        # Signed out: the dashboard sends us to the sign-in page.
        page.goto(f"{base}/")
        assert "/login/" in page.url
        page.screenshot(path=str(artifacts / "01-login.png"))
        sign_in(page)

        # The node map: every node drawn as its topology, live.
        page.wait_for_selector("article.node-card svg.topo")
        assert page.locator("article.node-card").count() == 2
        page.wait_for_selector("#live-status[data-state=live]")
        assert page.locator(f'article[data-node="{names[0]}"] g.gpu').count() == 8
        page.evaluate("window.__sameDocument = true")
        page.screenshot(path=str(artifacts / "02-cluster-before.png"))

        # A tenant submits through the REST API; the scheduler places it; the page shows it.
        in_thread(submit_through_the_api, base, tenant)
        node = in_thread(schedule)
        held = page.locator(f'article[data-node="{node}"] g.gpu[data-tenants~="e2e"]')
        held.first.wait_for(timeout=10_000)
        assert held.count() == 4
        assert page.evaluate("window.__sameDocument") is True  # no reload happened
        page.screenshot(path=str(artifacts / "03-cluster-placed.png"))

        # Every other page, as an admin sees it.
        page.goto(f"{base}/nodes/{node}/")
        page.wait_for_selector("#diagram svg.topo")
        page.wait_for_selector("#matrix table")
        page.screenshot(path=str(artifacts / "04-node.png"), full_page=True)

        page.goto(f"{base}/placements/")
        row = page.locator("#decisions tbody tr[data-id]").first
        row.wait_for()
        row.click()
        page.wait_for_selector("#detail h3")
        assert node in page.inner_text("#detail")
        page.screenshot(path=str(artifacts / "05-placements.png"))

        page.goto(f"{base}/queues/")
        page.wait_for_selector("#local-queues table")
        # The Kubernetes side finds the cluster's Kueue objects broken: the page says so, live.
        in_thread(refuse_cluster_queues)
        page.wait_for_selector("#queue-source .refused")
        assert "admissionChecks" in page.inner_text("#queue-source")
        page.screenshot(path=str(artifacts / "06-queues.png"), full_page=True)

        page.goto(f"{base}/tenants/")
        page.wait_for_selector("#tenants table")
        assert "e2e" in page.inner_text("#tenants")
        page.screenshot(path=str(artifacts / "07-tenants.png"), full_page=True)

        assert not errors, errors
    assert sorted(p.name for p in artifacts.glob("*.png")) == [
        "01-login.png",
        "02-cluster-before.png",
        "03-cluster-placed.png",
        "04-node.png",
        "05-placements.png",
        "06-queues.png",
        "07-tenants.png",
    ]


def setup_large_cluster(count: int) -> None:
    services.nodes_register(
        specs=build_nodes(synthetic_pools(count, "mixed")), source=Node.Source.SIMULATOR
    )
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()


@pytest.mark.slow
def test_the_cluster_page_of_5000_nodes_arrives_through_the_web_server(
    browser: Any, artifacts: Path
) -> None:
    """The 5,000-node snapshot is about 3.5 MB: it comes in bounded frames (dashboard/frames.py),
    none over 1 MiB, and live.js puts them together."""
    in_thread(setup_large_cluster, 5000)
    with web_server(log=artifacts / "web-5000.log") as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        frames: list[int] = []
        page.on(
            "websocket",
            lambda socket: socket.on("framereceived", lambda frame: frames.append(len(frame))),
        )
        page.goto(f"{base}/")
        sign_in(page)
        # A locator, not wait_for_function: its polling evaluates a string, which the page's
        # Content-Security-Policy (no eval) refuses.
        page.locator("article.node-card").nth(4999).wait_for(state="attached", timeout=120_000)
        assert page.locator("article.node-card").count() == 5000
        page.wait_for_selector("#live-status[data-state=live]")
        page.screenshot(path=str(artifacts / "cluster-5000.png"))
        assert sum(frames) > 2**20 and max(frames) <= FRAME_BYTES + 2048
        assert not errors, errors
