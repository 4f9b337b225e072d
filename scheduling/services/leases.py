"""Leader election among scheduler replicas."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import F, Q

from scheduling.models import (
    Lease,
)

logger = logging.getLogger(__name__)


def lease_acquire(*, name: str, holder: str, duration_s: float, now: datetime) -> bool:
    """Take or renew the lease; True while `holder` leads. A conditional UPDATE, so two candidates
    can never both win: the row changes only if we hold it already or its holder let it expire."""
    Lease.objects.get_or_create(name=name, defaults={"duration_s": duration_s})
    expired_before = now - timedelta(seconds=duration_s)
    renewed = Lease.objects.filter(name=name, holder=holder).update(
        renewed_at=now, duration_s=duration_s
    )
    if renewed:
        return True
    taken = Lease.objects.filter(
        Q(holder="") | Q(renewed_at__isnull=True) | Q(renewed_at__lt=expired_before), name=name
    ).update(
        holder=holder,
        renewed_at=now,
        acquired_at=now,
        duration_s=duration_s,
        transitions=F("transitions") + 1,
    )
    if taken:
        logger.info("lease %s acquired by %s", name, holder)
    return bool(taken)


def lease_release(*, name: str, holder: str) -> None:
    Lease.objects.filter(name=name, holder=holder).update(holder="", renewed_at=None)
