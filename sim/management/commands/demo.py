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
import tempfile
import time
from pathlib import Path
from subprocess import Popen
from types import FrameType
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.management.commands.applyqueues import queue_file
from sim.processes import (
    KUBE_PORT_VARIABLE,
    METRICS_PORT_VARIABLE,
    WEB_PORT_VARIABLE,
    claim_database,
    port_default,
    require_free,
    spawn,
    wait_for_port,
)

ROOT = Path(__file__).resolve().parents[3]
ADMIN_USER = "admin"
TRUE = {"1", "true", "yes", "on"}


class Command(BaseCommand):
    help = "Run web, scheduler, simulator and telemetry together (the demo)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--port", type=int, default=None, help=f"web port (default ${WEB_PORT_VARIABLE}, 8000)"
        )
        parser.add_argument("--cluster", default="demo", help="simulated cluster spec")
        parser.add_argument(
            "--speed", type=float, default=60.0, help="simulated seconds per second"
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help=f"simulated DCGM exporter (default ${METRICS_PORT_VARIABLE}, 9400)",
        )
        parser.add_argument("--profile", default="gpusched", help="scheduler profile")
        parser.add_argument(
            "--kubernetes",
            action="store_true",
            help="through the simulated Kubernetes API and runkube instead of the database side",
        )
        parser.add_argument(
            "--kube-port",
            type=int,
            default=None,
            help=f"the simulated Kubernetes API's port (default ${KUBE_PORT_VARIABLE}, 6443)",
        )
        parser.add_argument(
            "--queues",
            default="",
            help="queue YAML applied first (default: the cluster's shipped one, e.g. "
            "scheduling/queues/demo.yaml; 'none' for no queues)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host = options["host"]
        ports = {
            WEB_PORT_VARIABLE: options["port"] or port_default(WEB_PORT_VARIABLE),
            METRICS_PORT_VARIABLE: options["metrics_port"] or port_default(METRICS_PORT_VARIABLE),
        }
        if options["kubernetes"]:
            ports[KUBE_PORT_VARIABLE] = options["kube_port"] or port_default(KUBE_PORT_VARIABLE)
        env = self._children_environment(options)
        # Before anything is written: this demo's database is its own, its ports are free.
        self._database_claim = claim_database(settings.VAR_DIR, settings.DATABASES["default"])
        for variable, port in ports.items():
            require_free("127.0.0.1" if variable != WEB_PORT_VARIABLE else host, port, variable)
        call_command("migrate", interactive=False, verbosity=0)
        queues = options["queues"] or options["cluster"]
        self.queue_file = None
        if queues != "none" and queue_file(queues).is_file():
            self.queue_file = queue_file(queues)
        if self.queue_file and not options["kubernetes"]:
            call_command("applyqueues", str(self.queue_file), stdout=self.stdout)
        password = self._ensure_admin()
        self.children: dict[str, Popen[bytes]] = {}
        self._stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        failed = ""
        try:
            self._start(options, ports, env)
            self.stdout.write(
                f"\ngpusched demo: http://{host}:{ports[WEB_PORT_VARIABLE]}/  "
                f"(login {ADMIN_USER} / {password})\n"
                f"roles: {', '.join(self.children)}; simulated DCGM metrics: "
                f"http://127.0.0.1:{ports[METRICS_PORT_VARIABLE]}/metrics; "
                f"database: {settings.DATABASES['default']['NAME']}\n"
                "Ctrl-C stops everything.\n"
            )
            self.stdout.flush()
            while not self._stopping:
                dead = {n: c.returncode for n, c in self.children.items() if c.poll() is not None}
                if dead:
                    failed = ", ".join(f"{n} (status {code})" for n, code in dead.items())
                    break
                time.sleep(0.5)
        except CommandError as error:
            failed = str(error)
        finally:
            self._stop_children()
        if failed:
            raise CommandError(f"demo: {failed}; stopped the rest")
        self.stdout.write("gpusched demo stopped")

    def _children_environment(self, options: dict[str, Any]) -> dict[str, str]:
        """The roles' environment: the demo is a development command, so debug mode unless
        GPUSCHED_DEBUG says otherwise, and plain HTTP (it serves no TLS)."""
        env = {**os.environ, "GPUSCHED_HARNESS": "1"}
        # One value for every role would be one port for all their /metrics: the demo's roles
        # serve none of their own (GPUSCHED_DCGM_PORT moves the simulated exporter).
        env.pop("GPUSCHED_METRICS_PORT", None)
        # The dashboard tells admins the simulated cluster runs faster than the clock.
        env["GPUSCHED_SIM_SPEED"] = str(options["speed"])
        env["GPUSCHED_DEBUG"] = env.get("GPUSCHED_DEBUG", "").strip() or "1"
        if env["GPUSCHED_DEBUG"].lower() not in TRUE:
            if not env.get("GPUSCHED_SECRET_KEY"):
                raise CommandError(
                    "with GPUSCHED_DEBUG off the demo needs GPUSCHED_SECRET_KEY (or leave "
                    "GPUSCHED_DEBUG unset for debug mode)"
                )
            env["GPUSCHED_SECURE_SSL_REDIRECT"] = env.get("GPUSCHED_SECURE_SSL_REDIRECT") or "0"
        return env

    def _start(self, options: dict[str, Any], ports: dict[str, int], env: dict[str, str]) -> None:
        """Each role after what it depends on listens: the simulated cluster's exporter before
        the ingester that scrapes it."""
        manage = [sys.executable, str(ROOT / "manage.py")]
        metrics_port = ports[METRICS_PORT_VARIABLE]
        web = [*manage, "runweb", "--host", options["host"]]
        self._spawn("web", [*web, "--port", str(ports[WEB_PORT_VARIABLE])], env)
        if options["kubernetes"]:
            self._kubernetes(manage, options, ports, env)
            exporter = "kubernetes"
        else:
            self._database(manage, options, metrics_port, env)
            exporter = "simulator"
        if "ingesttelemetry" in get_commands():
            wait_for_port("127.0.0.1", metrics_port, self.children[exporter], exporter)
            telemetry = [*manage, "ingesttelemetry", "--loop", "--source", "scrape"]
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            self._spawn("telemetry", [*telemetry, "--targets", metrics_url], env)
        # The address is printed once it answers: a user who opens it at once must not be refused.
        web_host = "127.0.0.1" if options["host"] in ("", "0.0.0.0") else options["host"]
        # A loaded machine may take minutes to start Django; a web that exits still fails at once.
        wait_for_port(web_host, ports[WEB_PORT_VARIABLE], self.children["web"], "web", timeout=300)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Popen[bytes]:
        if self._stopping:
            raise CommandError("stopped while starting")
        self.children[name] = spawn(argv, cwd=ROOT, env=env)
        return self.children[name]

    def _database(
        self, manage: list[str], options: dict[str, Any], metrics_port: int, env: dict[str, str]
    ) -> None:
        """The database side: the embedded simulator and `runscheduler`."""
        simulate = [*manage, "simulate", "--loop", "--cluster", options["cluster"]]
        simulate += ["--speed", str(options["speed"]), "--metrics-port", str(metrics_port)]
        scheduler = [*manage, "runscheduler", "--loop", "--profile", options["profile"]]
        self._spawn("scheduler", scheduler, env)
        self._spawn("simulator", simulate, env)

    def _kubernetes(
        self, manage: list[str], options: dict[str, Any], ports: dict[str, int], env: dict[str, str]
    ) -> None:
        """The Kubernetes side: the simulated Kubernetes first (the others need its
        kubeconfig), then the arrivals and `runkube`."""
        kubeconfig = Path(tempfile.mkdtemp(prefix="gpusched-demo-")) / "kubeconfig.yaml"
        fakekube = [*manage, "fakekube", "--cluster", options["cluster"]]
        fakekube += ["--port", str(ports[KUBE_PORT_VARIABLE]), "--speed", str(options["speed"])]
        fakekube += ["--metrics-port", str(ports[METRICS_PORT_VARIABLE])]
        fakekube += ["--kubeconfig", str(kubeconfig)]
        if self.queue_file:  # Kueue's objects in the cluster: runkube mirrors what it finds there
            fakekube += ["--queues", str(self.queue_file)]
        kubernetes = self._spawn("kubernetes", fakekube, env)
        wait_for_port("127.0.0.1", ports[KUBE_PORT_VARIABLE], kubernetes, "kubernetes")
        deadline = time.monotonic() + 60
        while not kubeconfig.is_file():
            if kubernetes.poll() is not None or time.monotonic() > deadline:
                raise CommandError("the simulated Kubernetes did not start (fakekube)")
            time.sleep(0.1)
        arrivals = [*manage, "simulate", "--loop", "--arrivals-only"]
        arrivals += ["--cluster", options["cluster"], "--speed", str(options["speed"])]
        runkube = [*manage, "runkube", "--loop", "--no-leader-elect"]
        runkube += ["--kubeconfig", str(kubeconfig), "--profile", options["profile"]]
        self._spawn("arrivals", arrivals, env)
        self._spawn("scheduler", runkube, env)

    def _stop_children(self) -> None:
        """Last started, first stopped: the scheduler and the arrivals before the cluster they
        talk to, so none of them fails its last step on a server already gone."""
        deadline = time.monotonic() + 15
        for child in reversed(self.children.values()):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

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
