"""`manage.py fakekube --cluster demo --port N`: a simulated Kubernetes for a simulator spec.

Serves the Kubernetes API on http://127.0.0.1:N (loopback only) with the spec's nodes, runs
their kubelets on the wall clock x --speed (bound pods start, run for their
`sim.gpusched.io/duration-seconds`, finish; deleted and evicted pods stop after their grace
period), serves dcgm-exporter's /metrics for their GPUs on --metrics-port, and writes a
kubeconfig for the official client and kubectl. Runs until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import CommandError, CommandParser
from kubernetes import client

from common.loop import LoopCommand
from sim.kubernetes.launch import SimulatedCluster, SpeedClock
from sim.kubernetes.resources import TABLE
from sim.kubernetes.simulated import SimulatedKubernetes
from sim.metrics_server import serve_exposition
from sim.processes import (
    KUBE_PORT_VARIABLE,
    METRICS_PORT_VARIABLE,
    bind_or_fail,
    port_default,
    port_in_use,
)
from sim.spec import SpecError, load_spec

DEFAULT_KUBECONFIG = Path(tempfile.gettempdir()) / "gpusched-fakekube.kubeconfig"


class Command(LoopCommand):
    help = "Run a simulated Kubernetes (API server, kubelets, dcgm-exporter) for a cluster spec."
    default_interval = 0.2

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", default="demo", help="spec name or YAML path")
        parser.add_argument(
            "--port",
            type=int,
            default=port_default(KUBE_PORT_VARIABLE),
            help=f"API port (0: any free one; default ${KUBE_PORT_VARIABLE}, 6443)",
        )
        parser.add_argument(
            "--speed", type=float, default=60.0, help="simulated seconds per second"
        )
        parser.add_argument("--kubeconfig", type=Path, default=DEFAULT_KUBECONFIG)
        parser.add_argument("--dra", action="store_true", help="GPUs through DRA ResourceSlices")
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=port_default(METRICS_PORT_VARIABLE),
            help=f"dcgm-exporter /metrics (0: none; default ${METRICS_PORT_VARIABLE}, 9400)",
        )
        parser.add_argument(
            "--honour-gpu-ids",
            action="store_true",
            help="kubelets give pods the GPUs of gpusched.io/gpu-ids, as a device plugin that "
            "reads the scheduler's annotation would (the NVIDIA device plugin does not)",
        )
        parser.add_argument(
            "--interval", type=float, default=self.default_interval, help="kubelet step (s)"
        )
        parser.add_argument(
            "--queues",
            type=Path,
            default=None,
            help="Kueue objects (YAML, e.g. scheduling/queues/demo.yaml) created in the cluster "
            "at start, as `kubectl apply` would",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            spec = load_spec(options["cluster"])
        except SpecError as exc:
            raise CommandError(str(exc)) from exc
        if options["speed"] <= 0:
            raise CommandError("--speed must be positive")
        self.interval = options["interval"]
        try:
            simulated = SimulatedCluster.from_spec(
                spec,
                clock=SpeedClock(options["speed"]),
                dra=options["dra"],
                honour_gpu_ids=options["honour_gpu_ids"],
                port=options["port"],
            ).start()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise port_in_use("127.0.0.1", options["port"], KUBE_PORT_VARIABLE) from None
            raise CommandError(f"cannot listen on 127.0.0.1:{options['port']}: {exc}") from exc
        metrics = None
        try:
            if options["queues"]:
                create_objects(simulated.kube, options["queues"])
            kubeconfig = simulated.kube.write_kubeconfig(options["kubeconfig"])
            lines = [
                f"fakekube: {len(simulated.objects.nodes)} nodes of {options['cluster']!r} at "
                f"speed {options['speed']:g}",
                f"fakekube: Kubernetes API on {simulated.kube.url} (kubeconfig {kubeconfig})",
            ]
            if options["metrics_port"]:
                metrics = bind_or_fail(
                    "127.0.0.1",
                    options["metrics_port"],
                    METRICS_PORT_VARIABLE,
                    lambda: serve_exposition(
                        simulated.exporter.render, "127.0.0.1", options["metrics_port"]
                    ),
                )
                lines.append(
                    f"fakekube: DCGM metrics on http://127.0.0.1:{metrics.server_port}/metrics"
                )
            for line in lines:
                self.stdout.write(line)
            self.stdout.flush()

            def step() -> float | None:
                simulated.run_once()
                return None

            self.run_loop(step, loop=True)
        finally:
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
            simulated.close()


def create_objects(kube: SimulatedKubernetes, path: Path) -> None:
    """The file's objects created through the API with the official client (their namespaces
    first); a kind the simulated API does not serve is an error naming it."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except (OSError, yaml.YAMLError) as exc:
        raise CommandError(f"--queues {path}: {exc}") from exc
    custom = client.CustomObjectsApi(kube.api_client())
    for doc in documents:
        group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
        served = [r for r in TABLE if r.group == group and r.kind == doc.get("kind")]
        if not served:
            raise CommandError(
                f"--queues {path}: {doc.get('apiVersion')} {doc.get('kind')} is not served"
            )
        namespace = doc.get("metadata", {}).get("namespace")
        if namespace:
            kube.add_namespace(namespace)
            custom.create_namespaced_custom_object(group, version, namespace, served[0].plural, doc)
        else:
            custom.create_cluster_custom_object(group, version, served[0].plural, doc)
