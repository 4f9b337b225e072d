"""`manage.py bench_scheduler`: throughput and latency of a profile on a synthetic cluster."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bench import scheduler as bench
from scheduling.profile_files import command_profile
from sim.cluster import MIXED_SHARES, PRESETS

TOPOLOGIES = ("mixed", *PRESETS)


class Command(BaseCommand):
    help = (
        "Schedule a synthetic pod stream on a synthetic cluster and print throughput and latency."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--pods", type=int, default=4000)
        parser.add_argument("--topology", choices=TOPOLOGIES, default="mixed")
        parser.add_argument("--profile", default="gpusched", help="profile name or YAML path")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--reference",
            action="store_true",
            help="also run the naive numpy reference (fit + same-NUMA GPUs) on the same stream",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        profile = command_profile(options["profile"])
        result = bench.run(
            profile,
            nodes=options["nodes"],
            pods=options["pods"],
            topology=options["topology"],
            seed=options["seed"],
            reference=options["reference"],
        )
        report = {
            "profile": profile.scheduler_name,
            "topology": options["topology"],
            "mixed_shares": dict(MIXED_SHARES) if options["topology"] == "mixed" else None,
            **result.as_dict(),
        }
        if options["json"]:
            self.stdout.write(json.dumps(report))
        else:
            for key, value in report.items():
                self.stdout.write(f"{key:>18}: {value}")
