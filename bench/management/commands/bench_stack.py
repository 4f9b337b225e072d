"""`manage.py bench_stack`: the whole production-shaped stack under tenant and dashboard load.

Starts docker-compose.yml's process set natively (bench/stack.py): migrate, then web (`runweb`),
scheduler, simulator and, when the `prometheus` binary is installed, Prometheus and the ingester,
with the compose commands and environments (debug off), on a fresh PostgreSQL database created on
the server DATABASE_URL points at (dropped afterwards) and the Redis at --redis-url. Two things
differ from `docker compose up`: the simulator runs `--nodes` servers of the mixed fleet (plus one
2-GPU "probe" node) with no arrivals of its own, and the API's rate limits are raised so the
benchmark measures the stack rather than the throttle (as bench_api does).

With `--web-replicas N`, web runs as N processes (compose's `deploy.replicas`) on the same
database and Redis, and the tenants and dashboards below are spread over them in turn, as a load
balancer in front would spread them (bench/tenant_load.py drives the tenants).

Then `--tenants` tenants (each with its queue, a token and an equal share of the GPUs as quota)
drive the REST API, two keep-alive HTTP clients each:
- a submitter posts workloads (a fixed cycle of shapes: 1x1, 2x1, 1x2, 1x4 GPUs) back to back,
  keeping what it has outstanding within its quota;
- a reaper lists its admitted and running workloads (every 0.25 s), reads the pods of each one
  fully placed (submit -> Bound per pod: the pod's createdAt to its boundAt, both set by the
  server), and cancels it `--hold` seconds later (the job is done; its GPUs free up).
Meanwhile `--dashboards` staff users watch the Cluster page over websockets (bench_live's client)
while the probe node is cordoned and uncordoned every `--interval` seconds, `--duration /
--interval` times: commit -> delta latency. That is the load window (a little over `--duration`:
each change takes time to commit); rates are per second of it.

Prints one JSON object: submit throughput, API latency per endpoint, submit -> Bound latency,
commit -> dashboard latency, the scheduler's binds per second, errors (HTTP non-2xx, transport
errors, timeouts, dropped websockets, deltas never received, roles that died and were restarted
as compose's restart policy would) and the CPU each process used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.utils import timezone

from api import services as api_services
from bench.compose import StackError
from bench.loopback import process_cpu_seconds, process_rss_mib, scratch_postgres_database
from bench.management.commands.bench_live import (
    CLIENT_PROCESSES,
    _admin_cookie,
    _commit_changes,
    _machine,
    _measure,
    _summary,
)
from bench.stack import NativeStack
from bench.tenant_load import SHAPES, Recorder, TenantLoad, reaper, submitter
from bench.web_process import database_url as connected_database_url
from scheduling.models import Node, Pod, Workload
from scheduling.worker.cycle_report import PHASES
from sim.cluster import synthetic_pools
from telemetry.models import GpuLatest

PROBE_NODE = "probe-0000"
UNBOUND_LISTED = 10  # the report lists at most this many unbound workloads' states
RAISED_RATE = "1000000/second"


def _cluster_spec(path: Path, nodes: int) -> int:
    """The simulator's spec: `nodes` servers of the mixed fleet and the probe node; GPUs."""
    pools = [
        {"name": pool.name, "count": pool.count, "topology": pool.topology}
        for pool in synthetic_pools(nodes, "mixed")
        if pool.count
    ]
    pools.append({"name": "probe", "count": 1, "topology": "t4-2gpu"})
    path.write_text(yaml.safe_dump({"nodePools": pools}, sort_keys=False))
    return 8 * nodes  # every server of the mixed fleet has 8 GPUs


