"""`manage.py topologyagent [--once | --loop]`: keep this node's `gpu-topology.nvidia.com/info`
annotation equal to what nvidia-smi says (kube.agent). Run by the DaemonSet in
deploy/topology-agent.yaml on every GPU node; the node is NODE_NAME (downward API) or --node.

With --loop it re-checks every --interval seconds and serves /healthz, /readyz and /metrics on
--port (0: not served). A failing nvidia-smi never stops it: the step is reported and retried.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandError, CommandParser

from gpusched.loop import LoopCommand
from gpusched.process_metrics import stop_serving
from kube.agent import agent as topology_agent
from kube.agent.agent import Health, TopologyAgent
from kube.agent.server import serve
from kube.api import KubeApi, connect
from scheduling.core.plugins.gpu_topology import DEFAULT_ANNOTATION


class Command(LoopCommand):
    help = "Write this node's GPU topology annotation from nvidia-smi (one step, or --loop)."
    default_interval = 60.0

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)
        parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="$NODE_NAME")
        parser.add_argument("--annotation", default=DEFAULT_ANNOTATION)
        parser.add_argument("--nvidia-smi", default="nvidia-smi", help="executable (PATH)")
        parser.add_argument("--timeout", type=float, default=30.0, help="per nvidia-smi call")
        parser.add_argument("--host", default="0.0.0.0", help="address of the health endpoint")
        parser.add_argument("--port", type=int, default=9402, help="health and metrics; 0: off")
        parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
        parser.add_argument("--context", default=None, help="kubeconfig context")
        parser.add_argument("--json", action="store_true", help="one JSON line per step")

    def handle(self, *args: Any, **options: Any) -> None:
        node = options["node"]
        if not node:
            raise CommandError("no node: set NODE_NAME (downward API spec.nodeName) or --node")
        self.interval = options["interval"]
        api = KubeApi(
            connect(kubeconfig=options["kubeconfig"], context=options["context"]),
            reporting_instance=f"{socket.gethostname()}-{node}",
            reporting_controller=topology_agent.REPORTING_CONTROLLER,
        )
        # Alive while steps keep coming: a step may take two nvidia-smi timeouts.
        health = Health(
            stale_after_s=3 * self.interval + 2 * options["timeout"], monotonic=time.monotonic
        )
        agent = TopologyAgent(
            api,
            node,
            annotation=options["annotation"],
            nvidia_smi=options["nvidia_smi"],
            timeout_s=options["timeout"],
            health=health,
        )
        server = None
        if options["loop"] and options["port"]:
            server = serve(health, topology_agent.registry, options["host"], options["port"])

        def step() -> float | None:
            report = agent.run_once()
            if options["json"]:
                self.stdout.write(json.dumps(asdict(report)))
            return None

        self.stderr.write(f"topologyagent: node {node}, every {self.interval:g} s")
        try:
            self.run_loop(step, loop=options["loop"])
        finally:
            stop_serving(server)
