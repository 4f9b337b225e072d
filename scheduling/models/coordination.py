"""The outbox of events and the scheduler replicas' leases."""

from __future__ import annotations

from django.db import models


class Event(models.Model):
    """The outbox: one row per state change, written in the transaction that made the change. Ids
    grow in commit order (on PostgreSQL a deferred trigger gives each row its id at COMMIT, one
    writer at a time: migration 0013), so readers tail by id."""

    type = models.CharField(max_length=64)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.pk} {self.type}"


class Lease(models.Model):
    """Leader election among scheduler replicas: the holder renews; others take over on expiry."""

    name = models.CharField(max_length=63, unique=True)
    holder = models.CharField(max_length=128, blank=True, default="")
    renewed_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(default=15.0)
    transitions = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or 'free'}"
