"""`manage.py bench_demo --hours 1 --json`: the demo's backlog over simulated hours.

The demo's cluster (sim/specs/demo.yaml), queues (scheduling/queues/demo.yaml) and profile run on
a simulated clock in lock-step (bench/experiments/worlds.py) on a scratch database, so the
configured database is never touched; every --sample-minutes it records how many workloads wait
for quota (Pending) and how many pods wait for a node. A steady demo keeps both bounded: the last
hour's peak no higher than the first's plus the spread of its arrivals.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count

from bench.experiments.worlds import SIDES, SimClock, run_cycles, world
from bench.management.commands.experiment import scratch_database
from scheduling.core.scheduler import Framework
from scheduling.management.commands.applyqueues import queue_file
from scheduling.models import Pod, Workload
from scheduling.profile_files import load_profile
from sim.spec import load_spec


class Command(BaseCommand):
    help = "The demo's pending work over simulated hours (JSON), on a scratch database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hours", type=float, default=1.0, help="simulated hours")
        parser.add_argument("--step-seconds", type=float, default=30.0, help="simulated step")
        parser.add_argument("--sample-minutes", type=float, default=10.0)
        parser.add_argument("--side", choices=SIDES, default="database")
        parser.add_argument("--cluster", default="demo")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        with scratch_database():
            samples = backlog(options)
        peak = max(sample["pending_workloads"] for sample in samples)
        result = {"cluster": options["cluster"], "side": options["side"], "samples": samples}
        result["peak_pending_workloads"] = peak
        result["final_pending_workloads"] = samples[-1]["pending_workloads"]
        self.stdout.write(json.dumps(result, indent=None if options["json"] else 2))


def backlog(options: dict[str, Any]) -> list[dict[str, Any]]:
    clock = SimClock()
    spec = load_spec(options["cluster"])
    simulated = world(options["side"], spec, clock)
    try:
        documents = [d for d in yaml.safe_load_all(queue_file(options["cluster"]).read_text()) if d]
        simulated.apply_queues(documents)
        scheduler = simulated.cycle(Framework(load_profile("gpusched")))
        samples: list[dict[str, Any]] = []
        steps = int(options["hours"] * 3600 / options["step_seconds"])
        every = max(1, int(options["sample_minutes"] * 60 / options["step_seconds"]))
        for step in range(1, steps + 1):
            clock.advance(options["step_seconds"])
            simulated.step()
            run_cycles(scheduler)
            if step % every == 0:
                samples.append(
                    {
                        "minute": round(clock.monotonic() / 60, 1),
                        "pending_workloads": Workload.objects.filter(
                            state=Workload.State.PENDING
                        ).count(),
                        "pending_pods": Pod.objects.filter(phase=Pod.Phase.PENDING).count(),
                        "running_pods": Pod.objects.filter(phase=Pod.Phase.RUNNING).count(),
                        "pending_by_tenant": dict(
                            Workload.objects.filter(state=Workload.State.PENDING)
                            .values_list("tenant__name")
                            .annotate(count=Count("id"))
                            .order_by("tenant__name")
                        ),
                    }
                )
        return samples
    finally:
        simulated.close()
