"""`manage.py simulate --cluster SPEC`: the embedded simulated cluster.

Registers the spec's nodes, then submits, starts and finishes workloads on a simulated clock, and
serves what dcgm-exporter would report for its GPUs on http://HOST:PORT/metrics. With
--arrivals-only it only submits the workloads (the simulated Kubernetes runs them).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from http.server import ThreadingHTTPServer
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import close_old_connections
from django.utils import timezone

from common.loop import LoopCommand
from sim.metrics_server import serve_exposition
from sim.processes import METRICS_PORT_VARIABLE, bind_or_fail, port_default
from sim.simulator import Arrivals, Simulator
from sim.spec import ClusterSpec, SpecError, load_spec
from telemetry.exposition import render_exposition


class Command(LoopCommand):
    help = "Run the simulated cluster (nodes, workloads, a DCGM-format /metrics endpoint)."

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)
        parser.add_argument("--cluster", default="demo", help="spec name or YAML path")
        parser.add_argument(
            "--speed", type=float, default=60.0, help="simulated seconds per second"
        )
        parser.add_argument("--metrics-host", default="127.0.0.1")
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=port_default(METRICS_PORT_VARIABLE),
            help=f"0: no /metrics (default ${METRICS_PORT_VARIABLE}, 9400)",
        )
        parser.add_argument("--json", action="store_true", help="one JSON line per busy step")
        parser.add_argument(
            "--arrivals-only",
            action="store_true",
            help="only submit the spec's workloads as they arrive (another cluster runs them: "
            "the simulated Kubernetes of `fakekube`, with `runkube`)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.interval = options["interval"]
        try:
            spec = load_spec(options["cluster"])
        except SpecError as exc:
            raise CommandError(str(exc)) from exc
        if options["arrivals_only"]:
            self._arrivals(spec, options)
            return
        simulator = Simulator(spec, speed=options["speed"])
        nodes = simulator.setup()
        server = None
        if not options["metrics_port"]:
            self.stderr.write(f"simulate: {nodes} nodes; no DCGM metrics endpoint")
        else:
            host, port = options["metrics_host"], options["metrics_port"]
            server = bind_or_fail(
                host, port, METRICS_PORT_VARIABLE, lambda: serve_simulator(simulator, host, port)
            )
            url = f"http://{options['metrics_host']}:{server.server_port}/metrics"
            self.stderr.write(f"simulate: {nodes} nodes; DCGM metrics on {url}")

        def step() -> float | None:
            report = simulator.run_once()
            if options["json"] and (report.submitted or report.started or report.finished):
                self.stdout.write(json.dumps(asdict(report)))
            return None

        try:
            self.run_loop(step, loop=options["loop"])
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()

    def _arrivals(self, spec: ClusterSpec, options: dict[str, Any]) -> None:
        arrivals = Arrivals(spec, started_at=timezone.now(), speed=options["speed"])

        def step() -> float | None:
            submitted = arrivals.submit_due(timezone.now())
            if options["json"] and submitted:
                self.stdout.write(json.dumps({"submitted": submitted}))
            return None

        self.run_loop(step, loop=options["loop"])


def serve_simulator(simulator: Simulator, host: str, port: int) -> ThreadingHTTPServer:
    """dcgm-exporter's /metrics for the simulated GPUs; each scrape reads the database."""

    def render() -> str:
        close_old_connections()
        try:
            return render_exposition(simulator.dcgm_states())
        finally:
            close_old_connections()

    return serve_exposition(render, host, port)
