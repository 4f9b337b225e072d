"""createtenant NAME [--namespace NS] [--queue Q] [--quota nvidia.com/gpu=16 ...] [--json]

Creates a tenant with its LocalQueue (and, unless --cluster-queue names an existing one, its own
ClusterQueue holding the --quota as nominal quota), its limits and a first API token. The token
is printed once; only its digest is stored."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from api import services
from api.exceptions import ApplicationError, InvalidInput


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        resource, sep, quantity = item.partition("=")
        if not sep or not resource.strip() or not quantity.strip():
            raise CommandError(f"{option} {item!r}: expected RESOURCE=QUANTITY, e.g. cpu=8")
        out[resource.strip()] = quantity.strip()
    return out


class Command(BaseCommand):
    help = "Create a tenant with its LocalQueue, limits and an API token (printed once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="tenant name (a DNS label)")
        parser.add_argument("--namespace", help="its namespace (default: the name)")
        parser.add_argument("--queue", help="its LocalQueue's name (default: the name)")
        parser.add_argument(
            "--quota",
            action="append",
            metavar="RESOURCE=QUANTITY",
            help="nominal quota of its ClusterQueue, repeatable: --quota nvidia.com/gpu=16",
        )
        parser.add_argument("--cohort", default="", help="cohort of its ClusterQueue")
        parser.add_argument("--flavor", help="ResourceFlavor of the quota (default: every node)")
        parser.add_argument(
            "--cluster-queue", help="point its LocalQueue at this existing ClusterQueue instead"
        )
        parser.add_argument("--default-request", action="append", metavar="RESOURCE=QUANTITY")
        parser.add_argument("--min-per-pod", action="append", metavar="RESOURCE=QUANTITY")
        parser.add_argument("--max-per-pod", action="append", metavar="RESOURCE=QUANTITY")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant, policy, token = services.tenant_onboard(
                name=options["name"],
                namespace=options["namespace"],
                queue_name=options["queue"],
                quota=_pairs(options["quota"], "--quota"),
                cohort=options["cohort"],
                flavor=options["flavor"],
                cluster_queue=options["cluster_queue"],
                default_requests=_pairs(options["default_request"], "--default-request"),
                min_per_pod=_pairs(options["min_per_pod"], "--min-per-pod"),
                max_per_pod=_pairs(options["max_per_pod"], "--max-per-pod"),
            )
        except InvalidInput as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.fields.items())
            raise CommandError(problems) from exc
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        doc = {"tenant": tenant.name, "token": token, "queueName": policy.queue_name}
        if options["json"]:
            self.stdout.write(json.dumps(doc))
            return
        self.stdout.write(f"tenant {tenant.name} (namespace {tenant.namespace})")
        self.stdout.write(f"queueName: {policy.queue_name}")
        self.stdout.write(f"token (shown once): {token}")
