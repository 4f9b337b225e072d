"""`manage.py runweb`, the web process as production runs it: a dashboard socket gets its deltas
uncompressed, even from a browser that asks for compression (each delta is serialized once for
all of a process's sockets; compressed, it would be worked on once per socket)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from tests.dashboard.conftest import make_admin, session_cookie
from tests.dashboard.servers import web_server

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_socket_that_asks_for_compression_gets_plain_frames() -> None:
    cookie = session_cookie(make_admin())

    async def first_message(base: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(
                f"{base.replace('http', 'ws')}/ws/live/cluster/",
                headers={"Cookie": cookie.decode(), "Origin": base},
                compress=15,  # permessage-deflate offered, as browsers do
            )
            message = json.loads(await ws.receive_str(timeout=10))
            await ws.close()
            return ws.compress, message["type"]

    with web_server() as base:
        compress, first = asyncio.run(first_message(base))
    assert (compress, first) == (0, "snapshot")
