"""`manage.py replay openb`: replay Alibaba's openb trace by the FGD paper's protocol and compare
with the paper's published results.

    python manage.py replay openb --policy gpusched \
        --pods ../shared/data/openb/openb_pod_list_default.csv \
        --seeds 42-51 --tune 1.3 --json --plot docs/img/replay.png
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.replay import openb, report
from scheduling.core.plugin_args import ProfileError
from scheduling.profile_files import load_profile

REPO = Path(__file__).resolve().parents[3]
DATA_DIR = REPO.parent / "shared" / "data" / "openb"
DEFAULT_NODES = DATA_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = DATA_DIR / "openb_pod_list_default.csv"
DEFAULT_PAPER = DATA_DIR / "fgd_analysis_allo_discrete.csv"


def parse_seeds(text: str) -> list[int]:
    """`42-51`, `42,43,50` or a mix (`42-44,50`)."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                seeds.extend(range(lo, hi + 1))
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise CommandError(f"--seeds: expected e.g. 42-51 or 42,43, got {text!r}") from None
    if not seeds:
        raise CommandError("--seeds: no seed given")
    return seeds


class ProgressBar:
    """A one-line progress bar on stderr (a line per 10% when stderr is not a terminal)."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self.last_tenth = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        fraction = min(done / total, 1.0)
        elapsed = time.monotonic() - self.started
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else 0.0
        if self.tty:
            filled = int(30 * fraction)
            bar = "#" * filled + "-" * (30 - filled)
            sys.stderr.write(
                f"\r{self.label} [{bar}] {100 * fraction:5.1f}% {done}/{total} pods "
                f"{elapsed:6.1f}s eta {eta:5.0f}s"
            )
            if done >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()
            return
        tenth = int(10 * fraction)
        if tenth > self.last_tenth:
            self.last_tenth = tenth
            sys.stderr.write(
                f"{self.label}: {100 * fraction:.0f}% ({done}/{total} pods, {elapsed:.0f}s)\n"
            )
            sys.stderr.flush()


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # pure computation: no database, URLs or templates
    help = (
        "Replay a GPU trace by the FGD paper's protocol (openb: Alibaba cluster-trace-gpu-v2023) "
        "and report the GPU allocation ratio and fragmentation rate per arrived-demand percent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("trace_format", choices=["openb"], help="trace family (only openb)")
        parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="node list CSV")
        parser.add_argument("--pods", type=Path, default=DEFAULT_PODS, help="pod list CSV")
        parser.add_argument("--policy", default="gpusched", help="profile name or YAML path")
        parser.add_argument("--seeds", default="42-51", help="e.g. 42-51 (the paper's) or 42,43")
        parser.add_argument(
            "--tune", type=float, default=openb.DEFAULT_TUNE, help="arrival cap x capacity"
        )
        parser.add_argument(
            "--jobs", type=int, default=1, help="seeds replayed in parallel processes"
        )
        parser.add_argument(
            "--paper", type=Path, default=DEFAULT_PAPER, help="published results CSV"
        )
        parser.add_argument("--plot", type=Path, help="write a PNG of allocation ratio vs arrival")
        parser.add_argument(
            "--overlay",
            nargs="*",
            default=[],
            metavar="JSON",
            help="saved --json outputs of other policies (same trace) to draw in the plot too",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        seeds = parse_seeds(options["seeds"])
        tune = options["tune"]
        if not tune > 0:
            raise CommandError("--tune must be positive")
        try:
            profile = load_profile(options["policy"])
            nodes = openb.load_nodes(Path(options["nodes"]))
            pods = openb.load_pods(Path(options["pods"]))
        except (openb.TraceError, ProfileError) as exc:
            raise CommandError(str(exc)) from exc
        policy = Path(options["policy"]).stem
        trace = openb.trace_name(options["pods"])
        paper_path = Path(options["paper"])
        curves: dict[str, list[float]] = {}
        if paper_path.is_file():
            curves = report.paper_curves(paper_path, trace)
        elif options["plot"] or paper_path != DEFAULT_PAPER:
            raise CommandError(f"{paper_path}: no such file (--paper)")

        progress = ProgressBar(f"replay {policy} {trace}", enabled=not options["no_progress"])
        result = openb.replay(
            nodes,
            pods,
            profile,
            seeds,
            tune=tune,
            policy=policy,
            trace=trace,
            jobs=max(1, options["jobs"]),
            progress=progress,
        )
        doc = result.to_json(report.paper_points(curves) if curves else None)
        if options["plot"]:
            plot_path = Path(options["plot"])
            mine = {}
            for saved in options["overlay"]:
                try:
                    other = json.loads(Path(saved).read_text())
                    mine[str(other["policy"])] = report.from_json(other)
                except (OSError, ValueError, KeyError, openb.TraceError) as exc:
                    raise CommandError(f"--overlay {saved}: {exc}") from exc
            mine[policy] = report.ours(result)
            title = f"openb {trace}: {', '.join(mine)} ({len(seeds)} seeds) vs the paper"
            report.plot(mine, curves, plot_path, title=title)
            doc["plot"] = str(plot_path)
        if options["json"]:
            self.stdout.write(json.dumps(doc))
            return
        self.stdout.write(f"policy {policy}, trace {trace}, seeds {seeds}, tune {tune}")
        for point in ("100", "130"):
            line = f"  alloc @{point}%: {doc['alloc_ratio'][point]:.2f}"
            if policy in report.PAPER_POLICIES and curves:
                paper = doc["paper"].get(report.PAPER_POLICIES[policy], {}).get(point)
                if paper is not None:
                    line += f"  (paper {paper:.2f})"
            line += f"  frag rate {doc['frag_rate'][point]:.2f}%"
            self.stdout.write(line)
        for run in doc["per_seed"]:
            self.stdout.write(
                f"  seed {run['seed']}: alloc {run['alloc_ratio']['100']:.2f} / "
                f"{run['alloc_ratio']['130']:.2f}, {run['failed_pods']}/{run['pods']} pods failed, "
                f"{run['seconds']:.1f}s"
            )
