"""`manage.py runkube [--once | --loop]`: gpusched as a secondary scheduler of a Kubernetes cluster.

Pods with `spec.schedulerName` equal to the profile's schedulerName are placed by gpusched; every
node and running pod is mirrored into the database (which the dashboard, the API and the extender
read). Replicas elect one leader with a coordination.k8s.io Lease; a replica that loses it exits
with status 1 (like kube-scheduler), so its Deployment restarts it as a standby. SIGTERM/SIGINT
finish the current cycle and give the lease up, so a standby takes over at once.

Admission (`--admission`): `gpusched` (the default) admits with gpusched's queues, which are
Kueue's objects in the cluster when its CRDs are installed (`--kueue-config NAMESPACE/NAME` also
reads admissionFairSharing from Kueue's manager ConfigMap), else those of `applyqueues`; `kueue`
runs beside Kueue: Kueue admits, gpusched places the pods Kueue has ungated (kube/kueue.py).

Connection: the pod's service account in a cluster, else `--kubeconfig` / KUBECONFIG /
~/.kube/config (`--context` to pick one). With --metrics-port, the scheduler's Prometheus metrics
(scheduling/worker/metrics.py) are served on that port with /healthz (the loop turns) and /readyz
(the last cycle finished: leading, or standing by with the API server answering).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import urllib3
from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from kubernetes.client.exceptions import ApiException

from common.loop import LoopCommand
from common.process_metrics import add_metrics_arguments, serve_metrics, stop_serving
from common.schema import require_migrated
from kube.api import EventBudget, KubeApi, own_namespace
from kube.binding_process import Connection
from kube.kueue import ADMISSION_MODES, GPUSCHED, MANAGER_CONFIG, kueue_served
from kube.leader import LeaseElector, LeaseLost
from kube.side import KubernetesSide, kubernetes_cycle
from scheduling import profile_files
from scheduling.core.scheduler import Framework
from scheduling.selectors.nodes import node_count_by_source
from scheduling.selectors.queue_sources import cluster_queues_of_another_source
from scheduling.worker import metrics
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cycle import CycleReport, SchedulingCycle

KUBERNETES_SOURCE = "kubernetes"  # scheduling.models.Node.Source.KUBERNETES
MOUNTED_PROFILE = Path("/etc/gpusched/profile.yaml")
LEASE_NAME = "gpusched-scheduler"


def default_profile() -> str:
    """GPUSCHED_PROFILE, else the ConfigMap mounted by deploy/, else the shipped default."""
    if os.environ.get("GPUSCHED_PROFILE"):
        return os.environ["GPUSCHED_PROFILE"]
    if MOUNTED_PROFILE.is_file():
        return str(MOUNTED_PROFILE)
    return "gpusched" if "gpusched" in profile_files.available() else "topology"


class Command(LoopCommand):
    help = "Run gpusched as a secondary Kubernetes scheduler (one cycle by default, --loop)."
    default_interval = 0.5

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)
        parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
        parser.add_argument("--context", default=None, help="kubeconfig context")
        parser.add_argument(
            "--in-cluster", action="store_true", help="use the pod's service account only"
        )
        parser.add_argument("--profile", default=None, help="profile name or YAML path")
        parser.add_argument("--batch", type=int, default=200, help="pods per cycle")
        parser.add_argument("--lease-name", default=LEASE_NAME)
        parser.add_argument("--lease-namespace", default=None, help="default: our namespace")
        parser.add_argument("--lease-seconds", type=int, default=15)
        parser.add_argument("--renew-deadline", type=float, default=10.0)
        parser.add_argument("--retry-period", type=float, default=2.0)
        parser.add_argument(
            "--no-leader-elect", action="store_true", help="a single replica: no Lease"
        )
        parser.add_argument("--identity", default="", help="default: <hostname>_<uuid>")
        parser.add_argument("--json", action="store_true", help="one JSON line per busy cycle")
        parser.add_argument(
            "--admission",
            choices=ADMISSION_MODES,
            default=GPUSCHED,
            help="who admits: gpusched's queues (Kueue's objects in the cluster if its CRDs are "
            "installed, else applyqueues'), or Kueue (gpusched places what Kueue ungated)",
        )
        parser.add_argument(
            "--kueue-config",
            default="",
            metavar="NAMESPACE/NAME",
            help=f"Kueue's manager ConfigMap to read admissionFairSharing from (e.g. "
            f"{MANAGER_CONFIG}); with --admission gpusched",
        )
        parser.add_argument(
            "--adopt",
            action="store_true",
            help="run on a database that holds another source's nodes (the simulator's) or, "
            "where the cluster serves Kueue's CRDs, ClusterQueues (applyqueues', the REST "
            "API's, a demo's): they are taken over by this cluster's mirror",
        )
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.configure_loop(options)
        # First: a bad profile ends the command with the key named, before anything connects.
        profile = profile_files.command_profile(options["profile"] or default_profile())
        require_migrated()
        if not options["adopt"]:
            refuse_foreign_nodes()
        identity = options["identity"] or f"{socket.gethostname()}_{uuid.uuid4()}"
        connection = Connection(
            kubeconfig=options["kubeconfig"],
            context=options["context"],
            in_cluster=True if options["in_cluster"] else None,
        )
        api = KubeApi(
            connection.api_client(),
            reporting_instance=identity,
            event_budget=EventBudget(
                settings.KUBE_EVENTS_PER_S,
                settings.KUBE_EVENT_BURST,
                on_drop=metrics.events_dropped.inc,
            ),
        )
        if not options["adopt"] and options["admission"] == GPUSCHED:
            refuse_foreign_queues(api)
        elector = None
        if not options["no_leader_elect"]:
            elector = LeaseElector(
                api.coordination,
                name=options["lease_name"],
                namespace=options["lease_namespace"] or own_namespace(),
                identity=identity,
                lease_duration_s=options["lease_seconds"],
                renew_deadline_s=options["renew_deadline"],
                retry_period_s=options["retry_period"],
            )
        if options["kueue_config"] and options["admission"] != GPUSCHED:
            raise CommandError("--kueue-config is read when gpusched admits (--admission gpusched)")
        try:
            scheduler = kubernetes_cycle(
                api,
                Framework(profile),
                elector,
                identity=identity,
                batch_size=options["batch"],
                admission=options["admission"],
                kueue_config=options["kueue_config"],
                cache=ClusterCache(freeze_long_lived=True),
                binding_connection=connection,  # Bindings from a process of their own
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        side = scheduler.side
        assert isinstance(side, KubernetesSide)
        self.stderr.write(
            f"runkube: {identity} scheduling pods of schedulerName {side.scheduler_name}, "
            f"admitted by {side.admission}"
        )
        if options["loop"]:
            side.start()
        server = serve_metrics(
            metrics.registry, self.health, options["metrics_host"], options["metrics_port"]
        )

        # A failed cycle (the API server or the database away) is logged and retried by the loop,
        # its connections closed; losing the lease (a CommandError) ends the command.
        def step() -> float | None:
            report = run_step(scheduler)
            metrics.record_cycle(report)
            self.health.state = describe(report)
            if options["json"] and (report.attempted or report.side_counts or report.bound):
                self.stdout.write(json.dumps(asdict(report)))
            if not report.leading:
                return options["retry_period"]
            return 0.0 if report.more else None

        try:
            self.run_loop(step, loop=options["loop"])
        finally:
            side.stop()
            scheduler.stand_down()
            stop_serving(server)
            self.stderr.write(f"runkube: {identity} stopped")


def refuse_foreign_nodes() -> None:
    """The mirror replaces every node of the database with the cluster's: a database that holds
    nodes another source registered (a demo's simulator) would lose them silently."""
    foreign = {
        source: count
        for source, count in node_count_by_source().items()
        if source != KUBERNETES_SOURCE
    }
    if foreign:
        sources = ", ".join(f"{count} of {source}" for source, count in foreign.items())
        raise CommandError(
            f"the database holds nodes of another source ({sources}) that this cluster's "
            "nodes would replace; give runkube a fresh database (DATABASE_URL, then migrate) or "
            "pass --adopt to take them over"
        )


def refuse_foreign_queues(api: KubeApi) -> None:
    """Where the cluster serves Kueue's CRDs its objects are the queues, mirrored whole: queues
    another source put in the database would be deleted, or kept on Hold while they hold work.
    Without the CRDs, `applyqueues`' queues are the queues (docs/kubernetes.md): no refusal."""
    try:
        served = kueue_served(api)
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        raise CommandError(f"the API server could not say whether it serves Kueue: {exc}") from exc
    count = cluster_queues_of_another_source() if served else 0
    if count:
        raise CommandError(
            f"the database holds {count} ClusterQueue{'s' if count != 1 else ''} of another "
            "source (applyqueues, the REST API or a demo) that this cluster's Kueue objects "
            "would replace; give runkube a fresh database (DATABASE_URL, then migrate) or pass "
            "--adopt to take them over"
        )


def describe(report: CycleReport) -> str:
    if not report.leading:
        return "standing by"
    return "leading" if report.synced else "leading; informers listing"


def run_step(scheduler: SchedulingCycle) -> Any:
    """One cycle; losing the lease ends the process (a Deployment restarts it as a standby)."""
    try:
        return scheduler.run_once()
    except LeaseLost as exc:
        raise CommandError(f"{exc}; exiting") from exc
