"""`manage.py topologyagent [--once | --loop]`: keep this node's `gpu-topology.nvidia.com/info`
annotation equal to what nvidia-smi says (kube.agent). Run by the DaemonSet in
deploy/topology-agent.yaml on every GPU node; the node is NODE_NAME (downward API) or --node.

With --loop it re-checks every --interval seconds and, with --metrics-port, serves /metrics,
/healthz (the loop turns) and /readyz (the last probe and write succeeded; else the error). A
failing nvidia-smi never stops it: the step is reported, and retried after a backoff of at most
one interval. With --once a failed step is a command error.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandError, CommandParser

from common.loop import LoopCommand
from common.process_metrics import add_metrics_arguments, serve_metrics, stop_serving
from kube.agent import agent as topology_agent
from kube.agent.agent import StepReport, TopologyAgent
from kube.api import KubeApi, connect
from scheduling.core.plugins.gpu_topology import DEFAULT_ANNOTATION


class StepFailed(RuntimeError):
    """The probe or the write failed: the loop logs it, backs off, and /readyz says why."""


class Command(LoopCommand):
    help = "Write this node's GPU topology annotation from nvidia-smi (one step, or --loop)."
    default_interval = 60.0
    # A healthy step takes at most two nvidia-smi timeouts (2 x 30 s): three intervals is plenty.
    default_stuck_intervals = 3

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)
        parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="$NODE_NAME")
        parser.add_argument("--annotation", default=DEFAULT_ANNOTATION)
        parser.add_argument("--nvidia-smi", default="nvidia-smi", help="executable (PATH)")
        parser.add_argument("--timeout", type=float, default=30.0, help="per nvidia-smi call")
        parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
        parser.add_argument("--context", default=None, help="kubeconfig context")
        parser.add_argument("--json", action="store_true", help="one JSON line per step")
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        node = options["node"]
        if not node:
            raise CommandError("no node: set NODE_NAME (downward API spec.nodeName) or --node")
        self.configure_loop(options)
        self.max_backoff = self.interval  # a broken driver is not retried more often than that
        api = KubeApi(
            connect(kubeconfig=options["kubeconfig"], context=options["context"]),
            reporting_instance=f"{socket.gethostname()}-{node}",
            reporting_controller=topology_agent.REPORTING_CONTROLLER,
        )
        agent = TopologyAgent(
            api,
            node,
            annotation=options["annotation"],
            nvidia_smi=options["nvidia_smi"],
            timeout_s=options["timeout"],
        )
        if not options["loop"]:
            report = self.step(agent, as_json=options["json"])
            if report.error:
                raise CommandError(report.error)
            return
        server = serve_metrics(
            topology_agent.registry, self.health, options["metrics_host"], options["metrics_port"]
        )
        self.stderr.write(f"topologyagent: node {node}, every {self.interval:g} s")

        def loop_step() -> float | None:
            report = self.step(agent, as_json=options["json"])
            if report.error:
                raise StepFailed(report.error)
            return None

        try:
            self.run_loop(loop_step, loop=True)
        finally:
            stop_serving(server)

    def step(self, agent: TopologyAgent, *, as_json: bool) -> StepReport:
        report = agent.run_once()
        if as_json:
            self.stdout.write(json.dumps(asdict(report)))
        return report
