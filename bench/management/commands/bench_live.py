"""`manage.py bench_live`: how long a committed change takes to reach connected dashboards.

Builds a throwaway database (Django's test-database machinery, on whatever DATABASE_URL points at),
registers a synthetic cluster, starts a real web process (`runweb`) per channel layer,
opens `--clients` Cluster-page websockets to it on loopback, then commits `--changes` changes (a
node cordoned or uncordoned, each its own transaction) one every `--interval` seconds. For each
change and client: the time from the commit returning to the client receiving the first delta
whose event id covers it. Prints one JSON object (latency percentiles per layer).

The cluster is `--nodes` servers of the mixed fleet with about half their GPUs held (pods placed
by the scheduler, so every card has holders to draw). `--page` also times the Cluster page in
headless Chromium (Debian's chromium, driven by Playwright): navigation start to every node card
drawn, cold (the web process builds the view first) and warm. `--waiting N` then submits N more
pods and leaves them waiting (what the stranded-GPU count is judged against); `--views` times the
Cluster page's live view in this process: its build (what the first visitor's snapshot waits for)
and the delta of one cordon (what every watching dashboard waits for).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.test import Client

from bench import live_clients
from bench.web_process import signing_key, web_server
from dashboard.live import ClusterView, apply
from dashboard.selectors import head_event_id
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.events import NodeChanged, read_after
from scheduling.models import Event, Node, Pod, Tenant
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from sim.workload import synthetic_pods

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Dashboard client processes (bench/live_clients.py): each reads its share of the sockets.
CLIENT_PROCESSES = 4


class Command(BaseCommand):
    help = "Measure commit -> dashboard websocket latency with many connected clients."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--clients", type=int, default=200)
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--changes", type=int, default=100)
        parser.add_argument("--interval", type=float, default=0.2, help="seconds between commits")
        parser.add_argument(
            "--client-processes",
            type=int,
            default=CLIENT_PROCESSES,
            help="processes the dashboard clients are spread over",
        )
        parser.add_argument(
            "--layer",
            choices=["memory", "redis", "both", "none"],
            default="both",
            help="channel layer ('none': only the page, with --page)",
        )
        parser.add_argument(
            "--redis-url",
            default=os.environ.get("REDIS_URL")
            or os.environ.get("GPUSCHED_TEST_REDIS_URL")
            or "redis://127.0.0.1:6379/0",
        )
        parser.add_argument("--page", action="store_true", help="also time the Cluster page")
        parser.add_argument("--waiting", type=int, default=0, help="pods left waiting")
        parser.add_argument(
            "--views", action="store_true", help="time the Cluster view's build and deltas"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        signing_key()  # before the admin's session cookie is signed
        logging.getLogger("scheduling").setLevel(logging.WARNING)  # stdout is for the JSON
        creation = connection.creation
        original = connection.settings_dict["NAME"]
        creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            result = self._run(options)
        finally:
            connection.close()
            creation.destroy_test_db(original, verbosity=0)
        self.stdout.write(json.dumps(result, indent=2))

    def _run(self, options: dict[str, Any]) -> dict[str, Any]:
        for spec in build_nodes(synthetic_pools(options["nodes"], "mixed")):
            services.node_register(spec=spec, source=Node.Source.SIMULATOR)
        _fill(options["nodes"])
        _leave_waiting(options["waiting"])
        cookie = _admin_cookie()
        layers = {"both": ["memory", "redis"], "none": []}.get(options["layer"], [options["layer"]])
        result: dict[str, Any] = {
            "command": " ".join(["manage.py bench_live", *sys.argv[2:]]),
            "machine": _machine(),
            "database": connection.vendor,
            "clients": options["clients"],
            "nodes": options["nodes"],
            "changes": options["changes"],
            "interval_s": options["interval"],
            "waiting_pods": Pod.objects.filter(phase=Pod.Phase.PENDING).count(),
            "latency_ms": {},
        }
        if options["views"]:
            result["cluster_view_ms"] = _time_cluster_view()
        for layer in layers:
            redis_url = options["redis_url"] if layer == "redis" else None
            with _web_process(redis_url) as base:
                samples, missing, dropped = _measure(
                    base,
                    cookie,
                    options["clients"],
                    options["changes"],
                    options["interval"],
                    processes=options["client_processes"],
                )
            result["latency_ms"][layer] = {**_summary(samples, missing), "dropped": dropped}
        if options["page"]:
            result["cluster_page"] = self._page(Node.objects.count())
        return result

    def _page(self, nodes: int) -> dict[str, Any]:
        password = "bench-page-password"
        admin = get_user_model().objects.get(username="bench-admin")
        admin.set_password(password)
        admin.save()
        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        if not os.path.exists(chromium):
            return {"skipped": "Debian's chromium is not installed"}
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            return {"skipped": "playwright is not installed"}
        with _web_process(None) as base, tempfile.TemporaryDirectory() as profile:
            return _in_thread(_time_page, sync_playwright, chromium, profile, base, password, nodes)


# --- the measurement ------------------------------------------------------------------------


def _measure(
    base: str | Sequence[str],
    cookie: str,
    clients: int,
    changes: int,
    interval: float,
    commit: Callable[[int, float], list[tuple[int, float]]] | None = None,
    processes: int = CLIENT_PROCESSES,
) -> tuple[list[float], int, int]:
    """Connect the clients (in `processes` processes of their own, bench/live_clients.py), then
    `commit(changes, interval)` (default: cordon / uncordon every node in turn) and time each
    change to each client: (samples ms, missing, dropped sockets). With several base URLs (web
    replicas) the clients connect to each in turn."""
    bases = [base] if isinstance(base, str) else list(base)
    context = multiprocessing.get_context("spawn")
    children = []
    for share in range(max(1, min(processes, clients))):
        ours, theirs = context.Pipe()
        sockets = list(range(share, clients, max(1, min(processes, clients))))
        child = context.Process(
            target=live_clients.run, args=(bases, cookie, sockets, theirs), daemon=True
        )
        child.start()
        children.append((child, ours))
    try:
        for _, conn in children:
            _expect(conn, "ready")
        commits = (commit or _commit_changes)(changes, interval)
        time.sleep(2.0)  # the last deltas arrive
        received: live_clients.Received = {}
        dropped = 0
        for _, conn in children:
            conn.send("stop")
            got, closed = _expect(conn, "done")
            received.update(got)
            dropped += len(closed)
    finally:
        for child, _ in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()

    samples: list[float] = []
    missing = 0
    for event_id, committed in commits:
        for client in received.values():
            covering = [at for delta_id, at in client.items() if delta_id >= event_id]
            if covering:
                samples.append((min(covering) - committed) * 1000)
            else:
                missing += 1
    return samples, missing, dropped


def _expect(conn: Connection, kind: str) -> Any:
    """The next report of a client process, which must be `kind`."""
    if not conn.poll(300):
        raise CommandError(f"a dashboard client process did not report {kind!r} in 300 s")
    got, value = conn.recv()
    if got != kind:
        raise CommandError(f"a dashboard client process failed: {value}")
    return value


def _commit_changes(
    changes: int, interval: float, nodes: Sequence[Node] | None = None
) -> list[tuple[int, float]]:
    """Cordon / uncordon `nodes` (default: every node) in turn, one transaction each: (event id,
    commit time)."""
    nodes = list(nodes) if nodes is not None else list(Node.objects.order_by("name"))
    commits = []
    try:
        for k in range(changes):
            node = nodes[k % len(nodes)]
            started = time.monotonic()
            before = head_event_id()
            with transaction.atomic():
                services.node_set_cordoned(node=node, cordoned=not node.cordoned)
            committed = time.monotonic()
            commits.append((_change_id(before, node.name), committed))
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        connection.close()
    return commits


def _change_id(before: int, node: str) -> int:
    """The outbox id of the cordon change just committed: the first `node.changed` event of the
    node after `before` (not the head now, which may be another writer's later commit)."""
    rows = Event.objects.filter(id__gt=before, type=NodeChanged.TYPE).order_by("id")
    for event_id, payload in rows.values_list("id", "payload"):
        if payload.get("node") == node:
            return int(event_id)
    raise CommandError(f"no node.changed event of {node} after event {before}")


def _summary(samples: list[float], missing: int) -> dict[str, Any]:
    if not samples:
        return {"samples": 0, "missing": missing}
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 1)

    return {
        "samples": len(samples),
        "missing": missing,
        "p50": pct(50),
        "p95": pct(95),
        "p99": pct(99),
        "max": round(ordered[-1], 1),
        "mean": round(statistics.fmean(ordered), 1),
    }


