"""`manage.py runextender`: serve the kube-scheduler extender endpoints on their own port
(kube/server.py), with the profile in GPUSCHED_PROFILE and, with GPUSCHED_EXTENDER_BIND=1,
binding through the Kubernetes API. SIGTERM/SIGINT stop it.

With --metrics-port, its Prometheus metrics (kube/metrics.py) are served on that port with
/healthz (the loop turns) and /readyz (the extender's server thread is serving; without it the
command exits, to be restarted)."""

from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import CommandError, CommandParser

from gpusched.loop import LoopCommand
from gpusched.process_metrics import add_metrics_arguments, serve_metrics, stop_serving
from kube import extender
from kube import metrics as extender_metrics
from kube.server import make_server


class Command(LoopCommand):
    help = "Serve POST /extender/{filter,prioritize,bind} for kube-scheduler."
    default_interval = 1.0
    default_stuck_intervals = 30

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="0.0.0.0")
        parser.add_argument("--port", type=int, default=8001)
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        extender.get()  # fail now on a bad profile, not at kube-scheduler's first call
        server = make_server(options["host"], options["port"])
        thread = threading.Thread(target=server.serve_forever, name="extender", daemon=True)
        thread.start()
        port = server.server_address[1]
        self.stderr.write(f"runextender: serving on {options['host']}:{port}")
        metrics_server = serve_metrics(
            extender_metrics.registry,
            self.health,
            options["metrics_host"],
            options["metrics_port"],
        )

        def step() -> None:
            if not thread.is_alive():  # useless without it: exit, to be restarted
                raise CommandError("the extender's server thread has stopped")
            self.health.state = f"serving on port {port}"

        try:
            self.run_loop(step, loop=True)
        finally:
            server.shutdown()
            server.server_close()
            stop_serving(metrics_server)
            self.stderr.write("runextender: stopped")
