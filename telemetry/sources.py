"""Where GPU samples come from: thin adapters behind one method, `fetch() -> Fetched`.

    PrometheusSource  PromQL through prometheus-api-client's PrometheusConnect (/api/v1/query):
                      one instant query for all DCGM fields; quantile_over_time() for p95 over a
                      window.
    ScrapeSource      GET each dcgm-exporter `/metrics` directly (the embedded default).

Bounded, however a server frames or paces its answer (issue 33):
- time: one deadline, `timeout` from the start of a fetch, over every request of it (connect,
  headers, the whole body with or without Content-Length, however slowly dripped): a watchdog
  shuts the socket at the deadline (telemetry.bounded_http: PrometheusConnect is handed a
  requests Session that enforces it). Nothing is retried within a cycle (the next cycle is the
  retry: Prometheus clients that retry with back-off turn one refused connection into seconds of
  sleeps, wire-formats.md §2), and a target that did not start by the deadline is not started.
- size: `max_bytes` of body per request; `limits.max_series` sample lines per source (the lines
  beyond are not parsed: a scrape's memory and time are bounded by the cap, not by the
  exporter), `limits.max_nodes` nodes per source (telemetry.dcgm.Attribution). What a cap leaves
  out is counted by reason in the parse and mapping stats, and named in Fetched.capped.
A source raises when it gets nothing at all; partial failures (one exporter of many) come back
in `Fetched.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect

from telemetry.batch import GpuBatch
from telemetry.bounded_http import TIMED_OUT, BoundedSession, http_get
from telemetry.dcgm import FIELDS, GpuKey, MapStats, busy_ratio
from telemetry.mapping import gpu_samples, gpu_samples_from_scrape
from telemetry.parsing import SERIES_CAP, ParseStats, parse_scrape, samples_from_vector
from telemetry.placement import NODE_CAP, Attribution


class SourceError(Exception):
    """The source gave nothing this cycle (unreachable, timed out, refused the query)."""


@dataclass(frozen=True)
class Limits:
    """Per source (telemetry.conf: TELEMETRY_MAX_SERIES_PER_SOURCE, ..._NODES_PER_SOURCE)."""

    max_series: int = 500_000  # 5,000 nodes x 8 GPUs x 10 fields is 400,000
    max_nodes: int = 10_000


@dataclass
class Fetched:
    gpus: GpuBatch
    parse: ParseStats = field(default_factory=ParseStats)
    mapping: MapStats = field(default_factory=MapStats)
    errors: list[str] = field(default_factory=list)  # partial failures, e.g. one target down

    @property
    def capped(self) -> list[str]:
        """What the source's caps left out, in words (empty when nothing)."""
        out = []
        if lines := self.parse.skipped_reasons.get(SERIES_CAP):
            out.append(f"{lines} exposition lines past the series cap")
        if samples := self.mapping.skipped.get(NODE_CAP):
            out.append(f"{samples} samples of nodes past the node cap")
        return out


class TelemetrySource(Protocol):
    name: str

    def fetch(self, known_nodes: frozenset[str] | None = None) -> Fetched:
        """`known_nodes`: the cluster's nodes, the only ones series may be placed on (None: not
        checked; telemetry.placement)."""
        ...


# --- direct scrape -----------------------------------------------------------------------------


class ScrapeSource:
    """GET dcgm-exporter `/metrics` URLs (concurrently), parse and map them."""

    name = "scrape"

    def __init__(
        self,
        targets: Sequence[str],
        *,
        timeout: float = 2.0,
        max_workers: int = 16,
        max_bytes: int = 256 * 1024 * 1024,
        limits: Limits | None = None,
    ) -> None:
        if not targets:
            raise ValueError("ScrapeSource needs at least one target URL")
        self.targets = list(targets)
        self.timeout = timeout
        self.max_workers = max_workers
        self.max_bytes = max_bytes  # exporters are reached directly, never through a proxy
        self.limits = limits or Limits()

    def fetch(self, known_nodes: frozenset[str] | None = None) -> Fetched:
        deadline = time.monotonic() + self.timeout
        workers = min(self.max_workers, len(self.targets))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape") as pool:
            bodies = list(pool.map(lambda url: self._get(url, deadline), self.targets))
        fetched = Fetched(gpus=GpuBatch())
        attribution = Attribution(known=known_nodes, max_nodes=self.limits.max_nodes)
        series_left = self.limits.max_series
        for url, (body, error) in zip(self.targets, bodies, strict=True):
            if error is not None:
                fetched.errors.append(f"{url}: {error}")
                continue
            scrape = parse_scrape(body, max_series=series_left)
            series_left = max(series_left - scrape.stats.samples, 0)
            node = urlsplit(url).hostname or ""  # for exporters that do not name their node
            gpus, mapping = gpu_samples_from_scrape(
                scrape, default_node=node, attribution=attribution
            )
            fetched.gpus.extend(gpus)
            fetched.parse.merge(scrape.stats)
            fetched.mapping.merge(mapping)
        if len(fetched.errors) == len(self.targets):
            raise SourceError("; ".join(fetched.errors))
        return fetched

    def _get(self, url: str, deadline: float) -> tuple[str, str | None]:
        body, error = http_get(
            url, deadline=deadline, max_bytes=self.max_bytes, accept="text/plain"
        )
        if error == TIMED_OUT:
            error = f"{TIMED_OUT} after {self.timeout:g} s"
        return body.decode("utf-8", errors="replace"), error


