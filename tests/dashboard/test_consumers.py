"""The dashboard sockets through the real ASGI stack: who may connect, what a view sends first,
how deltas follow, how a reconnecting client resumes, and what a client too far behind gets."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import override_settings

from dashboard.consumers import CLOSE_SIGNED_OUT, user_group
from dashboard.selectors import head_event_id
from dashboard.tailer import Tailer
from scheduling import services
from scheduling.models import Node
from tests.dashboard.conftest import admin_cookie, communicator, connect
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tailers")]


def cordon(name: str, cordoned: bool = True) -> int:
    services.node_set_cordoned(node=Node.objects.get(name=name), cordoned=cordoned)
    return head_event_id()


async def node_names() -> list[str]:
    nodes = await sync_to_async(factories.nodes)(2)
    return [node.name for node in nodes]


# --- who may connect --------------------------------------------------------------------------


async def test_anonymous_sockets_are_refused(layer: str) -> None:
    socket = communicator("ws/live/cluster/")
    connected, _ = await socket.connect(timeout=5)
    assert not connected


async def test_signed_in_users_who_are_not_admins_are_refused(layer: str) -> None:
    cookie = await admin_cookie("tenant-user", staff=False)
    connected, _ = await communicator("ws/live/cluster/", cookie).connect(timeout=5)
    assert not connected


async def test_a_session_signed_in_before_the_password_changed_is_refused(layer: str) -> None:
    cookie = await admin_cookie()

    def change_password() -> None:
        admin = get_user_model().objects.get(username="admin")
        admin.set_password("a-new-password")
        admin.save()

    await sync_to_async(change_password)()
    connected, _ = await communicator("ws/live/cluster/", cookie).connect(timeout=5)
    assert not connected


async def test_an_unknown_session_key_is_refused(layer: str) -> None:
    cookie = await admin_cookie()
    name, _, key = cookie.partition(b"=")
    forged = name + b"=" + key[::-1]
    connected, _ = await communicator("ws/live/cluster/", forged).connect(timeout=5)
    assert not connected


async def test_sockets_from_another_site_are_refused(layer: str) -> None:
    cookie = await admin_cookie()
    for origin in (b"http://evil.example", None):
        connected, _ = await communicator("ws/live/cluster/", cookie, origin=origin).connect(
            timeout=5
        )
        assert not connected, origin


async def test_only_the_sites_own_origin_scheme_host_and_port_may_open_a_socket(
    layer: str,
) -> None:
    from gpusched.asgi import application

    cookie = await admin_cookie()

    async def opens(origin: bytes, *extra: tuple[bytes, bytes]) -> bool:
        headers = [(b"host", b"localhost:8000"), (b"origin", origin), (b"cookie", cookie), *extra]
        socket = WebsocketCommunicator(application, "ws/live/cluster/", headers=headers)
        connected, _ = await socket.connect(timeout=5)
        await socket.disconnect()
        return connected

    assert await opens(b"http://localhost:8000")
    # The host is allowed, but another port or scheme of it is another site.
    for origin in (b"http://localhost:9999", b"http://localhost", b"https://localhost:8000"):
        assert not await opens(origin), origin
    # Behind the trusted TLS proxy the site is https, and its http origin is another one.
    proxied = (b"x-forwarded-proto", b"https")
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        assert await opens(b"https://localhost:8000", proxied)
        assert not await opens(b"http://localhost:8000", proxied)
    with override_settings(CSRF_TRUSTED_ORIGINS=["https://localhost:8443"]):
        assert await opens(b"https://localhost:8443")


async def test_signing_out_closes_the_users_sockets(layer: str) -> None:
    cookie = await admin_cookie()
    client = await connect("ws/live/cluster/", cookie)
    await client.receive()
    user_id = await sync_to_async(lambda: get_user_model().objects.get(username="admin").pk)()
    await get_channel_layer().group_send(user_group(user_id), {"type": "live.close"})
    output = await client.socket.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": CLOSE_SIGNED_OUT}


# --- snapshot, then deltas --------------------------------------------------------------------


async def test_a_new_client_gets_a_snapshot_then_deltas(layer: str) -> None:
    names = await node_names()
    client = await connect("ws/live/cluster/", await admin_cookie())
    snapshot = await client.receive()
    assert snapshot["type"] == "snapshot"
    assert sorted(snapshot["state"]["nodes"]) == sorted(names)
    assert snapshot["state"]["summary"]["all"]["nodes"] == 2
    # The sampled slices follow the snapshot rather than holding it up.
    assert "stranded" not in snapshot["state"]
    await client.until(lambda c: "stranded" in c.state)
    assert client.state["stranded"]["all"]["stranded"] == 0  # nothing waits

    event_id = await sync_to_async(cordon)(names[0])
    deltas = await client.until_id(event_id)
    assert [d["type"] for d in deltas] == ["delta"]
    assert deltas[0]["changes"]["nodes"]["set"][names[0]]["cordoned"] is True
    assert deltas[0]["events"] == {"node.changed": 1}
    assert client.state["summary"]["all"]["cordoned"] == 1
    await client.socket.disconnect()


async def test_a_burst_of_commits_arrives_as_few_deltas(layer: str) -> None:
    names = await node_names()
    window = 0.3
    with override_settings(DASHBOARD_COALESCE_SECONDS=window):
        client = await connect("ws/live/cluster/", await admin_cookie())
        await client.until(lambda c: "stranded" in c.state)  # the snapshot, then its samples

        def burst() -> tuple[int, float]:
            started = time.monotonic()
            for k in range(20):
                cordon(names[k % 2], cordoned=k % 4 < 2)
            return head_event_id(), time.monotonic() - started

        last, seconds = await sync_to_async(burst)()
        deltas = await client.until_id(last)
    # 20 commits, pushed at most once per coalescing window (plus the leading edge).
    assert 1 <= len(deltas) <= seconds / window + 2, (len(deltas), seconds)
    assert len(deltas) < 20
    assert sum(sum(d["events"].values()) for d in deltas) <= 20
    final = await sync_to_async(lambda: dict(Node.objects.values_list("name", "cordoned")))()
    assert {name: doc["cordoned"] for name, doc in client.state["nodes"].items()} == final
    await client.socket.disconnect()


async def test_views_only_hear_about_their_own_changes(layer: str) -> None:
    names = await node_names()
    cookie = await admin_cookie()
    mine = await connect(f"ws/live/nodes/{names[0]}/", cookie)
    other = await connect(f"ws/live/nodes/{names[1]}/", cookie)
    await mine.receive()
    await other.receive()
    event_id = await sync_to_async(cordon)(names[0])
    await mine.until_id(event_id)
    assert mine.state["node"][names[0]]["cordoned"] is True
    await other.quiet()
    await mine.socket.disconnect()
    await other.socket.disconnect()


# --- resuming -------------------------------------------------------------------------------


async def test_a_reconnecting_client_gets_only_what_it_missed(layer: str) -> None:
    names = await node_names()
    cookie = await admin_cookie()
    first = await connect("ws/live/cluster/", cookie)
    await first.receive()
    watcher = await connect("ws/live/cluster/", cookie)  # keeps the view alive meanwhile
    await watcher.receive()
    seen = await sync_to_async(cordon)(names[0])
    await first.until_id(seen)
    await first.socket.disconnect()

    missed = await sync_to_async(cordon)(names[1])
    await watcher.until_id(missed)
    again = await connect("ws/live/cluster/", cookie, f"?since={first.id}&epoch={first.epoch}")
    again.state, again.id, again.epoch = first.state, first.id, first.epoch
    message = await again.receive()
    assert message["type"] == "delta"
    assert list(message["changes"]["nodes"]["set"]) == [names[1]]
    assert again.id == missed
    assert again.state["nodes"] == watcher.state["nodes"]
    for client in (again, watcher):
        await client.socket.disconnect()


async def test_a_client_too_far_behind_gets_a_fresh_snapshot(layer: str) -> None:
    names = await node_names()
    cookie = await admin_cookie()
    with override_settings(DASHBOARD_MAX_BEHIND_EVENTS=5):
        first = await connect("ws/live/cluster/", cookie)
        await first.receive()
        await first.socket.disconnect()
        watcher = await connect("ws/live/cluster/", cookie)
        await watcher.receive()

        for k in range(8):  # eight deltas, each seen by the watcher
            last = await sync_to_async(cordon)(names[0], k % 2 == 0)
            await watcher.until_id(last)
        again = await connect("ws/live/cluster/", cookie, f"?since={first.id}&epoch={first.epoch}")
        message = await again.receive()
        assert message["type"] == "snapshot"
        assert message["id"] == last
        for client in (again, watcher):
            await client.socket.disconnect()


async def test_a_client_of_another_process_or_epoch_gets_a_snapshot(layer: str) -> None:
    await node_names()
    cookie = await admin_cookie()
    client = await connect("ws/live/cluster/", cookie, "?since=1&epoch=someone-else.1")
    assert (await client.receive())["type"] == "snapshot"
    await client.socket.disconnect()


# --- robustness -------------------------------------------------------------------------------


async def test_the_tailer_survives_database_errors(layer: str, monkeypatch) -> None:
    names = await node_names()
    client = await connect("ws/live/cluster/", await admin_cookie())
    await client.receive()
    tailer = Tailer.for_running_loop()

    from django.db import OperationalError

    from dashboard import tailer as tailer_module

    real = tailer_module.read_after
    failures = {"left": 2}

    def flaky(cursor: int, limit: int | None = None):
        if failures["left"]:
            failures["left"] -= 1
            raise OperationalError("database is locked")
        return real(cursor, limit)

    monkeypatch.setattr(tailer_module, "read_after", flaky)
    while not tailer.errors:  # the database is "down" now
        await asyncio.sleep(0.01)
    event_id = await sync_to_async(cordon)(names[0])
    await client.until_id(event_id, timeout=15)
    assert tailer.errors == 2
    await client.socket.disconnect()


async def test_one_tailer_per_process_however_many_sockets(layer: str) -> None:
    await node_names()
    cookie = await admin_cookie()
    clients = [await connect("ws/live/cluster/", cookie) for _ in range(5)]
    for client in clients:
        await client.receive()
    tailer = Tailer.for_running_loop()
    assert list(tailer.lives) == ["cluster"]
    assert len(tailer.lives["cluster"].subscribers) == 5
    await asyncio.gather(*(client.socket.disconnect() for client in clients))
    assert not tailer.lives["cluster"].subscribers


async def test_a_view_that_fails_to_update_is_rebuilt_and_resent(
    layer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = await node_names()
    client = await connect("ws/live/cluster/", await admin_cookie())
    first = await client.receive()

    from dashboard.live import ClusterView

    real = ClusterView.changes
    calls = {"n": 0}

    def broken_once(self, state, events):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("a bug")
        return real(self, state, events)

    monkeypatch.setattr(ClusterView, "changes", broken_once)
    await sync_to_async(cordon)(names[0])
    message = await client.receive(timeout=10)
    while message["type"] != "snapshot":
        message = await client.receive(timeout=10)
    assert message["epoch"] != first["epoch"]
    assert message["state"]["nodes"][names[0]]["cordoned"] is True
    await client.socket.disconnect()


async def test_a_slow_sample_does_not_hold_deltas_back(
    layer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sampled slices are read beside the loop: a delta committed while a sample is being
    read arrives before that read ends."""
    import threading

    from dashboard.live import ClusterView

    names = await node_names()
    client = await connect("ws/live/cluster/", await admin_cookie())
    await client.until(lambda c: "stranded" in c.state)  # the first sample is in
    real = ClusterView.sample
    reading, release = threading.Event(), threading.Event()

    def slow(self: ClusterView) -> dict:
        reading.set()
        release.wait(20)
        return real(self)

    monkeypatch.setattr(ClusterView, "sample", slow)
    monkeypatch.setattr(ClusterView, "sample_every", 0.05)
    try:
        assert await asyncio.to_thread(reading.wait, 20)  # a sample is being read now
        event_id = await sync_to_async(cordon)(names[0])
        await client.until_id(event_id)
        assert not release.is_set()
    finally:
        release.set()
    await client.socket.disconnect()
