"""The Queues page shows a ClusterQueue its cluster deleted while it held admitted workloads as
terminating, gone from the cluster (scheduling.services.queues_replace), not merely on Hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth import get_user_model

from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile
from scheduling.services import queues_apply, queues_replace
from scheduling.worker.database_side import database_cycle
from tests.dashboard.servers import web_server
from tests.dashboard.test_e2e import artifacts, browser, in_thread, pytestmark, sign_in  # noqa: F401
from tests.scheduling import factories
from tests.test_observability import QUEUES


def setup_world() -> None:
    """research admits a workload, then its cluster's objects are only the flavor and idle."""
    factories.nodes(1)
    documents = list(yaml.safe_load_all(QUEUES))
    queues_apply(config=parse_documents(documents))
    factories.workload(factories.tenant("team-a"), "fits", gpus=4)
    database_cycle(Framework(load_profile("topology")), identity="e2e").run_once()
    kept = [doc for doc in documents if doc["metadata"]["name"] in ("h100", "idle")]
    assert queues_replace(config=parse_documents(kept), fair_sharing=False).terminating == [
        "research"
    ]
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()


def test_the_queues_page_shows_a_cluster_queue_gone_from_the_cluster(
    browser: Any,  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    in_thread(setup_world)
    with web_server(log=artifacts / "queue-lost-web.log") as base:
        page = browser.new_page()
        page.goto(f"{base}/login/")
        sign_in(page)
        page.goto(f"{base}/queues/")
        row = page.locator("tr", has_text="research").first
        row.locator("text=terminating: gone from the cluster").wait_for(timeout=20_000)
        assert "Hold" not in row.inner_text()
        idle = page.locator("tr", has_text="idle").first
        assert "terminating" not in idle.inner_text()
