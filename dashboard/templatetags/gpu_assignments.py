"""`{% gpu_mismatches node.name %}`: the Node page's marker for GPUs that pods hold other than
recorded (scheduling.selectors.gpu_holders, on the labels telemetry stored last), self-contained so
the page needs one line for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import template
from django.utils import timezone

from scheduling.selectors.gpu_holders import mismatches, node_corrections
from telemetry.selectors import observed_on_node

register = template.Library()
CORRECTIONS_SHOWN_FOR = timedelta(hours=24)


@register.inclusion_tag("dashboard/gpu_mismatches.html")
def gpu_mismatches(node: str) -> dict[str, Any]:
    return {
        "mismatches": mismatches(observed_on_node(node)),
        "corrections": node_corrections(node, since=timezone.now() - CORRECTIONS_SHOWN_FOR),
    }