def _unbound_states(unbound: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """What the database says of workloads the tenants never saw placed: a stuck one's state,
    its reason and each pod's phase, nominated node and last reason (why the run has a tail)."""
    states: list[dict[str, Any]] = []
    for tenant, name in unbound:
        workload = Workload.objects.filter(tenant__name=tenant, name=name).first()
        if workload is None:
            states.append({"tenant": tenant, "name": name, "state": "missing"})
            continue
        pods = workload.pods.order_by("name").values(
            "name", "phase", "nominated_node", "last_reason", "attempts", "next_attempt_at"
        )
        states.append(
            {
                "tenant": tenant,
                "name": name,
                "state": workload.state,
                "reason": workload.reason,
                "pods": [
                    {**pod, "next_attempt_at": str(pod["next_attempt_at"] or "")} for pod in pods
                ],
            }
        )
    return states


def _cpu_sample(stack: NativeStack) -> dict[str, tuple[int, float]]:
    """Each running role's (pid, CPU seconds so far), and this process's ("bench_clients": the
    tenants and the dashboards)."""
    pids = {name: pid for name in stack.order if (pid := stack.pid(name)) is not None}
    pids["bench_clients"] = os.getpid()
    sample = {}
    for name, pid in pids.items():
        seconds = process_cpu_seconds(pid)
        if seconds is not None:
            sample[name] = (pid, seconds)
    return sample


def _scheduler_cycles(log: Path) -> dict[str, Any]:
    """The scheduler's busy cycles over the whole run, from its --json lines."""
    reports = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                reports.append(json.loads(line))
    if not reports:
        return {"busy": 0}
    phases = [f"{phase}_s" for phase in PHASES]
    seconds = [sum(float(r.get(p, 0.0)) for p in phases) for r in reports]
    return {
        "busy": len(reports),
        "pods_attempted": sum(int(r.get("attempted", 0)) for r in reports),
        "pods_bound": sum(int(r.get("bound", 0)) for r in reports),
        "workloads_admitted": sum(int(r.get("admitted", 0)) for r in reports),
        "mean_pods_per_cycle": round(
            sum(int(r.get("attempted", 0)) for r in reports) / len(reports), 1
        ),
        "mean_cycle_ms": round(1000 * sum(seconds) / len(seconds), 1),
        "phase_s": {p: round(sum(float(r.get(p, 0.0)) for r in reports), 2) for p in phases},
    }


def _machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _redis_default() -> str:
    return (
        os.environ.get("REDIS_URL")
        or os.environ.get("GPUSCHED_TEST_REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )


def _reachable(url: str, port: int) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or port), 2):
            return True
    except OSError:
        return False


class Command(BaseCommand):
    help = "Load-test the whole native stack: tenants through the REST API, live dashboards."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenants", type=int, default=8)
        parser.add_argument("--dashboards", type=int, default=200, help="websocket clients")
        parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
        parser.add_argument("--nodes", type=int, default=100, help="simulated 8-GPU servers")
        parser.add_argument(
            "--hold", type=float, default=5.0, help="seconds a placed workload runs before cancel"
        )
        parser.add_argument(
            "--interval", type=float, default=0.2, help="seconds between dashboard changes"
        )
        parser.add_argument(
            "--web-replicas",
            type=int,
            default=1,
            help="web processes on the same PostgreSQL and Redis; tenants and dashboards are "
            "spread over them in turn (as a load balancer would)",
        )
        parser.add_argument(
            "--client-processes",
            type=int,
            default=CLIENT_PROCESSES,
            help="processes the dashboard clients are spread over (browsers are processes)",
        )
        parser.add_argument("--redis-url", default=_redis_default())
        parser.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="also set this in every role's environment (to try a setting), repeatable",
        )
        parser.add_argument("--workdir", help="keep configs and process logs here")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                "bench_stack runs the production stack: point DATABASE_URL at a PostgreSQL "
                "server, e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres"
            )
        if not _reachable(options["redis_url"], 6379):
            raise CommandError(f"no Redis at {options['redis_url']} (--redis-url)")
        extra_env = dict(item.partition("=")[::2] for item in options["env"])
        if any(not name for name in extra_env):
            raise CommandError("--env: expected NAME=VALUE")
        options["extra_env"] = extra_env
        if (
            min(options["tenants"], options["nodes"], options["web_replicas"]) < 1
            or options["duration"] <= 0
        ):
            raise CommandError("--tenants, --nodes, --web-replicas and --duration must be positive")
        logging.getLogger().setLevel(logging.WARNING)  # stdout is for the results
        try:
            settings.SECRET_KEY  # noqa: B018
        except ImproperlyConfigured:
            settings.SECRET_KEY = secrets.token_urlsafe(32)
        server_url = connected_database_url()
        with ExitStack() as stack:
            workdir = (
                Path(options["workdir"])
                if options["workdir"]
                else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-stack-")))
            )
            workdir.mkdir(parents=True, exist_ok=True)
            database_url = stack.enter_context(
                scratch_postgres_database(server_url, prefix="gpusched_bench")
            )
            connection.close()
            original = connection.settings_dict["NAME"]
            connection.settings_dict["NAME"] = urllib.parse.urlsplit(database_url).path[1:]
            try:
                result = self._run(options, workdir, database_url)
            finally:
                connection.close()
                connection.settings_dict["NAME"] = original
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
        else:
            self._print(result)

    def _run(self, options: dict[str, Any], workdir: Path, database_url: str) -> dict[str, Any]:
        notes: list[str] = []
        gpus = _cluster_spec(workdir / "cluster.yaml", options["nodes"])
        roles = ["migrate", "web", "scheduler", "simulator"]
        if shutil.which("prometheus"):
            roles += ["prometheus", "ingester"]
        else:
            notes.append("prometheus is not installed: Prometheus and the ingester did not run")
        stack = NativeStack(
            workdir,
            # Compose's required variables; the database password is unused natively.
            env={
                "GPUSCHED_DB_PASSWORD": "unused",
                "GPUSCHED_METRICS_TOKEN": secrets.token_urlsafe(16),
                **os.environ,
                "GPUSCHED_SECRET_KEY": str(settings.SECRET_KEY),
            },
            external={"postgres": database_url, "redis": options["redis_url"]},
            services=roles,
            replicas={"web": options["web_replicas"]},
            extra_args={
                "simulator": ["--cluster", str(workdir / "cluster.yaml")],
                "scheduler": ["--json"],  # one line per busy cycle, read back below
            },
            extra_env={
                "GPUSCHED_API_RATE": RAISED_RATE,
                "GPUSCHED_API_SUBMIT_RATE": RAISED_RATE,
                **options["extra_env"],
            },
        )
        try:
            stack.start(timeout=180)
        except StackError as exc:
            raise CommandError(f"the stack did not start: {exc}") from exc
        stack.supervise()  # a role that dies is restarted, as compose would, and counted
        try:
            result = self._load(options, stack, gpus, notes)
        finally:
            stack.stop()
        # Each role on SIGTERM: its exit code; "killed" lists those still up after the grace.
        result["shutdown"] = {"exit_codes": stack.exit_codes, "killed": stack.killed}
        result["scheduler"]["cycles"] = _scheduler_cycles(stack.log_dir / "scheduler.log")
        return result

    def _load(
        self, options: dict[str, Any], stack: NativeStack, gpus: int, notes: list[str]
    ) -> dict[str, Any]:
        expected_nodes = options["nodes"] + 1
        deadline = time.monotonic() + 60
        while Node.objects.count() < expected_nodes:  # the simulator registers its nodes
            if time.monotonic() > deadline:
                raise CommandError("the simulator did not register its nodes within 60 s")
            time.sleep(0.2)
        probe = Node.objects.get(name=PROBE_NODE)
        quota = max(8, gpus // options["tenants"])
        tenants = []
        for k in range(options["tenants"]):
            tenant, policy, token = api_services.tenant_onboard(
                name=f"bench-{k}", quota={"nvidia.com/gpu": str(quota)}
            )
            tenants.append(TenantLoad(tenant.name, token, policy.queue_name, quota))
        cookie = _admin_cookie()
        ports = [stack.port(web, 8000) for web in stack.order if stack.instances[web] == "web"]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        recorder = Recorder()
        start = threading.Event()
        deadline_box = [float("inf")]
        window: dict[str, Any] = {}
        threads = [
            threading.Thread(
                target=submitter,
                args=(t, ports[k % len(ports)], recorder, start, deadline_box),
            )
            for k, t in enumerate(tenants)
        ] + [
            threading.Thread(
                target=reaper,
                args=(t, ports[k % len(ports)], recorder, start, deadline_box, options["hold"]),
            )
            for k, t in enumerate(tenants)
        ]
        for thread in threads:
            thread.start()
        changes = max(1, int(options["duration"] / options["interval"]))

        def commit(count: int, interval: float) -> list[tuple[int, float]]:
            """Once every dashboard is connected, the load window: the tenants run while the
            probe node is cordoned and uncordoned `count` times (about --duration seconds)."""
            window["cpu"] = _cpu_sample(stack)
            window["machine_cpu"] = _machine_cpu()
            window["loadavg_start"] = os.getloadavg()
            window["at"] = timezone.now()
            window["began"] = time.monotonic()
            start.set()
            try:
                return _commit_changes(count, interval, nodes=[probe])
            finally:
                deadline_box[0] = window["ended"] = time.monotonic()  # the submitters stop
                window["ended_at"] = timezone.now()
                window["cpu_end"] = _cpu_sample(stack)
                window["machine_cpu_end"] = _machine_cpu()
                window["loadavg_end"] = os.getloadavg()

        dashboard: dict[str, Any]
        connect_began = time.monotonic()
        try:
            if options["dashboards"] > 0:
                samples, missing, dropped = _measure(
                    bases,
                    cookie,
                    options["dashboards"],
                    changes,
                    options["interval"],
                    commit,
                    processes=options["client_processes"],
                )
                dashboard = {
                    "clients": options["dashboards"],
                    "changes": changes,
                    "connect_s": round(window["began"] - connect_began, 1),
                    "commit_to_delta_ms": _summary(samples, missing),
                    "dropped": dropped,
                    "missing": missing,
                }
            else:
                commit(changes, options["interval"])
                dashboard = {"clients": 0, "dropped": 0, "missing": 0}
        finally:
            start.set()
            deadline_box[0] = min(deadline_box[0], time.monotonic())
            for thread in threads:
                thread.join()
        seconds = window["ended"] - window["began"]
        machine_end, loadavg_end = window["machine_cpu_end"], window["loadavg_end"]
        cpu: dict[str, dict[str, Any]] = {}
        for name, (pid, after) in window["cpu_end"].items():
            before_pid, before = window["cpu"].get(name, (None, 0.0))
            used = after - (before if before_pid == pid else 0.0)  # restarted: the new one's
            rss = process_rss_mib(pid)
            cpu[name] = {
                "cpu_s": round(used, 1),
                "cpu_pct_of_one_core": round(100 * used / seconds, 1),
                "rss_mib": round(rss, 1) if rss is not None else None,
            }
            if before_pid != pid:
                cpu[name]["note"] = "restarted during the run: CPU of the new process"
        busy = machine_end[0] - window["machine_cpu"][0]
        total = machine_end[1] - window["machine_cpu"][1]
        bound_in_window = Pod.objects.filter(
            bound_at__gte=window["at"], bound_at__lt=window["ended_at"]
        ).count()
        unbound = [
            (t.name, name)
            for t in tenants
            for name, o in t.outstanding.items()
            if o.bound_seen is None
        ]
        api_latency = {
            endpoint: _summary(values, 0) for endpoint, values in recorder.latency_ms.items()
        }
        non_2xx = {s: n for s, n in recorder.statuses.items() if not s.startswith("2")}
        errors = {
            "http_non_2xx": sum(non_2xx.values()),
            "http_non_2xx_by_status": non_2xx,
            "transport": recorder.transport_errors,
            "timeouts": recorder.timeouts,
            "websocket_dropped": dashboard["dropped"],
            "deltas_missing": dashboard["missing"],
            "roles_restarted": dict(stack.restarts),
        }
        errors["total"] = (
            errors["http_non_2xx"]
            + recorder.transport_errors
            + recorder.timeouts
            + dashboard["dropped"]
            + dashboard["missing"]
            + sum(stack.restarts.values())
        )
        telemetry = None
        if "ingester" in stack.order:
            recent = window["ended_at"] - timedelta(seconds=60)
            telemetry = {
                "gpus_with_fresh_samples": GpuLatest.objects.filter(
                    source="prometheus", sampled_at__gte=recent
                ).count()
            }
        return {
            "command": " ".join(["manage.py bench_stack", *sys.argv[2:]]),
            "machine": {
                **_machine(),
                "memory_gib": _memory_gib(),
                "loadavg_start": [round(v, 2) for v in window["loadavg_start"]],
                "loadavg_end": [round(v, 2) for v in loadavg_end],
                "machine_cpu_busy_pct": round(100 * busy / total, 1) if total else None,
            },
            "config": {
                "tenants": options["tenants"],
                "dashboards": options["dashboards"],
                "web_replicas": options["web_replicas"],
                "duration_s": options["duration"],
                "load_window_s": round(seconds, 1),
                "nodes": options["nodes"],
                "gpus": gpus,
                "quota_gpus_per_tenant": quota,
                "hold_s": options["hold"],
                "shapes": [{"pods": p, "gpus_per_pod": g} for p, g in SHAPES],
                "roles": list(stack.order),
                "api_rate_limits": f"raised to {RAISED_RATE}",
                "extra_env": options["extra_env"],
                "database": "PostgreSQL (fresh database, dropped after)",
                "redis": options["redis_url"],
                "stack_up_s": stack.timings.get("up_s"),
                "notes": notes,
            },
            "submit": {
                "workloads": recorder.submitted_workloads,
                "pods": recorder.submitted_pods,
                "gpus": recorder.submitted_gpus,
                "workloads_per_s": round(recorder.submitted_workloads / seconds, 1),
                "pods_per_s": round(recorder.submitted_pods / seconds, 1),
                "cancelled": recorder.cancelled,
            },
            "api_latency_ms": api_latency,
            "submit_to_bound_ms": {
                **_summary(recorder.bound_ms, 0),
                "workloads_unbound_at_end": len(unbound),
                "unbound": _unbound_states(unbound[:UNBOUND_LISTED]),
            },
            "dashboard": dashboard,
            "scheduler": {
                "pods_bound": bound_in_window,
                "pods_bound_per_s": round(bound_in_window / seconds, 1),
            },
            "telemetry": telemetry,
            "cpu": cpu,
            "errors": errors,
        }

    def _print(self, result: dict[str, Any]) -> None:
        submit = result["submit"]
        self.stdout.write(
            f"submitted {submit['workloads']} workloads ({submit['workloads_per_s']}/s), "
            f"{submit['pods']} pods ({submit['pods_per_s']}/s)"
        )
        for endpoint, stats in result["api_latency_ms"].items():
            if stats.get("samples"):
                self.stdout.write(
                    f"{endpoint:40} n={stats['samples']:6} p50 {stats['p50']:7.1f} ms  "
                    f"p95 {stats['p95']:7.1f} ms  p99 {stats['p99']:7.1f} ms"
                )
        bound = result["submit_to_bound_ms"]
        if bound.get("samples"):
            self.stdout.write(
                f"submit -> Bound: p50 {bound['p50']} ms  p95 {bound['p95']} ms  "
                f"p99 {bound['p99']} ms"
            )
        delta = result["dashboard"].get("commit_to_delta_ms") or {}
        if delta.get("samples"):
            self.stdout.write(f"commit -> dashboard: p95 {delta['p95']} ms")
        self.stdout.write(f"errors: {result['errors']['total']}")


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        return None
    return None
