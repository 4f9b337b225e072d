"""`manage.py explain --nodes NODES.yaml --pod POD.yaml [--profile PROFILE] [--json]`: why a pod
would (not) fit on each node, offline (kube.explain). Bad input is a command error naming the file,
the object and the key; with --json, stdout is exactly one JSON object (warnings go to stderr)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kube.explain import ExplainError, explain, read_documents, render_text
from scheduling.core.plugin_args import ProfileError
from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile


class Command(BaseCommand):
    help = "Explain where a pod would be placed on the given nodes, and why not elsewhere."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", required=True, type=Path, help="Nodes (and bound Pods)")
        parser.add_argument("--pod", required=True, type=Path, help="the Pod to place")
        parser.add_argument(
            "--profile",
            default="gpusched",
            help="profile name, YAML file, or the ConfigMap of deploy/scheduler-profile.yaml",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            framework = Framework(load_profile(options["profile"]))
        except ProfileError as exc:
            raise CommandError(f"{options['profile']}: {exc}") from exc
        try:
            doc, warnings = explain(
                read_documents(options["nodes"]), read_documents(options["pod"]), framework
            )
        except ExplainError as exc:
            raise CommandError(str(exc)) from exc
        for warning in warnings:
            self.stderr.write(f"warning: {warning}")
        if options["json"]:
            self.stdout.write(json.dumps(doc))
        else:
            self.stdout.write(render_text(doc))
