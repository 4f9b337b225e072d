"""Telemetry writes. The only code that writes telemetry rows (HackSoft services).

    samples_ingest    one fetched batch -> GpuLatest (upsert), GpuSampleRaw, NodeTelemetry
    telemetry_rollup  GpuSampleRaw -> GpuMinute / PodMinute, once per closed minute
    freshness_mark    nodes whose last sample is older than the freshness window -> stale
    telemetry_prune   retention: raw history, minute rollups, GPUs and nodes gone for good
    source_status_record  one attempt of a source, its success or its error

Hot paths are written for a 5,000-node scrape (40,000 GPUs) per cycle: no per-sample ORM calls;
multi-row inserts and upserts, and the rollups as INSERT ... SELECT in the database.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import chain, repeat
from typing import Any

import psycopg
from django.db import connection, models, transaction
from django.db.models import F, Max, Min
from django.utils import timezone

from telemetry import conf
from telemetry.batch import GpuBatch, GpuSample
from telemetry.models import (
    GpuLatest,
    GpuMinute,
    GpuSampleRaw,
    NodeTelemetry,
    PodMinute,
    SourceStatus,
)

_LATEST_VALUES = (
    "gpu_util",
    "mem_copy_util",
    "gr_engine_active",
    "tensor_active",
    "dram_active",
    "fb_used_mib",
    "fb_free_mib",
    "power_w",
    "temp_c",
)


@dataclass(frozen=True)
class IngestResult:
    gpus: int
    nodes: int
    raw_rows: int


def samples_ingest(
    *, gpus: GpuBatch | Sequence[GpuSample], observed_at: datetime, source: str
) -> IngestResult:
    """Store one batch: the latest values of each GPU, a raw row per GPU and pod, node freshness.

    A GPU's age is measured from the sample's own timestamp when the source gave one, else from
    `observed_at`. A GPU shared by several pods arrives once per pod with the same values: one
    GpuLatest row lists all its pods. The rows are zipped from the batch's columns (no object
    per GPU: telemetry.batch).
    """
    batch = gpus if isinstance(gpus, GpuBatch) else GpuBatch.from_samples(gpus)
    rows = len(batch)
    observed = connection.ops.adapt_datetimefield_value(observed_at)
    gpu_keys = list(zip(batch.node, batch.gpu_index, batch.mig_instance, strict=True))
    # GPU -> its first row
    first_rows = dict(zip(reversed(gpu_keys), range(rows - 1, -1, -1), strict=True))
    if len(first_rows) == rows:  # the usual case: a row per GPU
        firsts = None
        primary = [True] * rows
    else:  # the first row of a GPU holds its values; the others only add their pods
        firsts = sorted(first_rows.values())
        primary = [first_rows[key] == row for row, key in enumerate(gpu_keys)]

    def per_gpu(column: list[Any]) -> list[Any]:
        return column if firsts is None else list(map(column.__getitem__, firsts))

    def values(attr: str) -> list[float | None]:
        return batch.values.get(attr) or [None] * rows

    busy = batch.busy()
    raw = list(
        zip(
            repeat(observed, rows),
            batch.node,
            batch.gpu_index,
            batch.mig_instance,
            batch.namespace,
            batch.pod,
            primary,
            busy,
            values("fb_used_mib"),
            values("power_w"),
            strict=True,
        )
    )
    nodes = per_gpu(batch.node)
    sampled_at, newest = _sampled_at(per_gpu(batch.timestamp), nodes, observed_at, observed)
    xids = [None if xid is None else int(xid) for xid in per_gpu(values("xid_last"))]
    latest_rows = list(
        zip(
            nodes,
            per_gpu(batch.gpu_index),
            per_gpu(batch.mig_instance),
            per_gpu(batch.uuid),
            per_gpu(batch.model_name),
            per_gpu(batch.mig_profile),
            per_gpu(busy),
            *(per_gpu(values(attr)) for attr in _LATEST_VALUES),
            xids,
            repeat(source),
            sampled_at,
            _pods_json(batch, gpu_keys, firsts),
        )
    )
    fresh = NodeTelemetry.State.FRESH.value
    node_rows = [
        (node, fresh, newest[node], count, source) for node, count in Counter(nodes).items()
    ]
    with transaction.atomic(), _bulk_cursor() as cursor:
        _LATEST_UPSERT.write(cursor, latest_rows)
        _RAW_INSERT.write(cursor, raw)
        _NODE_UPSERT.write(cursor, node_rows)
    return IngestResult(gpus=len(latest_rows), nodes=len(node_rows), raw_rows=len(raw))


def _sampled_at(
    stamps: list[float | None], nodes: list[str], observed_at: datetime, observed: Any
) -> tuple[list[Any], dict[str, Any]]:
    """When each GPU's values were measured (its timestamp if the source gave one, never after
    `observed_at`) and each node's newest, as the database takes them."""
    if stamps.count(None) == len(stamps):  # the usual case: every age starts at the fetch
        return [observed] * len(stamps), dict.fromkeys(nodes, observed)
    adapt_time = connection.ops.adapt_datetimefield_value
    observed_ts = observed_at.timestamp()
    seconds = [observed_ts if ts is None else min(ts, observed_ts) for ts in stamps]
    times = {ts: adapt_time(datetime.fromtimestamp(ts, tz=UTC)) for ts in set(seconds)}
    times[observed_ts] = observed
    node_newest: dict[str, float] = {}
    for node, ts in zip(nodes, seconds, strict=True):
        if ts > node_newest.get(node, -1.0):
            node_newest[node] = ts
    return list(map(times.__getitem__, seconds)), {
        node: times[ts] for node, ts in node_newest.items()
    }


