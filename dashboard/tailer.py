"""The outbox tailer: one per web process (per event loop), started by the first dashboard
websocket, shared by all of them.

It keeps, for each view someone watches, that view's state as of an outbox cursor (an Event id).
Each step reads the outbox rows after the lowest cursor, turns them into one delta per view
(`live.LiveView.changes`), applies it to the kept state, remembers it in a short buffer and hands
it, serialized once, to each of the view's sockets in this process, in the background: the next
read need not wait for a hundred sockets to be written, only its own deltas wait for the step
before's to be out. A read after a push comes no sooner than the coalescing window after the read
before it began, so a burst of commits reaches a browser as one delta, and a step that took
longer than the window is followed by the next at once.

A client connecting with the last id it saw (and the `epoch` of the state it came from) gets the
buffered deltas after that id; one that is unknown, from another process or view epoch, or more
than DASHBOARD_MAX_BEHIND_EVENTS behind gets a fresh snapshot, served from the kept state. Because
snapshots and deltas come from the same kept state, snapshot + deltas == that state, always.

Every web replica tails the outbox itself and fans out only to its own sockets, so N replicas never
deliver a change N times. The fan-out stays in the process: the sockets a tailer serves are on its
own event loop, so a delta goes straight to them (`Subscriber.deliver`), not through the channel
layer (with channels-redis that was a serialization, four Redis round trips and a wake-up of every
socket's receive loop per delta, for sockets of this very process). Database work runs on one
thread of the tailer's own (one connection kept open), the sampled slices' reads on another, so a
slow sample never holds deltas back; a database error is logged and retried with backoff, and a
view whose update fails for any other reason is rebuilt and its clients are sent a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
import weakref
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from django.db import DatabaseError, InterfaceError, connections

from dashboard import conf
from dashboard.frames import frames
from dashboard.live import Changes, EventRow, LiveView, State, apply, diff, view_for
from dashboard.selectors import head_event_id
from scheduling.events import event_type, read_after

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _Redo(enum.Enum):
    """A view a step does not update by its changes: it is read afresh, or marked for that."""

    REBUILD = "far behind, or broken"
    BROKEN = "its update failed"


# A view, its events, and their changes (None: nothing it shows changed) or what to do instead.
_Update = tuple["Live", list[EventRow], Changes | None | _Redo]


class Subscriber(Protocol):
    """A socket watching a view (dashboard.consumers.LiveConsumer)."""

    async def deliver(self, message: dict[str, Any]) -> None:
        """Handle one live.* message: a delta, a sample or a reset of the view."""


# A delta and the sockets it goes to.
_Delivery = tuple[list[Subscriber], dict[str, Any]]


@dataclass
class Entry:
    """One pushed delta: the state after event `last`, from the state after event `first`, as
    websocket frames (dashboard/frames.py)."""

    first: int
    last: int
    frames: list[str]


@dataclass
class Live:
    """One view's state in this process, and who watches it."""

    view: LiveView
    epoch: str
    cursor: int
    state: State
    sampled: State = field(default_factory=dict)
    base: int = 0  # the buffer replays from here: entries cover (base, cursor]
    entries: deque[Entry] = field(default_factory=deque)
    subscribers: set[Subscriber] = field(default_factory=set)
    idle_since: float | None = None
    next_sample_at: float = 0.0
    broken: bool = False
    _snapshot: tuple[int, int, list[str]] | None = None
    _sample_version: int = 0

    def snapshot_frames(self) -> list[str]:
        key = (self.cursor, self._sample_version)
        if self._snapshot is None or self._snapshot[:2] != key:
            message = {
                "type": "snapshot",
                "view": self.view.key,
                "epoch": self.epoch,
                "id": self.cursor,
                "state": {**self.state, **self.sampled},
            }
            self._snapshot = (*key, frames(message, "state"))
        return self._snapshot[2]

    def sample_frames(self, changes: Changes) -> list[str]:
        return frames({"type": "sample", "view": self.view.key, "changes": changes}, "changes")

    def catch_up(self, since: int | None, epoch: str | None, max_behind: int) -> list[str]:
        """The frames a client that saw up to `since` of `epoch` needs: the deltas it missed
        plus the sampled parts in full, or one fresh snapshot."""
        if since is None or epoch != self.epoch or not self.base <= since <= self.cursor:
            return self.snapshot_frames()
        missed = [text for entry in self.entries if entry.last > since for text in entry.frames]
        if missed and self.entries[-1].last - since > max_behind:
            return self.snapshot_frames()  # replaying would cost more than starting afresh
        if self.sampled:
            missed += self.sample_frames(
                {name: {"replace": docs} for name, docs in self.sampled.items()}
            )
        return missed


