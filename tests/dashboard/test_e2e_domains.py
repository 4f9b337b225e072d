"""The Cluster page grouped by a Topology's domains, in Debian's headless Chromium against a real
web process: blocks hold racks, racks hold their nodes' cards, nodes without the levels' labels
sit outside; each domain is headed by its free GPUs, and a cordon moves the figure live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

from dashboard.selectors import cluster as cluster_docs
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.models import Node
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.dashboard.servers import web_server
from tests.dashboard.test_cluster_domains import apply_topology, labelled_cluster
from tests.dashboard.test_e2e import artifacts, browser, in_thread, pytestmark, sign_in  # noqa: F401
from tests.scheduling import factories


def setup() -> dict[str, Any]:
    labelled_cluster()
    apply_topology()
    factories.workload(factories.tenant("e2e"), "train", gpus=4)
    database_cycle(Framework(load_profile("topology")), identity="e2e").run_once()
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    return cluster_docs.domain_free_gpus(cluster_docs.cluster_nodes().nodes)


def cordon(name: str) -> int:
    services.node_set_cordoned(node=Node.objects.get(name=name), cordoned=True)
    return int(cluster_docs.domain_free_gpus(cluster_docs.cluster_nodes().nodes)["b2"]["free"])


def free_shown(page: Any, key: str) -> str:
    return str(page.inner_text(f'.domain-free[data-free-of="{key}"]'))


def test_the_cluster_page_groups_nodes_by_block_and_rack(
    browser: Any,  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    domains = in_thread(setup)
    with web_server(log=artifacts / "web-domains.log") as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{base}/")
        sign_in(page)
        page.wait_for_selector("#live-status[data-state=live]")
        page.wait_for_selector('section.domain[data-domain="b1"]')

        rack = 'section.domain[data-domain="b1"] > section.domain[data-domain="b1/b1-r1"]'
        assert page.locator(f"{rack} article.node-card").count() == 2
        assert page.locator('section.domain[data-domain="b2/b2-r1"] article.node-card').count() == 1
        assert page.locator('section.domain.outside article[data-node="n4"]').count() == 1
        assert page.inner_text('section.domain[data-domain="b1"] > h2 .level').lower() == "block"
        for key, doc in domains.items():
            assert free_shown(page, key).startswith(f"{doc['free']} free GPU"), key
        page.screenshot(path=str(artifacts / "cluster-domains.png"), full_page=True)

        # A cordon takes b2's only node out of the free count, without a reload.
        page.evaluate("window.__sameDocument = true")
        now_free = in_thread(cordon, "n3")
        page.locator('.domain-free[data-free-of="b2"]', has_text=f"{now_free} free GPUs").wait_for(
            timeout=10_000
        )
        assert now_free == 0 and page.evaluate("window.__sameDocument") is True
        assert not errors, errors