def _pods_json(
    batch: GpuBatch, gpu_keys: list[tuple[str, int, str]], firsts: list[int] | None
) -> list[str]:
    """Each GPU's pods, [[namespace, pod, container], ...], as JSON text, each distinct list
    encoded once (a pod's GPUs list the same pods). The text is what Django's JSONField writes
    on SQLite, and PostgreSQL reads it into the jsonb column as it is (an untyped parameter):
    Django's Jsonb wrapper would have psycopg encode the list again for every row."""
    refs = list(zip(batch.namespace, batch.pod, batch.container, strict=True))
    if firsts is None:  # a row per GPU: its pod, or none
        encoded = {ref: json.dumps([list(ref)] if ref[1] else []) for ref in set(refs)}
        return list(map(encoded.__getitem__, refs))
    held: dict[tuple[str, int, str], list[tuple[str, str, str]]] = {}
    for key, ref in zip(gpu_keys, refs, strict=True):
        pods = held.setdefault(key, [])
        if ref[1]:
            pods.append(ref)
    lists = [tuple(held[gpu_keys[row]]) for row in firsts]
    encoded_lists = {pods: json.dumps([list(ref) for ref in pods]) for pods in set(lists)}
    return list(map(encoded_lists.__getitem__, lists))


@contextmanager
def _bulk_cursor() -> Iterator[Any]:
    """A cursor for statements of many rows. On PostgreSQL, Django's cursor binds parameters on
    the client, quoting each one in Python (psycopg's ClientCursor: 60% of the CPU of storing a
    5,000-node scrape); this one, on the same connection and in the same transaction, sends them
    to the server as they are (psycopg's Cursor: server-side binding). Errors are Django's."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


@dataclass(frozen=True)
class _Insert:
    """INSERT (or upsert, with `conflict`) of `columns`: rows in statements of as many rows as the
    database takes parameters (SQLite's 999 as Django reports it: about 50-100 rows), the rest in
    one-row statements. A statement per row costs SQLite about twice the time (and PostgreSQL a
    round trip per row outside a pipeline)."""

    model: type[models.Model]
    columns: tuple[str, ...]
    conflict: tuple[str, ...] = ()

    MAX_ROWS = 500  # per statement

    def write(self, cursor: Any, rows: Sequence[Sequence[Any]]) -> None:
        params = connection.features.max_query_params or 65_535
        per = max(1, min(self.MAX_ROWS, params // len(self.columns)))
        whole = len(rows) - len(rows) % per
        if whole and per > 1:
            # One executemany() of the batches: the statement is prepared once (Django's SQLite
            # backend rewrites each %s to ? per call: once per batch cost ~0.2 s a scrape).
            batches = [
                list(chain.from_iterable(rows[at : at + per])) for at in range(0, whole, per)
            ]
            cursor.executemany(self.sql(per), batches)
        else:
            whole = 0
        if whole < len(rows):
            cursor.executemany(self.sql(), rows[whole:])

    def sql(self, rows: int = 1) -> str:
        quote = connection.ops.quote_name
        names = ", ".join(quote(column) for column in self.columns)
        marks = ", ".join([f"({', '.join(['%s'] * len(self.columns))})"] * rows)
        sql = f"INSERT INTO {quote(self.model._meta.db_table)} ({names}) VALUES {marks}"
        if self.conflict:
            keys = ", ".join(quote(column) for column in self.conflict)
            updates = ", ".join(
                f"{quote(column)} = excluded.{quote(column)}"
                for column in self.columns
                if column not in self.conflict
            )
            sql += f" ON CONFLICT ({keys}) DO UPDATE SET {updates}"
        return sql


_LATEST_UPSERT = _Insert(
    GpuLatest,
    (
        "node",
        "gpu_index",
        "mig_instance",
        "uuid",
        "model_name",
        "mig_profile",
        "busy",
        *_LATEST_VALUES,
        "xid_last",
        "source",
        "sampled_at",
        "pods",
    ),
    conflict=("node", "gpu_index", "mig_instance"),
)
_RAW_INSERT = _Insert(
    GpuSampleRaw,
    (
        "observed_at",
        "node",
        "gpu_index",
        "mig_instance",
        "namespace",
        "pod",
        "primary",
        "busy",
        "fb_used_mib",
        "power_w",
    ),
)
_NODE_UPSERT = _Insert(
    NodeTelemetry,
    ("node", "state", "last_sample_at", "gpus", "source"),
    conflict=("node",),
)


def freshness_mark(*, now: datetime | None = None) -> int:
    """Mark stale every node whose newest sample is older than the freshness window."""
    now = now or timezone.now()
    cutoff = now - conf.freshness()
    return NodeTelemetry.objects.filter(
        state=NodeTelemetry.State.FRESH, last_sample_at__lt=cutoff
    ).update(state=NodeTelemetry.State.STALE)


def _minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def telemetry_rollup(*, now: datetime | None = None, max_minutes: int = 60) -> int:
    """Roll the raw readings of every closed minute not yet rolled up into GpuMinute and
    PodMinute rows (at most `max_minutes` of them); returns how many minutes were rolled up.

    A minute is closed once `now` has passed its end. The readings of the open minute are in
    GpuLatest and GpuSampleRaw already; rolling each minute up once keeps the cost per cycle
    flat however many readings a minute gets.
    """
    now = now or timezone.now()
    current = _minute(now)
    last = GpuMinute.objects.aggregate(last=Max("minute"))["last"]
    if last is not None:
        moment = last + timedelta(minutes=1)
    else:
        first = GpuSampleRaw.objects.aggregate(first=Min("observed_at"))["first"]
        if first is None:
            return 0
        moment = _minute(first)
    moment = max(moment, _minute(now - conf.raw_retention()))
    minutes = 0
    with transaction.atomic(), connection.cursor() as cursor:
        while moment < current and minutes < max_minutes:
            params = _rollup_params(moment)
            cursor.execute(_READINGS_SQL.format(raw=_table(GpuSampleRaw)), params[1:])
            (readings,) = cursor.fetchone() or (0,)
            if readings:
                # Nearest-rank p95 of fewer than 20 readings is their maximum: rank only when
                # the minute has more readings (scrapes every 3 s or faster).
                ranked = readings >= 20
                cursor.execute(_gpu_minute_sql(ranked=ranked), params)
                cursor.execute(_pod_minute_sql(ranked=ranked), params)
            minutes += 1
            moment += timedelta(minutes=1)
    return minutes


_READINGS_SQL = (
    "SELECT COUNT(DISTINCT observed_at) FROM {raw} WHERE observed_at >= %s AND observed_at < %s"
)


def _rollup_params(minute: datetime) -> list[Any]:
    adapt = connection.ops.adapt_datetimefield_value
    return [adapt(minute), adapt(minute), adapt(minute + timedelta(minutes=1))]


def _table(model: type[GpuMinute] | type[PodMinute] | type[GpuSampleRaw]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# Nearest-rank p95 of n values: the smallest value whose rank r (1-based, ascending) has
# r >= 0.95 n. _P95 picks it from rows ranked by ROW_NUMBER() (`rank`) with their count (`n`).
_P95 = "MIN(CASE WHEN {rank} * 100 >= {n} * 95 THEN {value} END)"


def _gpu_minute_sql(*, ranked: bool) -> str:
    """GpuMinute rows of one minute from the GPUs' primary raw rows."""
    readings = f"""
        SELECT node, gpu_index, mig_instance, busy, fb_used_mib, power_w
        FROM {_table(GpuSampleRaw)}
        WHERE observed_at >= %s AND observed_at < %s AND {connection.ops.quote_name("primary")}
    """
    if ranked:
        readings = f"""
            SELECT node, gpu_index, mig_instance, busy, fb_used_mib, power_w,
                ROW_NUMBER() OVER (
                    PARTITION BY node, gpu_index, mig_instance, busy IS NULL ORDER BY busy
                ) AS busy_rank,
                COUNT(busy) OVER (PARTITION BY node, gpu_index, mig_instance) AS busy_count
            FROM ({readings}) AS readings
        """
        p95 = _P95.format(rank="busy_rank", n="busy_count", value="busy")
    else:
        p95 = "MAX(busy)"
    return f"""
        INSERT INTO {_table(GpuMinute)} (minute, node, gpu_index, mig_instance, samples,
            busy_avg, busy_max, busy_p95, fb_used_avg, fb_used_max, power_avg)
        SELECT %s, node, gpu_index, mig_instance, COUNT(*), AVG(busy), MAX(busy), {p95},
            AVG(fb_used_mib), MAX(fb_used_mib), AVG(power_w)
        FROM ({readings}) AS minute_readings
        GROUP BY node, gpu_index, mig_instance
        ON CONFLICT (minute, node, gpu_index, mig_instance) DO UPDATE SET
            samples = excluded.samples, busy_avg = excluded.busy_avg,
            busy_max = excluded.busy_max, busy_p95 = excluded.busy_p95,
            fb_used_avg = excluded.fb_used_avg, fb_used_max = excluded.fb_used_max,
            power_avg = excluded.power_avg
    """


def _pod_minute_sql(*, ranked: bool) -> str:
    """PodMinute rows of one minute: per reading, a pod's GPUs, the GPUs it kept busy (the sum
    of their busy) and its framebuffer; then per minute, avg / max / p95 of those."""
    readings = f"""
        SELECT observed_at, namespace, pod, COUNT(*) AS gpus,
            COALESCE(SUM(busy), 0) AS used, COALESCE(SUM(fb_used_mib), 0) AS fb_used
        FROM {_table(GpuSampleRaw)}
        WHERE observed_at >= %s AND observed_at < %s AND pod <> ''
        GROUP BY observed_at, namespace, pod
    """
    if ranked:
        readings = f"""
            SELECT namespace, pod, gpus, used, fb_used,
                ROW_NUMBER() OVER (PARTITION BY namespace, pod ORDER BY used) AS used_rank,
                COUNT(*) OVER (PARTITION BY namespace, pod) AS used_count
            FROM ({readings}) AS readings
        """
        p95 = _P95.format(rank="used_rank", n="used_count", value="used")
    else:
        p95 = "MAX(used)"
    return f"""
        INSERT INTO {_table(PodMinute)} (minute, namespace, pod, samples, gpus_avg, used_avg,
            used_max, used_p95, fb_used_avg, fb_used_max)
        SELECT %s, namespace, pod, COUNT(*), AVG(gpus), AVG(used), MAX(used), {p95},
            AVG(fb_used), MAX(fb_used)
        FROM ({readings}) AS minute_readings
        GROUP BY namespace, pod
        ON CONFLICT (minute, namespace, pod) DO UPDATE SET
            samples = excluded.samples, gpus_avg = excluded.gpus_avg,
            used_avg = excluded.used_avg, used_max = excluded.used_max,
            used_p95 = excluded.used_p95, fb_used_avg = excluded.fb_used_avg,
            fb_used_max = excluded.fb_used_max
    """


@dataclass(frozen=True)
class PruneResult:
    raw: int
    gpu_minutes: int
    pod_minutes: int
    gpus: int
    nodes: int


def telemetry_prune(*, now: datetime | None = None) -> PruneResult:
    """Delete what is past its retention (see telemetry.conf)."""
    now = now or timezone.now()
    raw_cutoff = now - conf.raw_retention()
    gone_cutoff = now - conf.gpu_retention()
    with transaction.atomic():
        raw, _ = GpuSampleRaw.objects.filter(observed_at__lt=raw_cutoff).delete()
        gpu_minutes, _ = GpuMinute.objects.filter(
            minute__lt=now - conf.gpu_minute_retention()
        ).delete()
        pod_minutes, _ = PodMinute.objects.filter(
            minute__lt=now - conf.pod_minute_retention()
        ).delete()
        gpus, _ = GpuLatest.objects.filter(sampled_at__lt=gone_cutoff).delete()
        nodes, _ = NodeTelemetry.objects.filter(last_sample_at__lt=gone_cutoff).delete()
    return PruneResult(raw, gpu_minutes, pod_minutes, gpus, nodes)


def source_status_record(
    *,
    name: str,
    now: datetime | None = None,
    error: str | None = None,
    gpus: int = 0,
    warning: str = "",
) -> SourceStatus:
    """Record one attempt of a source: a success (error None, with what it left out, if
    anything) or a failure with its error."""
    now = now or timezone.now()
    with transaction.atomic():
        status, _ = SourceStatus.objects.select_for_update().get_or_create(name=name)
        status.last_attempt_at = now
        if error is None:
            status.last_success_at = now
            status.consecutive_failures = 0
            status.last_gpus = gpus
            status.last_warning = warning[:2000]
        else:
            status.consecutive_failures = F("consecutive_failures") + 1
            status.failures_total = F("failures_total") + 1
            status.last_error = error[:2000]
        status.save()
        status.refresh_from_db()
    return status
