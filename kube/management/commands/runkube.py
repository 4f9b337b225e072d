"""`manage.py runkube [--once | --loop]`: gpusched as a secondary scheduler of a Kubernetes cluster.

Pods with `spec.schedulerName` equal to the profile's schedulerName are placed by gpusched; every
node and running pod is mirrored into the database (which the dashboard, the API and the extender
read). Replicas elect one leader with a coordination.k8s.io Lease; a replica that loses it exits
with status 1 (like kube-scheduler), so its Deployment restarts it as a standby. SIGTERM/SIGINT
finish the current cycle and give the lease up, so a standby takes over at once.

Connection: the pod's service account in a cluster, else `--kubeconfig` / KUBECONFIG /
~/.kube/config (`--context` to pick one).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import close_old_connections

from gpusched.loop import LoopCommand
from kube.api import KubeApi, connect, own_namespace
from kube.leader import LeaseElector, LeaseLost
from kube.scheduler import KubeScheduler
from scheduling import profile_files
from scheduling.core.scheduler import Framework

logger = logging.getLogger("kube.runkube")

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

    def handle(self, *args: Any, **options: Any) -> None:
        self.interval = options["interval"]
        # First: a bad profile ends the command with the key named, before anything connects.
        profile = profile_files.command_profile(options["profile"] or default_profile())
        identity = options["identity"] or f"{socket.gethostname()}_{uuid.uuid4()}"
        api = KubeApi(
            connect(
                kubeconfig=options["kubeconfig"],
                context=options["context"],
                in_cluster=True if options["in_cluster"] else None,
            ),
            reporting_instance=identity,
        )
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
        scheduler = KubeScheduler(
            api, Framework(profile), elector, identity=identity, batch_size=options["batch"]
        )
        self.stderr.write(
            f"runkube: {identity} scheduling pods of schedulerName {scheduler.scheduler_name}"
        )
        if options["loop"]:
            scheduler.start()

        def step() -> float | None:
            try:
                report = run_step(scheduler)
            except CommandError:
                raise
            except Exception:  # the API server or the database away: log, reconnect, go on
                if not options["loop"]:
                    raise
                logger.exception("runkube: cycle failed")
                close_old_connections()
                return None
            if options["json"] and (report.attempted or report.pods_mirrored or report.bound):
                self.stdout.write(json.dumps(asdict(report)))
            if not report.leading:
                return options["retry_period"]
            return 0.0 if report.more else None

        try:
            self.run_loop(step, loop=options["loop"])
        finally:
            scheduler.stop()
            if elector is None or not elector.lost:
                scheduler.stand_down()
            self.stderr.write(f"runkube: {identity} stopped")


def run_step(scheduler: KubeScheduler) -> Any:
    """One cycle; losing the lease ends the process (a Deployment restarts it as a standby)."""
    try:
        return scheduler.run_once()
    except LeaseLost as exc:
        raise CommandError(f"{exc}; exiting") from exc
