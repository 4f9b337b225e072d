"""Node page: one node's GPUs, their latest readings and the last hour of rollups."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.utils import timezone

from dashboard.selectors import Doc
from telemetry import conf as telemetry_conf
from telemetry.models import GpuLatest, GpuMinute

SERIES_WINDOW = timedelta(hours=1)


def node_gpu_telemetry(name: str, now: datetime | None = None) -> dict[str, Doc]:
    """The latest reading of each GPU (and MIG instance) of one node, keyed by GPU index."""
    now = now or timezone.now()
    window = telemetry_conf.freshness().total_seconds()
    result: dict[str, Doc] = {}
    for row in GpuLatest.objects.filter(node=name).order_by("gpu_index", "mig_instance"):
        age = max((now - row.sampled_at).total_seconds(), 0.0)
        doc = result.setdefault(
            str(row.gpu_index),
            {"uuid": row.uuid, "model": row.model_name, "at": 0, "stale": False, "mig": []},
        )
        values = {
            "busy": _pct(row.busy),
            "fb_used_mib": _round(row.fb_used_mib),
            "fb_free_mib": _round(row.fb_free_mib),
            "power_w": _round(row.power_w),
            "temp_c": _round(row.temp_c),
            "xid": row.xid_last,
            "pods": [f"{pod[0]}/{pod[1]}" for pod in row.pods if len(pod) >= 2],
        }
        doc["at"] = max(doc["at"], int(row.sampled_at.timestamp()))
        doc["stale"] = doc["stale"] or age > window
        if row.mig_instance:
            doc["mig"].append({"instance": row.mig_instance, "profile": row.mig_profile, **values})
        else:
            doc.update(values)
    for doc in result.values():
        if doc["mig"] and "busy" not in doc:  # a MIG GPU: its instances, summed up
            busy = [m["busy"] for m in doc["mig"] if m["busy"] is not None]
            doc["busy"] = round(sum(busy) / len(busy)) if busy else None
            for field in ("fb_used_mib", "fb_free_mib"):
                parts = [m[field] for m in doc["mig"] if m[field] is not None]
                doc[field] = round(sum(parts), 1) if parts else None
            doc["pods"] = sorted({pod for m in doc["mig"] for pod in m["pods"]})
    return result


def node_gpu_series(name: str, now: datetime | None = None) -> dict[str, Doc]:
    """Per GPU of one node: the last hour of 1-minute rollups (busy %, framebuffer, power). A MIG
    GPU's instances are folded into their GPU: mean busy, peak busy, summed framebuffer."""
    now = now or timezone.now()
    rows = (
        GpuMinute.objects.filter(node=name, minute__gte=now - SERIES_WINDOW)
        .order_by("gpu_index", "minute", "mig_instance")
        .values_list("gpu_index", "minute", "busy_avg", "busy_max", "fb_used_avg", "power_avg")
    )
    minutes: dict[tuple[int, datetime], list[tuple[float | None, ...]]] = defaultdict(list)
    for index, minute, *values in rows:
        minutes[(index, minute)].append(tuple(values))
    result: dict[str, Doc] = {}
    for (index, minute), parts in minutes.items():
        doc = result.setdefault(
            str(index), {"t": [], "busy": [], "busy_max": [], "fb_used_mib": [], "power_w": []}
        )
        busy, peak, fb, power = zip(*parts, strict=True)
        doc["t"].append(int(minute.timestamp()))
        doc["busy"].append(_pct(_mean(busy)))
        doc["busy_max"].append(_pct(max((v for v in peak if v is not None), default=None)))
        doc["fb_used_mib"].append(_round(_total(fb)))
        doc["power_w"].append(_round(_total(power)))
    return result


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _total(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _pct(value: float | None) -> int | None:
    return None if value is None else round(value * 100)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
