"""Building blocks of the collectors that read the database at scrape time (each app's
`web_metrics.py`, registered by the web process in gpusched/web_metrics.py): a labelled gauge
family from a mapping, grouped counts with zeros for the expected keys, and the age of a moment."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily


def gauge(
    name: str, documentation: str, values: Mapping[str, float], label: str
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value_label, value in sorted(values.items()):
        family.add_metric([value_label], value)
    return family


def counts(rows: Iterable[tuple[str, int]], keys: Iterable[str]) -> dict[str, int]:
    """Grouped counts, with a zero for each expected key that has no row."""
    found = {str(key): 0 for key in keys}
    for key, n in rows:
        found[key] = found.get(key, 0) + n
    return found


def age(moment: datetime | None) -> float:
    """Seconds since `moment` (+Inf: never)."""
    if moment is None:
        return float("inf")
    return max((timezone.now() - moment).total_seconds(), 0.0)
