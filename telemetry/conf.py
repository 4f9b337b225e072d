"""Telemetry settings, each overridable by a Django setting of the same name."""

from datetime import timedelta

from django.conf import settings

DEFAULTS = {
    # A GPU reading older than this is stale: LoadAware scores neutral, the node shows "stale".
    "TELEMETRY_FRESHNESS_SECONDS": 60.0,
    # How long every raw reading is kept (the 1-minute rollups are computed from them).
    "TELEMETRY_RAW_RETENTION_SECONDS": 15 * 60.0,
    # How long the 1-minute rollups are kept: a row per GPU (or pod) and minute, so 40,000 GPUs
    # make 57.6M GPU rows a day. Per pod they feed the over-request p95 over long windows.
    "TELEMETRY_GPU_MINUTE_RETENTION_SECONDS": 24 * 3600.0,
    "TELEMETRY_POD_MINUTE_RETENTION_SECONDS": 7 * 24 * 3600.0,
    # A GPU or node that has not reported for this long is forgotten.
    "TELEMETRY_GPU_RETENTION_SECONDS": 24 * 3600.0,
    # What one source (all its scrape targets together, or one Prometheus query) may bring in a
    # cycle: sample lines (series) read, and nodes placed. The design point, 5,000 nodes x 8 GPUs
    # x 10 fields, is 400,000 series; beyond the caps lines are not read and series are left
    # out, counted in the cycle report, /metrics and the dashboard's sources (issue 33).
    "TELEMETRY_MAX_SERIES_PER_SOURCE": 500_000,
    "TELEMETRY_MAX_NODES_PER_SOURCE": 10_000,
}


def count(name: str) -> int:
    return int(getattr(settings, name, DEFAULTS[name]))


def seconds(name: str) -> float:
    return float(getattr(settings, name, DEFAULTS[name]))


def freshness() -> timedelta:
    return timedelta(seconds=seconds("TELEMETRY_FRESHNESS_SECONDS"))


def raw_retention() -> timedelta:
    return timedelta(seconds=seconds("TELEMETRY_RAW_RETENTION_SECONDS"))


def gpu_minute_retention() -> timedelta:
    return timedelta(seconds=seconds("TELEMETRY_GPU_MINUTE_RETENTION_SECONDS"))


def pod_minute_retention() -> timedelta:
    return timedelta(seconds=seconds("TELEMETRY_POD_MINUTE_RETENTION_SECONDS"))


def gpu_retention() -> timedelta:
    return timedelta(seconds=seconds("TELEMETRY_GPU_RETENTION_SECONDS"))
