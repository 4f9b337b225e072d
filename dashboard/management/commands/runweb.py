"""runweb: the web process (pages, REST API, websockets, /metrics) served by uvicorn.

Every place that starts a web process (the image, compose, deploy/web.yaml, `demo`, the
benchmarks and the tests) starts it through this command, so the server's settings live here:

- uvicorn, not daphne: a dashboard delta goes to each of a process's sockets in turn, and through
  Twisted every write cost three system calls (register the socket for writing, send, unregister),
  each a release of the GIL that the loop then waited to get back from the API's threads; uvicorn
  sends at once. bench_stack's commit -> dashboard p95 went from 491-536 ms to 375 ms
  (docs/benchmarks.md).
- X-Forwarded-* headers are Django's to judge (GPUSCHED_SECURE_PROXY_SSL_HEADER): uvicorn would
  otherwise take them from any client on loopback.
- Idle keep-alive connections stay open 75 s: at uvicorn's 5 s, a tenant's pooled connection was
  closed under a request it had just sent (transport errors in bench_stack).
- No per-message compression of websockets (browsers ask for it, daphne never agreed to it): a
  delta is serialized once for all of a process's sockets, but would be compressed once per socket.
- No lifespan protocol (Django's ASGI handler has none) and no Server header.
- Logging is Django's (settings.LOGGING): the access log too, as one line per request in
  GPUSCHED_LOG_FORMAT.
- `--tls-cert` / `--tls-key`: served over TLS (PEM files), for callers that speak nothing else:
  kube-apiserver calling the admission webhook for Jobs (deploy/web.yaml's container `webhook`).
- A stop (SIGTERM, or Ctrl-C) waits at most 10 s for open connections (websockets are told to
  reconnect), then exits 0 as the other roles do: uvicorn re-raises the signal it handled once it
  has stopped, and the handler it then finds here ends the process cleanly.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

KEEP_ALIVE_S = 75
STOP_GRACE_S = 10


class Command(BaseCommand):
    help = "Serve the web process (pages, REST API, websockets) with uvicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-access-log", action="store_true", help="no log line per request")
        parser.add_argument("--tls-cert", default="", help="serve TLS: the certificate (PEM)")
        parser.add_argument("--tls-key", default="", help="serve TLS: its private key (PEM)")

    def handle(self, *args: Any, **options: Any) -> None:
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _stopped)
        # The project's ASGI application ("module.attribute" in settings, as uvicorn's
        # "module:attribute").
        module, attribute = settings.ASGI_APPLICATION.rsplit(".", 1)
        if bool(options["tls_cert"]) != bool(options["tls_key"]):
            raise CommandError("--tls-cert and --tls-key go together")
        uvicorn.run(
            f"{module}:{attribute}",
            host=options["host"],
            port=options["port"],
            lifespan="off",
            proxy_headers=False,
            server_header=False,
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=STOP_GRACE_S,
            ws_per_message_deflate=False,
            access_log=not options["no_access_log"],
            log_config=None,
            ssl_certfile=options["tls_cert"] or None,
            ssl_keyfile=options["tls_key"] or None,
        )


def _stopped(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)
