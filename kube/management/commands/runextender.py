"""`manage.py runextender`: serve the kube-scheduler extender endpoints on their own port
(kube/server.py), with the profile in GPUSCHED_PROFILE and, with GPUSCHED_EXTENDER_BIND=1,
binding through the Kubernetes API. SIGTERM/SIGINT stop it."""

from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import CommandParser

from gpusched.loop import LoopCommand
from kube import extender
from kube.server import make_server


class Command(LoopCommand):
    help = "Serve POST /extender/{filter,prioritize,bind} for kube-scheduler."
    default_interval = 1.0

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="0.0.0.0")
        parser.add_argument("--port", type=int, default=8001)

    def handle(self, *args: Any, **options: Any) -> None:
        extender.get()  # fail now on a bad profile, not at kube-scheduler's first call
        server = make_server(options["host"], options["port"])
        thread = threading.Thread(target=server.serve_forever, name="extender", daemon=True)
        thread.start()
        port = server.server_address[1]
        self.stderr.write(f"runextender: serving on {options['host']}:{port}")
        try:
            self.run_loop(lambda: None, loop=True)
        finally:
            server.shutdown()
            server.server_close()
            self.stderr.write("runextender: stopped")
