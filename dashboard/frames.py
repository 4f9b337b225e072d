"""Websocket frames of bounded size: how a live message too large for one frame travels in parts.

A 5,000-node Cluster snapshot is about 3.5 MB of JSON. Servers and proxies cap a websocket
message (daphne, gpusched's server before `runweb`, closed the socket with code 1011 over 1 MiB,
and the browser got nothing), and raising a cap only moves the cliff, so every message is cut,
by the keys of its state or changes, into frames of at most FRAME_BYTES:

    {"type": "snapshot", ..., "state": {<first part>}, "parts": 3}
    {"type": "part", "view": ..., "n": 1, "state": {<second part>}}
    {"type": "part", "view": ..., "n": 2, "state": {<last part>}}

A message that fits is one frame, exactly as before (no `parts`). The receiver merges the parts
(`join` here, `GS.joinPart` in static/dashboard/live.js) and handles the whole message once, so a
state or a change is never applied half. The parts of one message are sent one after the other
on a socket, never interleaved with another message's. Nothing in a dashboard document comes
near a frame, but should one entry be larger than MAX_ENTRY_BYTES it is replaced by a stub
saying so, so that no frame can ever exceed such a cap.
"""

from __future__ import annotations

import json
import logging
from typing import Any

logger = logging.getLogger(__name__)

FRAME_BYTES = 256 * 1024
MAX_ENTRY_BYTES = 768 * 1024  # a frame stays under a 1 MiB cap (daphne's)
_HEAD_ROOM = 1024  # the frame's own keys around its part
# The change operations (dashboard/live.py `apply`): maps of key -> doc, or a list of keys.
_MAPS = ("replace", "set")


def dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


def frames(message: dict[str, Any], field: str, budget: int = FRAME_BYTES) -> list[str]:
    """`message` as frames of at most about `budget` characters, cut by the entries of
    `message[field]`: a state ({slice: {key: doc}}) or changes ({slice: {op: ...}})."""
    text = dumps(message)
    if len(text) <= budget:
        return [text]
    pages: list[dict[str, Any]] = [{}]
    room = budget - _HEAD_ROOM
    used = 0
    for path, value, size in _entries(message[field], field == "state"):
        if size > MAX_ENTRY_BYTES:
            logger.warning(
                "dashboard: %s of %s is %d bytes: not shown", path, message["view"], size
            )
            value = {"omitted": f"{size} bytes, more than a websocket frame takes"}
            size = len(dumps(value))
        if used and used + size > room:
            pages.append({})
            used = 0
        _put(pages[-1], path, value)
        used += size
    head = {**message, field: pages[0], "parts": len(pages)}
    rest = [
        {"type": "part", "view": message["view"], "n": n, field: page}
        for n, page in enumerate(pages[1:], start=1)
    ]
    return [dumps(head), *map(dumps, rest)]


def _entries(payload: dict[str, Any], state: bool) -> list[tuple[tuple[str, ...], Any, int]]:
    """Every leaf of a state or changes with its path and size. Slices and operations with no
    entries (an empty slice, `replace: {}`, which clears one) are kept as empty leaves."""
    found: list[tuple[tuple[str, ...], Any, int]] = []
    for name, part in payload.items():
        found.append(((name,), {}, len(name)))
        if state:
            found += [((name, key), doc, len(key) + len(dumps(doc))) for key, doc in part.items()]
            continue
        for op, entries in part.items():
            if op in _MAPS:
                found.append(((name, op), {}, len(name)))
                found += [
                    ((name, op, key), doc, len(key) + len(dumps(doc)))
                    for key, doc in entries.items()
                ]
            else:  # "del": a list of keys
                found.append(((name, op), [], len(op)))
                found += [((name, op), [key], len(key) + 4) for key in entries]
    return found


def _put(page: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = page
    for step in path[:-1]:
        node = node.setdefault(step, {})
    merge_into(node, {path[-1]: value})


def merge_into(into: dict[str, Any], part: dict[str, Any]) -> None:
    """Merge a part into what came before: maps merge key by key, lists (deleted keys) extend.
    The reference for live.js `GS.joinPart`."""
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_into(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key].extend(value)
        else:
            into[key] = value


def join(texts: list[str]) -> list[dict[str, Any]]:
    """The messages a sequence of frames carries (what the browser rebuilds)."""
    messages: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    field = ""
    for text in texts:
        frame = json.loads(text)
        if frame["type"] == "part":
            assert pending is not None and frame["n"] < pending["parts"]
            merge_into(pending[field], frame[field])
            if frame["n"] == pending["parts"] - 1:
                messages.append(pending)
                pending = None
            continue
        assert pending is None, "a message began before the previous one ended"
        if frame.get("parts", 1) > 1:
            pending, field = frame, "state" if "state" in frame else "changes"
        else:
            messages.append(frame)
    assert pending is None, "the last message is incomplete"
    return messages