class Tailer:
    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Tailer] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex[:12]
        self.lives: dict[str, Live] = {}
        self._building: dict[str, asyncio.Task[Live]] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-tailer")
        # The sampled slices are read on a thread (and connection) of their own, beside the loop:
        # a sample (the stranded count, the telemetry) took up to 700 ms on a busy machine, and
        # every delta behind it waited that long every few seconds.
        self._sampler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-sampler")
        self._task: asyncio.Task[None] | None = None
        self._sampling: asyncio.Task[None] | None = None
        self._delivering: asyncio.Task[None] | None = None
        self._epochs = 0
        self.poll_s = conf.value("DASHBOARD_POLL_SECONDS")
        self.coalesce_s = conf.value("DASHBOARD_COALESCE_SECONDS")
        self.max_behind = int(conf.value("DASHBOARD_MAX_BEHIND_EVENTS"))
        self.buffered = int(conf.value("DASHBOARD_BUFFERED_DELTAS"))
        self.batch = int(conf.value("DASHBOARD_EVENT_BATCH"))
        self.linger_s = conf.value("DASHBOARD_LINGER_SECONDS")
        self.steps = 0  # completed steps (tests wait on it)
        self.errors = 0

    # --- lifecycle ------------------------------------------------------------------------

    @classmethod
    def for_running_loop(cls) -> Tailer:
        """This process's tailer, started on first use."""
        loop = asyncio.get_running_loop()
        tailer = cls._by_loop.get(loop)
        if tailer is None:
            tailer = cls._by_loop[loop] = cls()
        tailer._ensure_running()
        return tailer

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            if self._task is not None and not self._task.cancelled() and self._task.exception():
                logger.error("dashboard tailer died; restarting", exc_info=self._task.exception())
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="dashboard-tailer"
            )

    async def stop(self) -> None:
        """Stop the loop and the sampling, and close their threads' database connections."""
        for task in (self._task, self._sampling, self._delivering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._sampling = self._delivering = None
        for executor in (self._executor, self._sampler):
            await self._on(executor, connections.close_all)
            executor.shutdown(wait=False)
        loop = asyncio.get_running_loop()
        if self._by_loop.get(loop) is self:
            del self._by_loop[loop]

    @classmethod
    async def stop_all(cls) -> None:
        tailer = cls._by_loop.get(asyncio.get_running_loop())
        if tailer is not None:
            await tailer.stop()

    @classmethod
    def read_up_to(cls) -> list[int]:
        """How far each of this process's tailers has delivered the outbox: the lowest cursor of
        the views it keeps (tailers keeping none are left out). Read by /metrics, from another
        thread: it only copies and reads."""
        lowest = []
        for tailer in list(cls._by_loop.values()):
            cursors = [live.cursor for live in list(tailer.lives.values())]
            if cursors:
                lowest.append(min(cursors))
        return lowest

    # --- subscribers ----------------------------------------------------------------------

    async def attach(
        self, key: str, since: int | None, epoch: str | None, subscriber: Subscriber
    ) -> tuple[Live, list[str]]:
        """Add a subscriber of view `key`; returns the view and what to send it first. It gets
        every message after that: nothing is awaited between the catch-up and joining."""
        live = await self._live(key)
        live.subscribers.add(subscriber)
        live.idle_since = None
        return live, live.catch_up(since, epoch, self.max_behind)

    def detach(self, key: str, subscriber: Subscriber) -> None:
        live = self.lives.get(key)
        if live is not None:
            live.subscribers.discard(subscriber)
            if not live.subscribers:
                live.idle_since = time.monotonic()

    def prepare(self, key: str) -> None:
        """Start building view `key` now, without waiting for it: a page asks for this while the
        browser is still loading its scripts, so its socket finds the view ready."""
        if key in self.lives or key in self._building:
            return
        task = asyncio.get_running_loop().create_task(self._live(key), name=f"preparing {key}")
        task.add_done_callback(_log_failure)

    async def snapshot(self, key: str) -> Live:
        """The view as kept now (built if nobody watched it yet)."""
        return await self._live(key)

    async def _live(self, key: str) -> Live:
        live = self.lives.get(key)
        if live is not None:
            return live
        # One build per view however many sockets ask at once; a socket that goes away while
        # waiting does not cancel the build the others wait for.
        task = self._building.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._build_into(key))
            self._building[key] = task
            task.add_done_callback(lambda _: self._building.pop(key, None))
        return await asyncio.shield(task)

    async def _build_into(self, key: str) -> Live:
        live = await self._build(view_for(key))
        self.lives[key] = live
        return live

    async def _build(self, view: LiveView, sampled: State | None = None) -> Live:
        """The view's outbox slices, read afresh. Its sampled slices (`sampled`: what a rebuilt
        view had) are not read here but at the next step, after the snapshot has gone out: they
        are the costlier reads, and a first visitor's page can draw without them."""

        def read() -> tuple[int, State]:
            cursor = head_event_id()  # first the id, then the state: nothing is missed
            return cursor, view.build()

        cursor, state = await self._db(read)
        self._epochs += 1
        live = Live(
            view=view,
            epoch=f"{self.token}.{self._epochs}",
            cursor=cursor,
            base=cursor,
            state=state,
            sampled=dict(sampled or {}),
            idle_since=time.monotonic(),
        )
        return live

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                began = loop.time()
                pushed, more = await self.step()
                backoff = 0.0
                if more:
                    delay = 0.0
                elif pushed:  # the window runs from this read: a long step already waited it out
                    delay = max(0.0, self.coalesce_s - (loop.time() - began))
                else:
                    delay = self.poll_s
            except asyncio.CancelledError:
                raise
            except Exception:
                self.errors += 1
                backoff = min(max(backoff * 2, 0.5), 10.0)
                logger.warning(
                    "dashboard tailer: step failed; retrying in %.1fs", backoff, exc_info=True
                )
                await self._reset_connection()
                delay = backoff
            await asyncio.sleep(delay)

    async def step(self) -> tuple[bool, bool]:
        """One read of the outbox (and the sampling started, if due and not running); returns
        (pushed anything, more waiting). The deltas go out in the background: the next read
        does not wait for this step's sockets, only for its own deltas' turn."""
        self._drop_idle()
        pushed = more = False
        if self.lives:
            # The read and every view's update in one trip to the database thread: on a busy
            # machine each hop between the loop and that thread waits for a core.
            more, updates = await self._db(self._read_updates, list(self.lives.values()))
            await self._delivered()  # a socket's deltas go out in order, one step's at a time
            outgoing: list[_Delivery] = []
            for live, events, outcome in updates:
                if outcome is _Redo.REBUILD:
                    await self._rebuild(live)
                    pushed = True
                elif outcome is _Redo.BROKEN:
                    live.broken = True
                else:
                    delivery = self._advance(live, events, outcome)
                    if delivery is not None:
                        outgoing.append(delivery)
            if outgoing:
                self._delivering = asyncio.get_running_loop().create_task(
                    self._deliver(outgoing), name="dashboard deltas"
                )
                self._delivering.add_done_callback(_log_failure)
                pushed = True
            self._start_sampling()
        self.steps += 1
        return pushed, more

    def _read_updates(self, lives: list[Live]) -> tuple[bool, list[_Update]]:
        """On the database thread: the outbox after the lowest cursor, and for each view that
        has events after its own cursor, its changes (or what to do instead). Reads the views'
        states only; the loop, which awaits this, applies the changes afterwards."""
        events = read_after(min(live.cursor for live in lives), self.batch)
        more = len(events) == self.batch
        updates: list[_Update] = []
        for live in lives:
            mine = [event for event in events if event[0] > live.cursor]
            if not mine and not live.broken:
                continue
            if live.broken or (more and len(mine) == len(events)):
                updates.append((live, mine, _Redo.REBUILD))  # far behind (or broken): start afresh
                continue
            try:
                updates.append((live, mine, live.view.changes(live.state, mine)))
            except Exception as exc:
                if _is_database_error(exc):
                    raise
                logger.exception("dashboard view %s: update failed; rebuilding", live.view.key)
                updates.append((live, mine, _Redo.BROKEN))
        return more, updates

    def _advance(
        self, live: Live, events: list[EventRow], changes: Changes | None
    ) -> _Delivery | None:
        """Move the view past `events`. Events that concern it become a delta, even with no
        visible change, so a client's last id says "everything up to here is shown": returned
        with the sockets watching now (one that joins later gets it in its catch-up)."""
        first = live.entries[-1].last if live.entries else live.base
        live.cursor = events[-1][0]
        if changes is None:
            return None
        apply(live.state, changes)
        delta = {
            "type": "delta",
            "view": live.view.key,
            "epoch": live.epoch,
            "from": first,
            "id": live.cursor,
            "events": dict(Counter(event_type(event) for _, event in events)),
            "changes": changes,
        }
        texts = frames(delta, "changes")
        live.entries.append(Entry(first, live.cursor, texts))
        while len(live.entries) > self.buffered:
            live.base = live.entries.popleft().last
        message = {
            "type": "live.delta",
            "epoch": live.epoch,
            "from": first,
            "to": live.cursor,
            "frames": texts,
        }
        return list(live.subscribers), message

    async def _deliver(self, outgoing: list[_Delivery]) -> None:
        for subscribers, message in outgoing:
            await self._send_to(subscribers, message)

    async def _delivered(self) -> None:
        """Wait for the deltas of the step before, so a socket gets every view's deltas in order."""
        if self._delivering is not None:
            await asyncio.wait([self._delivering])  # its sockets' failures are logged there

    async def _rebuild(self, live: Live) -> None:
        await self._delivered()  # the reset comes after the old epoch's last deltas
        fresh = await self._build(live.view, live.sampled)
        fresh.subscribers, fresh.idle_since = live.subscribers, live.idle_since
        self.lives[live.view.key] = fresh
        await self._send(fresh, {"type": "live.reset", "epoch": fresh.epoch})

    def _start_sampling(self) -> None:
        if self._sampling is None or self._sampling.done():
            self._sampling = asyncio.get_running_loop().create_task(
                self._sample_due(), name="dashboard sampling"
            )
            self._sampling.add_done_callback(_log_failure)

    async def _sample_due(self) -> None:
        """Read the sampled slices that are due, each on the sampler thread, and push what
        changed. The views' states are only ever changed here, on the loop, between reads."""
        now = time.monotonic()
        for key, due in list(self.lives.items()):
            every = due.view.sample_every
            if not every or now < due.next_sample_at:
                continue
            due.next_sample_at = now + every
            try:
                fresh = await self._on(self._sampler, due.view.sample)
            except Exception as exc:
                if _is_database_error(exc):  # tried again when next due, on a fresh connection
                    logger.warning("dashboard view %s: sampling failed", key, exc_info=True)
                    await self._reset_connection(self._sampler)
                else:
                    logger.exception("dashboard view %s: sampling failed", key)
                continue
            live = self.lives.get(key)  # rebuilt meanwhile: its successor keeps the samples
            if live is None:
                continue
            changes: Changes = {}
            for name, docs in fresh.items():
                change = diff(live.sampled.get(name, {}), docs)
                if change:
                    changes[name] = change
            if changes:
                apply(live.sampled, changes)
                live._sample_version += 1
                await self._send(
                    live, {"type": "live.sample", "frames": live.sample_frames(changes)}
                )

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for key, live in list(self.lives.items()):
            if not live.subscribers and live.idle_since and now - live.idle_since > self.linger_s:
                del self.lives[key]

    # --- plumbing -------------------------------------------------------------------------

    async def _send(self, live: Live, message: dict[str, Any]) -> None:
        await self._send_to(list(live.subscribers), message)

    async def _send_to(self, subscribers: list[Subscriber], message: dict[str, Any]) -> None:
        """To each socket in turn: one message at a time, in the tailer's order. A socket's
        failure is its own (it is closing, or its handler has a bug)."""
        for subscriber in subscribers:
            try:
                await subscriber.deliver(message)
            except Exception:
                logger.warning("dashboard: delivering %s failed", message["type"], exc_info=True)

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._on(self._executor, fn, *args)

    async def _on(self, executor: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, partial(fn, *args))

    async def _reset_connection(self, executor: ThreadPoolExecutor | None = None) -> None:
        try:
            await self._on(executor or self._executor, connections.close_all)
        except Exception:
            logger.debug("closing the tailer's connection failed", exc_info=True)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("dashboard: %s failed", task.get_name(), exc_info=task.exception())


def _is_database_error(exc: BaseException) -> bool:
    return isinstance(exc, DatabaseError | InterfaceError)
