"""Admission fair sharing in the database (scheduling.core.queueing.fair_usage has the
arithmetic): each LocalQueue's decayed usage lives in its row (`consumed_resources`,
`usage_sampled_at`), moved toward what the queue uses now once per `usageSamplingInterval`, and
raised by the entry penalty of every workload admitted through it. Writes only, each in one
transaction with its outbox event; the admission cycle reads the rows back through
queue_state.queue_setup as a pure input.

Only LocalQueues of ClusterQueues with `admissionScope.admissionMode:
UsageBasedAdmissionFairSharing` keep a history (the others' order does not use it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling import events
from scheduling.bulk import update_rows
from scheduling.core.queueing.config import AdmissionMode
from scheduling.core.queueing.fair_usage import add, decayed, entry_penalty, in_base_units
from scheduling.models import LocalQueue, Workload
from scheduling.selectors import cohorts as queue_selectors
from scheduling.worker import queue_state


def _fair_queues() -> list[LocalQueue]:
    return list(
        LocalQueue.objects.filter(
            cluster_queue__admission_mode=AdmissionMode.USAGE_BASED.value
        ).order_by("id")
    )


def local_queue_usage_sample(*, now: datetime) -> int:
    """Fold what each fair-shared LocalQueue uses now into its history, for those whose last
    sample is at least `usageSamplingInterval` old (the first sample only starts the clock, as
    Kueue's does). Returns how many were sampled."""
    settings = queue_state.fair_sharing_settings()
    interval = settings.usage_sampling_interval_s
    due = [
        lq.pk
        for lq in _fair_queues()
        if lq.usage_sampled_at is None or (now - lq.usage_sampled_at).total_seconds() >= interval
    ]
    if not due:
        return 0
    current = queue_selectors.local_queue_admitted_usage()
    with transaction.atomic():
        rows = list(LocalQueue.objects.select_for_update().filter(pk__in=due).order_by("id"))
        for lq in rows:
            key = f"{lq.namespace}/{lq.name}"
            elapsed = (now - lq.usage_sampled_at).total_seconds() if lq.usage_sampled_at else 0.0
            lq.consumed_resources = decayed(
                lq.consumed_resources or {}, current.get(key, {}), elapsed, settings
            )
            lq.usage_sampled_at = now
        update_rows(rows, ["consumed_resources", "usage_sampled_at"])
        events.publish(
            events.LocalQueueUsageSampled(local_queues=[f"{lq.namespace}/{lq.name}" for lq in rows])
        )
    return len(rows)


def local_queue_entry_penalties(*, admitted: Sequence[Workload]) -> None:
    """Charge each admitted workload's entry penalty to its LocalQueue's history at once (called
    inside the admitting transaction, whose workload events cover the change)."""
    if not admitted:
        return
    settings = queue_state.fair_sharing_settings()
    wanted = {(w.tenant.namespace, w.queue_name) for w in admitted}
    rows = {
        (lq.namespace, lq.name): lq
        for lq in LocalQueue.objects.select_for_update().filter(
            cluster_queue__admission_mode=AdmissionMode.USAGE_BASED.value,
            namespace__in={ns for ns, _ in wanted},
            name__in={name for _, name in wanted},
        )
    }
    changed: dict[int, LocalQueue] = {}
    for w in admitted:
        lq = rows.get((w.tenant.namespace, w.queue_name))
        if lq is None:
            continue
        usage = in_base_units(queue_state.parse_usage(w.quota_usage))
        lq.consumed_resources = add(lq.consumed_resources or {}, entry_penalty(usage, settings))
        changed[lq.pk] = lq
    update_rows(list(changed.values()), ["consumed_resources"])
