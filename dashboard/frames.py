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
# The change operations (dashboard/live.py `apply`): maps of key -> doc, or a list of keys.
_MAPS = ("replace", "set")
_LARGEST_PART = 10**9  # stands in for `parts` and `n` when a frame's own keys are measured


def dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


def frames(message: dict[str, Any], field: str, budget: int = FRAME_BYTES) -> list[str]:
    """`message` as frames of at most `budget` characters (ASCII: bytes too), cut by the entries
    of `message[field]`: a state ({slice: {key: doc}}) or changes ({slice: {op: ...}}). Only an
    entry that alone is larger than a frame (up to MAX_ENTRY_BYTES) makes its frame larger.

    Each entry is charged what it adds to a page's JSON, separator included, and the maps and
    lists around it the first time a page holds them; a page takes entries while they fit the
    budget less the frame's own keys (the head's, or a part's, whichever is longer), so the sum
    is a bound on the frame, not an estimate."""
    text = dumps(message)
    if len(text) <= budget:
        return [text]
    own_keys = max(
        len(dumps({**message, field: {}, "parts": _LARGEST_PART})),
        len(dumps({"type": "part", "view": message["view"], "n": _LARGEST_PART, field: {}})),
    )
    room = budget - own_keys
    pages: list[dict[str, Any]] = [{}]
    opened: set[tuple[str, ...]] = set()  # the maps and lists the last page holds
    used = 0
    for path, value in _entries(message[field], field == "state"):
        size = _size(path, value)
        if size > MAX_ENTRY_BYTES:
            logger.warning(
                "dashboard: %s of %s is %d bytes: not shown", path, message["view"], size
            )
            value = {"omitted": f"{size} bytes, more than a websocket frame takes"}
            size = _size(path, value)
        container = path if isinstance(value, list) and value else path[:-1]
        cost = size + _opening(container, opened)
        if used and used + cost > room:
            pages.append({})
            opened, used = set(), 0
            cost = size + _opening(container, opened)
        _put(pages[-1], path, value)
        opened.update(container[:k] for k in range(1, len(container) + 1))
        if value in ({}, []):  # an empty slice or operation: a container from now on
            opened.add(path)
        used += cost
    head = {**message, field: pages[0], "parts": len(pages)}
    rest = [
        {"type": "part", "view": message["view"], "n": n, field: page}
        for n, page in enumerate(pages[1:], start=1)
    ]
    return [dumps(head), *map(dumps, rest)]


def _entries(payload: dict[str, Any], state: bool) -> list[tuple[tuple[str, ...], Any]]:
    """Every leaf of a state or changes with its path. Slices and operations with no entries (an
    empty slice, `replace: {}`, which clears one) are kept as empty leaves; a deleted key is a
    leaf `[key]` at its list's path."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, part in payload.items():
        found.append(((name,), {}))
        if state:
            found += [((name, key), doc) for key, doc in part.items()]
            continue
        for op, entries in part.items():
            if op in _MAPS:
                found.append(((name, op), {}))
                found += [((name, op, key), doc) for key, doc in entries.items()]
            else:  # "del": a list of keys
                found.append(((name, op), []))
                found += [((name, op), [key]) for key in entries]
    return found


def _size(path: tuple[str, ...], value: Any) -> int:
    """What a leaf adds to its page: `"key":value,`, or `"key",` for an item of a list."""
    if isinstance(value, list) and value:
        return len(json.dumps(value[0])) + 1
    return len(json.dumps(path[-1])) + 1 + len(dumps(value)) + 1


def _opening(container: tuple[str, ...], opened: set[tuple[str, ...]]) -> int:
    """What the maps and lists around a leaf add to a page that does not hold them yet:
    `"name":{` and `},` for each."""
    return sum(
        len(json.dumps(container[k - 1])) + 4
        for k in range(1, len(container) + 1)
        if container[:k] not in opened
    )


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
