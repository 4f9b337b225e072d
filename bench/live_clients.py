"""Dashboard clients for the live-view benchmarks (`bench_live`, `bench_stack`), each process a
share of the sockets, as browsers are processes of their own: one Python process reading
hundreds of sockets (and, in `bench_stack`, beside the tenants' HTTP clients) timed its own
queue as much as the server's. No Django here: a spawned process imports only this module.

A process connects its sockets to the Cluster view one after the other, each with its snapshot,
says it is ready, records when each delta id reaches each socket (the system-wide monotonic
clock, which the committing process reads too), and on "stop" sends back what it received and
which sockets the server closed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

Received = dict[int, dict[int, float]]  # socket number -> delta id -> receive time
# A live message starts with its type and, for a delta, its ids (dashboard/tailer.py builds it
# in that order): read from there, not parsed whole, since a browser parses a delta on a
# machine of its own, and 200 sockets' parsing here took the cores the server is measured on.
_HEAD = re.compile(r'^\{"type":"(\w+)"(?:.*?"id":(\d+))?')


def _head(text: str) -> tuple[str, int]:
    found = _HEAD.match(text[:400])
    if found is None:
        doc = json.loads(text)
        return str(doc.get("type")), int(doc.get("id") or 0)
    return found.group(1), int(found.group(2) or 0)


def run(bases: Sequence[str], cookie: str, sockets: Sequence[int], conn: Connection) -> None:
    """A client process: connect `sockets` (numbers, spread over `bases` in turn), report
    ("ready", None), then on "stop" report ("done", (received, closed))."""
    try:
        conn.send(("done", asyncio.run(_listen(bases, cookie, sockets, conn))))
    except Exception as exc:  # the parent reports it; a hung child would hang the benchmark
        conn.send(("failed", repr(exc)))


async def _listen(
    bases: Sequence[str], cookie: str, sockets: Sequence[int], conn: Connection
) -> tuple[Received, list[int]]:
    import aiohttp

    received: Received = {k: {} for k in sockets}
    snapshots = {k: asyncio.Event() for k in sockets}
    closed: list[int] = []

    async def listen(k: int, ws: Any) -> None:
        async for message in ws:
            at = time.monotonic()
            kind, delta_id = _head(message.data)
            if kind == "snapshot":
                snapshots[k].set()
            elif kind == "delta":
                received[k][delta_id] = at
        closed.append(k)

    # No pool limit: aiohttp counts each websocket against its default of 100 connections.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        opened = []
        listeners = []
        for k in sockets:
            origin = bases[k % len(bases)]
            ws = await http.ws_connect(
                f"{origin.replace('http', 'ws')}/ws/live/cluster/",
                headers={"Cookie": cookie, "Origin": origin},
                max_msg_size=0,
            )
            opened.append(ws)
            listeners.append(asyncio.create_task(listen(k, ws)))
            await asyncio.wait_for(snapshots[k].wait(), timeout=60)
        conn.send(("ready", None))
        await asyncio.to_thread(conn.recv)  # "stop"
        dropped = sorted(closed)  # sockets the server closed during the run
        for ws in opened:
            await ws.close()
        await asyncio.gather(*listeners, return_exceptions=True)
    return received, dropped
