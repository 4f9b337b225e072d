"""`manage.py runextender`: serve the kube-scheduler extender endpoints on their own port
(kube/server.py) over TLS, admitting only callers with a client certificate of the client CA or a
bearer token (kube/extender_auth.py), with the profile in GPUSCHED_PROFILE and, with
GPUSCHED_EXTENDER_BIND=1, binding through the Kubernetes API. It refuses to start without TLS or
without any way to admit a caller, and on a bad profile (the error names the key). SIGTERM/SIGINT
stop it.

With --metrics-port, its Prometheus metrics (kube/metrics.py) are served on that port with
/healthz (the loop turns) and /readyz (the extender's server thread is serving; without it the
command exits, to be restarted)."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from common.loop import LoopCommand
from common.process_metrics import add_metrics_arguments, serve_metrics, stop_serving
from kube import extender
from kube import metrics as extender_metrics
from kube.extender_auth import ExtenderAuth, ExtenderAuthError, server_context
from kube.server import make_server


class Command(LoopCommand):
    help = "Serve POST /extender/{filter,prioritize,bind} for kube-scheduler, over TLS."
    default_interval = 1.0
    default_stuck_intervals = 30

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="0.0.0.0")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--tls-cert", default=settings.EXTENDER_TLS_CERT, help="PEM file")
        parser.add_argument("--tls-key", default=settings.EXTENDER_TLS_KEY, help="PEM file")
        parser.add_argument(
            "--client-ca",
            default=settings.EXTENDER_CLIENT_CA,
            help="admit client certificates signed by this CA (PEM file)",
        )
        parser.add_argument(
            "--client-name",
            action="append",
            default=list(settings.EXTENDER_CLIENT_NAMES),
            help="only with this certificate common name or DNS SAN (repeatable)",
        )
        parser.add_argument(
            "--token-file",
            default=settings.EXTENDER_TOKEN_FILE,
            help="admit `Authorization: Bearer` with a token of this file (one per line)",
        )
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if not (options["tls_cert"] and options["tls_key"]):
            raise CommandError(
                "runextender serves TLS only: give --tls-cert and --tls-key "
                "(GPUSCHED_EXTENDER_TLS_CERT / _KEY); see docs/security.md"
            )
        try:
            auth = ExtenderAuth.build(
                token_file=options["token_file"],
                client_ca=options["client_ca"],
                client_names=options["client_name"],
            )
            tls = server_context(
                cert=options["tls_cert"], key=options["tls_key"], client_ca=options["client_ca"]
            )
        except ExtenderAuthError as exc:
            raise CommandError(str(exc)) from exc
        if not auth.configured:
            raise CommandError(
                "runextender admits no caller: give --client-ca (kube-scheduler's client "
                "certificates) and/or --token-file; see docs/security.md"
            )
        failure = extender.load()  # fail now on a bad profile, not at kube-scheduler's first call
        if failure:
            raise CommandError(failure)
        server = make_server(options["host"], options["port"], auth=auth, tls=tls)
        thread = threading.Thread(target=server.serve_forever, name="extender", daemon=True)
        thread.start()
        port = server.server_address[1]
        self.stderr.write(f"runextender: serving TLS on {options['host']}:{port}")
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
