"""Where GPU samples come from: thin adapters behind one method, `fetch() -> Fetched`.

    PrometheusSource  PromQL through prometheus-api-client: one instant query for all DCGM
                      fields; quantile_over_time() for p95 over a window.
    ScrapeSource      GET each dcgm-exporter `/metrics` directly (the embedded default).

Both bound every call by `timeout` (for a scrape, wall-clock time from connect to the last byte)
and never retry within a cycle: the ingester's next cycle is
the retry. prometheus-api-client mounts `Retry(total=3, backoff_factor=1, ...)` by default, which
turns one refused connection into ~6 s of sleeps (wire-formats.md §2); here it gets
`Retry(total=0)`. A source raises when it gets nothing at all; partial failures (one exporter of
many) come back in `Fetched.errors`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from urllib3.util.retry import Retry

from telemetry.dcgm import (
    FIELDS,
    GpuKey,
    GpuSample,
    MapStats,
    busy_ratio,
    gpu_samples,
    gpu_samples_from_groups,
)
from telemetry.parsing import ParseStats, parse_grouped, samples_from_vector


class SourceError(Exception):
    """The source gave nothing this cycle (unreachable, timed out, refused the query)."""


@dataclass
class Fetched:
    gpus: list[GpuSample]
    parse: ParseStats = field(default_factory=ParseStats)
    mapping: MapStats = field(default_factory=MapStats)
    errors: list[str] = field(default_factory=list)  # partial failures, e.g. one target down


class TelemetrySource(Protocol):
    name: str

    def fetch(self) -> Fetched: ...


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
    ) -> None:
        if not targets:
            raise ValueError("ScrapeSource needs at least one target URL")
        self.targets = list(targets)
        self.timeout = timeout
        self.max_workers = max_workers
        self.max_bytes = max_bytes  # exporters are reached directly, never through a proxy

    def fetch(self) -> Fetched:
        workers = min(self.max_workers, len(self.targets))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape") as pool:
            bodies = list(pool.map(self._get, self.targets))
        fetched = Fetched(gpus=[])
        for url, (body, error) in zip(self.targets, bodies, strict=True):
            if error is not None:
                fetched.errors.append(f"{url}: {error}")
                continue
            groups, stats = parse_grouped(body)
            node = urlsplit(url).hostname or ""  # for exporters that do not name their node
            gpus, mapping = gpu_samples_from_groups(groups, default_node=node)
            fetched.gpus.extend(gpus)
            fetched.parse.merge(stats)
            fetched.mapping.merge(mapping)
        if len(fetched.errors) == len(self.targets):
            raise SourceError("; ".join(fetched.errors))
        return fetched

    def _get(self, url: str) -> tuple[str, str | None]:
        """The body of `url`, or the error, within `timeout` of wall-clock time in all: a
        watchdog shuts the connection down at the deadline, so neither a stalled connect, nor
        headers or a body dripped a byte at a time (each read well within any socket timeout)
        can hold the cycle longer."""
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        kind = http.client.HTTPSConnection if secure else http.client.HTTPConnection
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection = kind(parts.hostname or "", parts.port, timeout=self.timeout)
        expired = threading.Event()
        watchdog = threading.Timer(self.timeout, _shut_down, (connection, expired))
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request("GET", target, headers={"Accept": "text/plain"})
            response = connection.getresponse()
            if response.status != 200:
                return "", f"HTTP {response.status} {response.reason}"
            chunks: list[bytes] = []
            size = 0
            while chunk := response.read1(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes:
                    return "", f"response larger than {self.max_bytes} bytes"
        except Exception as exc:  # every failure of one target is that target's error
            if expired.is_set() or isinstance(exc, TimeoutError):
                return "", f"timed out after {self.timeout:g} s"
            return "", f"{type(exc).__name__}: {exc}"
        finally:
            watchdog.cancel()
            connection.close()
        if expired.is_set():  # cut off while reading: what came is only part of the body
            return "", f"timed out after {self.timeout:g} s"
        return b"".join(chunks).decode("utf-8", errors="replace"), None


def _shut_down(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    """At the deadline: unblock whatever the scrape thread is waiting for on this connection."""
    expired.set()
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


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
        client: Any = None,
    ) -> None:
        """`matchers` narrows every selector, e.g. `job="gpu-metrics"`; `client` replaces
        the PrometheusConnect (tests)."""
        self.url = url
        self.timeout = timeout
        self.matchers = matchers
        if client is None:
            from prometheus_api_client import PrometheusConnect

            client = PrometheusConnect(url=url, retry=Retry(total=0, redirect=0), timeout=timeout)
        self.client = client

    def fields_query(self) -> str:
        names = "|".join(FIELDS)
        extra = f",{self.matchers}" if self.matchers else ""
        return f'{{__name__=~"{names}"{extra}}}'

    def fetch(self) -> Fetched:
        """The current value of every DCGM field of every GPU, in one query.

        An instant query stamps each value with the evaluation time, not the scrape time, so
        the values' age starts at this fetch, as for a direct scrape. Series of an exporter
        that stopped answering are marked stale by Prometheus and drop out of the result.
        """
        result = self._query(self.fields_query())
        samples, stats = samples_from_vector(result)
        gpus, mapping = gpu_samples(samples)
        for gpu in gpus:
            gpu.timestamp = None
        return Fetched(gpus=gpus, parse=stats, mapping=mapping)

    def fetch_quantile(self, metric: str, *, window: str = "1h", q: float = 0.95) -> Fetched:
        """`quantile_over_time(q, metric[window])` per series, mapped like fetch() (so
        GPU_UTIL comes back as a ratio). The function drops `__name__`: the field is `metric`."""
        if metric not in FIELDS:
            raise ValueError(f"not a known DCGM field: {metric}")
        selector = f"{metric}{{{self.matchers}}}" if self.matchers else metric
        result = self._query(f"quantile_over_time({q:g}, {selector}[{window}])")
        samples, stats = samples_from_vector(result, name=metric)
        gpus, mapping = gpu_samples(samples)
        return Fetched(gpus=gpus, parse=stats, mapping=mapping)

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

    def _query(self, query: str) -> list[dict[str, Any]]:
        # Prometheus stops evaluating, too (its durations take no fractions: milliseconds).
        params = {"timeout": f"{max(round(self.timeout * 1000), 1)}ms"}
        try:
            result = self.client.custom_query(query, params=params)
        except Exception as exc:  # requests' errors, PrometheusApiClientException, bad JSON
            raise SourceError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, list):
            raise SourceError(f"{self.url}: expected a vector result, got {type(result).__name__}")
        return result
