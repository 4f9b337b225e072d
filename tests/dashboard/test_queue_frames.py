"""The Queues page's deltas stay slim: when the head of a long line leaves, every workload behind
it moves up one place, and the delta carries each one's new place (a few bytes) rather than its
whole doc again. Sizes are the JSON the socket would send (measured, printed with -s)."""

from __future__ import annotations

import json

import pytest
import yaml
from django.utils import timezone

from dashboard.live import apply, view_for
from dashboard.selectors import head_event_id
from scheduling import events, services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.models import Event, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.dashboard.test_invariant import QUEUES
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db]

LINE = 60


def test_the_head_leaving_a_long_line_sends_positions_not_docs() -> None:
    factories.nodes(1, "dgx-h100")
    vision = factories.tenant("vision")
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
    for i in range(LINE):
        factories.workload(vision, f"w{i:03d}", gpus=4)
    database_cycle(Framework(load_profile("topology")), identity="frames").run_once()
    view = view_for("queues")
    state = view.build()
    waiting = [uid for uid, doc in state["pending"].items() if doc["state"] == "Pending"]
    assert len(waiting) > LINE - 5
    head = min(waiting, key=lambda uid: state["positions"][uid]["o"])
    since = head_event_id()

    services.workload_cancel(workload=Workload.objects.get(uid=head))
    rows = Event.objects.filter(id__gt=since).order_by("id")
    changes = view.changes(state, [(row.id, events.read(row.type, row.payload)) for row in rows])
    assert changes is not None
    delta = len(json.dumps(changes, separators=(",", ":")))
    moved = [uid for uid in changes["positions"].get("set", {}) if uid in state["pending"]]
    # What the same delta weighed when a doc carried its place in line: each moved doc again.
    whole_docs = sum(len(json.dumps(state["pending"][uid], separators=(",", ":"))) for uid in moved)
    print(f"\nqueues delta: {delta} bytes for {len(moved)} moved workloads ({whole_docs} as docs)")
    assert len(moved) >= LINE - 10
    assert "set" not in changes.get("pending", {})  # no doc changed, only places in line
    assert delta * 3 < whole_docs

    apply(state, changes)
    fresh = view.build()
    assert state["pending"] == fresh["pending"] and state["positions"] == fresh["positions"]


def test_the_queue_view_shows_what_an_estimated_start_rests_on() -> None:
    """Its basis beside each estimated start (issue 37), and why, when the start is unknown."""
    factories.nodes(1, "dgx-h100")
    vision = factories.tenant("vision")
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
    waiting = [factories.workload(vision, f"w{i}", gpus=8) for i in range(3)]
    database_cycle(Framework(load_profile("topology")), identity="frames").run_once()
    services.workload_estimates_record(
        estimates=[
            services.WorkloadEstimate(
                workload_id=w.pk,
                runtime_p50_s=600.0,
                runtime_p90_s=600.0,
                runtime_basis="prior: queue default (gpusched.io/default-runtime of x: 600 s)",
                start_p50=None,
                start_p90=None,
                start_unknown_reason="waits for running work with no predicted end",
            )
            for w in waiting
        ],
        now=timezone.now(),
    )
    starts = view_for("queues").sample()["starts"]
    ours = {str(w.uid) for w in waiting}
    shown = [doc for uid, doc in starts.items() if uid in ours]
    assert len(shown) >= 2  # one 8-GPU node: at most one of them runs
    for doc in shown:
        assert doc["basis"].startswith("prior: queue default")
        assert doc["unknown"] == "waits for running work with no predicted end"
