"""`manage.py demo`: the whole system on one machine — web (HTTP + websockets), the scheduler, the
simulated cluster and, when available, the telemetry ingester — as child processes sharing one
database. Prints the URL and the admin login; Ctrl-C (or SIGTERM) stops them all.

`--kubernetes` runs the same demo through the Kubernetes side: the simulated Kubernetes
(`fakekube`: API server, kubelets, dcgm-exporter) instead of the embedded simulator, `runkube` as
the scheduler, and the spec's workloads submitted as they arrive (`simulate --arrivals-only`),
made into pods by the scheduler's Kubernetes side."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from subprocess import Popen
from types import FrameType
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.management.commands.applyqueues import queue_file

ROOT = Path(__file__).resolve().parents[3]
ADMIN_USER = "admin"


class Command(BaseCommand):
    help = "Run web, scheduler, simulator and telemetry together (the demo)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--port", type=int, default=int(os.environ.get("GPUSCHED_PORT", "8000"))
        )
        parser.add_argument("--cluster", default="demo", help="simulated cluster spec")
        parser.add_argument(
            "--speed", type=float, default=60.0, help="simulated seconds per second"
        )
        parser.add_argument(
            "--metrics-port", type=int, default=9400, help="simulated DCGM exporter"
        )
        parser.add_argument("--profile", default="gpusched", help="scheduler profile")
        parser.add_argument(
            "--kubernetes",
            action="store_true",
            help="through the simulated Kubernetes API and runkube instead of the database side",
        )
        parser.add_argument(
            "--kube-port", type=int, default=6443, help="the simulated Kubernetes API's port"
        )
        parser.add_argument(
            "--queues",
            default="",
            help="queue YAML applied first (default: the cluster's shipped one, e.g. "
            "scheduling/queues/demo.yaml; 'none' for no queues)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        queues = options["queues"] or options["cluster"]
        if queues != "none" and queue_file(queues).is_file():
            call_command("applyqueues", str(queue_file(queues)), stdout=self.stdout)
        # The dashboard tells admins the simulated cluster runs faster than the clock.
        os.environ["GPUSCHED_SIM_SPEED"] = str(options["speed"])
        # The processes started below have the harness too (the simulator is one of them).
        os.environ["GPUSCHED_HARNESS"] = "1"
        password = self._ensure_admin()
        manage = [sys.executable, str(ROOT / "manage.py")]
        metrics_url = f"http://127.0.0.1:{options['metrics_port']}/metrics"
        web = [*manage, "runweb", "--host", options["host"], "--port", str(options["port"])]
        cluster = self._kubernetes if options["kubernetes"] else self._database
        children = {"web": subprocess.Popen(web, cwd=ROOT)}
        children.update(cluster(manage, options))
        if "ingesttelemetry" in get_commands():
            telemetry = [*manage, "ingesttelemetry", "--loop", "--source", "scrape"]
            children["telemetry"] = subprocess.Popen(
                [*telemetry, "--targets", metrics_url], cwd=ROOT
            )

        self.stdout.write(
            f"\ngpusched demo: http://{options['host']}:{options['port']}/  "
            f"(login {ADMIN_USER} / {password})\n"
            f"roles: {', '.join(children)}; simulated DCGM metrics: {metrics_url}\n"
            "Ctrl-C stops everything.\n"
        )
        self._stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        try:
            while not self._stopping:
                dead = [name for name, child in children.items() if child.poll() is not None]
                if dead:
                    self.stderr.write(f"demo: {', '.join(dead)} exited; stopping the rest")
                    break
                time.sleep(0.5)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for child in children.values():
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
            self.stdout.write("gpusched demo stopped")

    def _database(self, manage: list[str], options: dict[str, Any]) -> dict[str, Popen]:
        """The database side: the embedded simulator and `runscheduler`."""
        simulate = [*manage, "simulate", "--loop", "--cluster", options["cluster"]]
        simulate += [
            "--speed",
            str(options["speed"]),
            "--metrics-port",
            str(options["metrics_port"]),
        ]
        return {
            "scheduler": subprocess.Popen(
                [*manage, "runscheduler", "--loop", "--profile", options["profile"]], cwd=ROOT
            ),
            "simulator": subprocess.Popen(simulate, cwd=ROOT),
        }

    def _kubernetes(self, manage: list[str], options: dict[str, Any]) -> dict[str, Popen]:
        """The Kubernetes side: the simulated Kubernetes first (the others need its
        kubeconfig), then the arrivals and `runkube`."""
        kubeconfig = ROOT / "var" / "demo-kubeconfig.yaml"
        kubeconfig.unlink(missing_ok=True)
        fakekube = [*manage, "fakekube", "--cluster", options["cluster"]]
        fakekube += ["--port", str(options["kube_port"]), "--speed", str(options["speed"])]
        fakekube += [
            "--metrics-port",
            str(options["metrics_port"]),
            "--kubeconfig",
            str(kubeconfig),
        ]
        children = {"kubernetes": subprocess.Popen(fakekube, cwd=ROOT)}
        deadline = time.monotonic() + 60
        while not kubeconfig.is_file():
            if children["kubernetes"].poll() is not None or time.monotonic() > deadline:
                raise CommandError("the simulated Kubernetes did not start (fakekube)")
            time.sleep(0.2)
        arrivals = [*manage, "simulate", "--loop", "--arrivals-only"]
        arrivals += ["--cluster", options["cluster"], "--speed", str(options["speed"])]
        runkube = [*manage, "runkube", "--loop", "--no-leader-elect"]
        runkube += ["--kubeconfig", str(kubeconfig), "--profile", options["profile"]]
        children["arrivals"] = subprocess.Popen(arrivals, cwd=ROOT)
        children["scheduler"] = subprocess.Popen(runkube, cwd=ROOT)
        return children

    def _ensure_admin(self) -> str:
        """The admin account: password from GPUSCHED_ADMIN_PASSWORD, else a new one per start."""
        password = os.environ.get("GPUSCHED_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        users = get_user_model()
        user = users.objects.filter(username=ADMIN_USER).first() or users(username=ADMIN_USER)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        return password

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