def _fill(nodes: int) -> None:
    """Submit and place pods until about half the GPUs are held (a realistic page to draw)."""
    tenants = [services.tenant_create(name=f"team-{k}") for k in range(6)]
    worker = database_cycle(Framework(load_profile("topology")), identity="bench-live")
    pods = list(synthetic_pods(nodes * 3, seed=3))
    for start in range(0, len(pods), 100):
        chunk = pods[start : start + 100]
        services.workload_submit(
            tenant=tenants[(start // 100) % len(tenants)],
            name=f"fill-{start // 100:05d}",
            pod_sets=[
                services.PodSetSpec(
                    name=f"p{k}",
                    count=1,
                    template=PodTemplate(resources=pod.resources),
                )
                for k, pod in enumerate(chunk)
            ],
        )
    for _ in range(50):
        report = worker.run_once()
        if not report.more and not report.admitted:
            break


def _leave_waiting(count: int) -> None:
    """Submit `count` more pods (other shapes' mix than the fill's) without scheduling them."""
    tenants = list(Tenant.objects.order_by("name"))
    pods = list(synthetic_pods(count, seed=11))
    for start in range(0, len(pods), 100):
        services.workload_submit(
            tenant=tenants[(start // 100) % len(tenants)],
            name=f"waiting-{start // 100:05d}",
            pod_sets=[
                services.PodSetSpec(
                    name=f"p{k}", count=1, template=PodTemplate(resources=pod.resources)
                )
                for k, pod in enumerate(pods[start : start + 100])
            ],
        )


def _time_cluster_view(builds: int = 3, cordons: int = 10) -> dict[str, Any]:
    """The Cluster view built `builds` times afresh, then the delta of each of `cordons`
    cordons set or lifted (each committed, then read from the outbox as the tailer reads it)."""
    built = []
    for _ in range(builds):
        started = time.perf_counter()
        view = ClusterView()
        state = view.build()
        built.append((time.perf_counter() - started) * 1000)
    cursor = head_event_id()
    node = Node.objects.order_by("name").first()
    assert node is not None
    deltas = []
    for _ in range(cordons):
        node = services.node_set_cordoned(node=node, cordoned=not node.cordoned)
        new = read_after(cursor)
        cursor = new[-1][0]
        started = time.perf_counter()
        apply(state, view.changes(state, new) or {})
        deltas.append((time.perf_counter() - started) * 1000)
    return {
        "build": [round(ms, 1) for ms in built],
        "cordon_delta_p50": round(statistics.median(deltas), 1),
        "cordon_delta_max": round(max(deltas), 1),
        "summary": state["summary"]["all"],
    }


def _time_page(
    sync_playwright: Any, chromium: str, profile: str, base: str, password: str, nodes: int
) -> dict[str, Any]:
    timings: dict[str, Any] = {"nodes": nodes}
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": 1440, "height": 1000},
        )
        page = context.new_page()
        page.goto(f"{base}/login/")
        page.fill("#id_username", "bench-admin")
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_selector("article.node-card", timeout=60_000)
        for attempt in ("cold", "warm", "warm_2"):
            if attempt != "cold":
                page.goto(f"{base}/")
            page.wait_for_function(
                f"document.querySelectorAll('article.node-card').length >= {nodes}",
                timeout=60_000,
            )
            marks = page.evaluate(
                "Object.fromEntries(['live-message', 'live-snapshot', 'live-render'].map("
                "(n) => [n, (performance.getEntriesByName(n)[0] || {}).startTime]))"
            )
            timings[f"{attempt}_ms"] = round(page.evaluate("performance.now()"), 1)
            timings[f"{attempt}_marks_ms"] = {
                name.removeprefix("live-"): round(at, 1) for name, at in marks.items() if at
            }
        context.close()
    return timings


# --- plumbing -------------------------------------------------------------------------------


def _admin_cookie() -> str:
    users = get_user_model()
    admin = users.objects.create_user("bench-admin", password=None)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client = Client()
    client.force_login(admin)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


@contextmanager
def _web_process(redis_url: str | None) -> Iterator[str]:
    """bench/web_process.py's web process, with its failure to start said as the command's error."""
    try:
        with web_server(redis_url=redis_url) as base:
            yield base
    except RuntimeError as exc:
        raise CommandError(str(exc)) from exc


def _in_thread(fn: Any, *args: Any) -> Any:
    """Playwright's sync API wants a thread without a running event loop of Django's own."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # re-raised below
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