# --- Prometheus ---------------------------------------------------------------------------------


class PrometheusSource:
    """DCGM fields from a Prometheus-compatible query API (Prometheus, Thanos, Mimir)."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 2.0,
        matchers: str = "",
        max_bytes: int = 256 * 1024 * 1024,
        limits: Limits | None = None,
    ) -> None:
        """`matchers` narrows every selector, e.g. `job="gpu-metrics"`."""
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.matchers = matchers
        self.limits = limits or Limits()
        # PrometheusConnect's own session would retry with back-off and bound each socket wait,
        # not the query: this one ends every request by `timeout` and caps its body.
        self.client = PrometheusConnect(
            url=self.url,
            session=BoundedSession(timeout=timeout, max_bytes=max_bytes),
            timeout=timeout,
        )

    def fields_query(self) -> str:
        names = "|".join(FIELDS)
        extra = f",{self.matchers}" if self.matchers else ""
        return f'{{__name__=~"{names}"{extra}}}'

    def fetch(self, known_nodes: frozenset[str] | None = None) -> Fetched:
        """The current value of every DCGM field of every GPU, in one query.

        An instant query stamps each value with the evaluation time, not the scrape time, so
        the values' age starts at this fetch, as for a direct scrape. Series of an exporter
        that stopped answering are marked stale by Prometheus and drop out of the result.
        """
        fetched = self._fetch(self.fields_query(), known_nodes=known_nodes)
        fetched.gpus.forget_timestamps()
        return fetched

    def fetch_quantile(self, metric: str, *, window: str = "1h", q: float = 0.95) -> Fetched:
        """`quantile_over_time(q, metric[window])` per series, mapped like fetch() (so
        GPU_UTIL comes back as a ratio). The function drops `__name__`: the field is `metric`."""
        if metric not in FIELDS:
            raise ValueError(f"not a known DCGM field: {metric}")
        selector = f"{metric}{{{self.matchers}}}" if self.matchers else metric
        query = f"quantile_over_time({q:g}, {selector}[{window}])"
        return self._fetch(query, name=metric)

    def busy_quantile(self, *, window: str = "1h", q: float = 0.95) -> dict[GpuKey, float]:
        """p95 (by default) busy ratio per GPU over `window`: PROF_GR_ENGINE_ACTIVE where the
        GPU reports it, else GPU_UTIL/100."""
        result: dict[GpuKey, float] = {}
        for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
            for gpu in self.fetch_quantile(metric, window=window, q=q).gpus:
                busy = busy_ratio(gpu.values)
                if busy is not None:
                    result[gpu.key] = busy  # the PROF field, queried second, wins
        return result

    def _fetch(
        self, query: str, *, name: str | None = None, known_nodes: frozenset[str] | None = None
    ) -> Fetched:
        result = self._query(query)
        cap = self.limits.max_series
        samples, stats = samples_from_vector(result[:cap], name=name)
        if len(result) > cap:
            beyond = len(result) - cap
            stats.skip(SERIES_CAP, f"{beyond} series past the first {cap}", beyond)
        attribution = Attribution(known=known_nodes, max_nodes=self.limits.max_nodes)
        gpus, mapping = gpu_samples(samples, attribution=attribution)
        return Fetched(gpus=gpus, parse=stats, mapping=mapping)

    def _query(self, query: str) -> list[dict[str, Any]]:
        # Prometheus stops evaluating, too (its durations take no fractions: milliseconds).
        params = {"timeout": f"{max(round(self.timeout * 1000), 1)}ms"}
        try:
            result = self.client.custom_query(query, params=params)
        except requests.Timeout as exc:
            raise SourceError(f"{self.url}: {TIMED_OUT} after {self.timeout:g} s") from exc
        except (requests.RequestException, PrometheusApiClientException) as exc:
            raise SourceError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        except (ValueError, KeyError, TypeError) as exc:  # a 200 that is not Prometheus' JSON
            raise SourceError(f"{self.url}: not a query answer: {exc!r}"[:400]) from exc
        if not isinstance(result, list) or not all(isinstance(item, dict) for item in result):
            raise SourceError(f"{self.url}: expected a vector result, got {str(result)[:100]}")
        return result
