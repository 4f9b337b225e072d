"""`manage.py applyqueues FILE...`: create or update queues from Kueue-shaped YAML documents
(ResourceFlavor, Cohort, ClusterQueue, LocalQueue, WorkloadPriorityClass / PriorityClass, and the
admissionFairSharing part of Kueue's Configuration), like `kubectl apply -f`. Every unknown or
repeated key is refused with its name and place, and every Kueue feature gpusched does not act on
with the reason (scheduling.core.queueing.compatibility); nothing is written unless every document
is valid. A shipped file can be named without its path: `applyqueues demo`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling import services
from scheduling.core import yaml_documents
from scheduling.core.queueing.config import QueueConfig, QueueConfigError
from scheduling.core.queueing.kueue_objects import parse_documents

QUEUE_DIR = Path(__file__).resolve().parents[2] / "queues"


def queue_file(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = QUEUE_DIR / f"{name_or_path}.yaml"
    return path


def read_config(paths: list[Path]) -> QueueConfig:
    docs: list[object] = []
    for path in paths:
        if not path.is_file():
            shipped = ", ".join(sorted(p.stem for p in QUEUE_DIR.glob("*.yaml")))
            raise CommandError(f"no such file {path} (shipped queue files: {shipped})")
        try:
            docs.extend(yaml_documents.load_all(path.read_text()))
        except (OSError, UnicodeDecodeError, yaml_documents.YamlError) as exc:
            raise CommandError(f"{path}: {exc}") from exc
    try:
        return parse_documents(docs)
    except QueueConfigError as exc:
        raise CommandError(str(exc)) from exc


class Command(BaseCommand):
    help = (
        "Create or update ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, priority classes "
        "and admission fair sharing settings."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", help="YAML files (or a shipped name: demo)")
        parser.add_argument("--dry-run", action="store_true", help="validate only")

    def handle(self, *args: Any, **options: Any) -> None:
        config = read_config([queue_file(f) for f in options["files"]])
        if options["dry_run"]:
            self.stdout.write(
                f"valid: {len(config.flavors)} flavor(s), {len(config.cohorts)} cohort(s), "
                f"{len(config.cluster_queues)} cluster queue(s), {len(config.local_queues)} "
                f"local queue(s), {len(config.priority_classes)} priority class(es)"
                + (", admission fair sharing" if config.admission_fair_sharing else "")
            )
            return
        try:
            applied = services.queues_apply(config=config)
        except services.ServiceError as exc:
            raise CommandError(str(exc)) from exc
        for kind, names in applied.items():
            if names:
                self.stdout.write(f"{kind.replace('_', ' ')}: {', '.join(names)}")
