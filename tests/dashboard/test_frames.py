"""Live messages in frames of bounded size: any state or change comes back whole from its frames,
every frame keeps to the bound, and a 5,000-node Cluster snapshot reaches a socket through the
real ASGI application in frames under 1 MiB (the whole snapshot is about 3.5 MB)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.frames import FRAME_BYTES, MAX_ENTRY_BYTES, frames, join
from dashboard.live import ClusterView, apply
from scheduling import services
from scheduling.models import Node
from sim.cluster import build_nodes, synthetic_pools
from tests.dashboard.conftest import admin_cookie, connect, outbox_only

keys = st.text("abcxyz-é0", min_size=1, max_size=6)
docs = st.dictionaries(keys, st.one_of(st.integers(), st.text('ab"\\é', max_size=400)), max_size=4)
states = st.dictionaries(keys, st.dictionaries(keys, docs, max_size=30), max_size=4)
changes = st.dictionaries(
    keys,
    st.fixed_dictionaries(
        {},
        optional={
            "replace": st.dictionaries(keys, docs, max_size=20),
            "set": st.dictionaries(keys, docs, max_size=30),
            "del": st.lists(keys, max_size=30, unique=True),
        },
    ),
    max_size=5,
)


def without_parts(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "parts"}


def within_bound(texts: list[str], field: str, budget: int) -> bool:
    """Every frame keeps to the budget, but for one holding a single entry larger than a frame."""
    return all(len(text) <= budget or leaves_of(json.loads(text), field) == 1 for text in texts)


def leaves_of(frame: dict[str, Any], field: str) -> int:
    """The entries a frame's state or changes carries: docs of a slice or of an operation,
    deleted keys."""
    if field == "state":
        return sum(len(part) for part in frame[field].values())
    return sum(len(entries) for part in frame[field].values() for entries in part.values())


@settings(max_examples=100, deadline=None)
@given(state=states, budget=st.integers(1500, 20_000))
def test_a_state_comes_back_whole_from_frames_within_the_bound(
    state: dict[str, Any], budget: int
) -> None:
    message = {"type": "snapshot", "view": "cluster", "epoch": "e", "id": 7, "state": state}
    texts = frames(copy.deepcopy(message), "state", budget)
    assert within_bound(texts, "state", budget)
    (joined,) = join(texts)
    assert without_parts(joined) == message


@settings(max_examples=100, deadline=None)
@given(before=states, change=changes, budget=st.integers(1500, 20_000))
def test_changes_come_back_whole_and_apply_as_one(
    before: dict[str, Any], change: dict[str, Any], budget: int
) -> None:
    message = {"type": "delta", "view": "cluster", "epoch": "e", "from": 1, "id": 2}
    message["changes"] = change
    texts = frames(copy.deepcopy(message), "changes", budget)
    assert within_bound(texts, "changes", budget)
    (joined,) = join(texts)
    assert without_parts(joined) == message
    assert apply(copy.deepcopy(before), joined["changes"]) == apply(copy.deepcopy(before), change)


def test_an_entry_larger_than_a_frame_is_replaced_by_a_stub() -> None:
    state = {"nodes": {"huge": {"x": "y" * (MAX_ENTRY_BYTES + 1)}, "small": {"x": 1}}}
    message = {"type": "snapshot", "view": "cluster", "state": state}
    texts = frames(message, "state")
    assert max(map(len, texts)) <= FRAME_BYTES
    (joined,) = join(texts)
    assert "omitted" in joined["state"]["nodes"]["huge"]
    assert joined["state"]["nodes"]["small"] == {"x": 1}


def test_a_5000_node_snapshot_keeps_every_frame_within_the_bound() -> None:
    """Thousands of entries to a frame: each one's quotes, colon and comma counted (estimated
    without them, a 5,000-node snapshot came out 588 bytes over the bound)."""
    nodes = {
        f"gpu-node-{k:05d}": {"gpus": [{"index": i, "used": k % 1000} for i in range(8)]}
        for k in range(5000)
    }
    message = {"type": "snapshot", "view": "cluster", "epoch": "e" * 32, "id": 10**9}
    message["state"] = {"nodes": nodes, "pools": {}}
    texts = frames(copy.deepcopy(message), "state")
    assert len(texts) > 1 and max(map(len, texts)) <= FRAME_BYTES
    (joined,) = join(texts)
    assert without_parts(joined) == message


def register(count: int) -> None:
    services.nodes_register(
        specs=build_nodes(synthetic_pools(count, "mixed")), source=Node.Source.SIMULATOR
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("tailers")
async def test_a_5000_node_cluster_reaches_the_socket_in_bounded_frames(layer: str) -> None:
    await sync_to_async(register)(5000)
    client = await connect("ws/live/cluster/", await admin_cookie())
    snapshot = await client.receive(timeout=120)
    assert snapshot["type"] == "snapshot" and len(snapshot["state"]["nodes"]) == 5000
    assert sum(map(len, client.frames)) > 2**20  # the whole would not fit a 1 MiB cap
    assert max(map(len, client.frames)) <= FRAME_BYTES
    fresh = await sync_to_async(ClusterView().build)()
    assert outbox_only(client.state, "cluster") == json.loads(json.dumps(fresh))

    # One commit touching 1,500 nodes is one delta of about 1 MB: in frames as well, applied
    # whole (snapshot + deltas == a fresh snapshot).
    def cordon_many() -> None:
        with transaction.atomic():
            for node in Node.objects.order_by("name")[:1500]:
                services.node_set_cordoned(node=node, cordoned=True)

    frames_before = len(client.frames)
    await sync_to_async(cordon_many)()
    await client.until(lambda c: sum(n["cordoned"] for n in c.state["nodes"].values()) == 1500, 120)
    assert client.messages[-1]["type"] == "delta" and len(client.frames) - frames_before > 1
    fresh = await sync_to_async(ClusterView().build)()
    assert outbox_only(client.state, "cluster") == json.loads(json.dumps(fresh))
    assert max(map(len, client.frames)) <= FRAME_BYTES
    await client.socket.disconnect()
