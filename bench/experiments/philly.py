"""The Philly trace of the fair-share experiment (the Pollux digest of Microsoft's Philly jobs)
and the queues each policy puts it in, as Kueue's objects."""

from __future__ import annotations

import csv
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduling.core.queueing.config import ClusterQueue, QueueingStrategy, ReclaimWithinCohort
from scheduling.core.queueing.kueue_fields import DEFAULT_RUNTIME_ANNOTATION
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.queueing.resources import GPU

FLAVOR = "p100"
POLICIES = ("fifo", "gpusched", "gpusched-no-reclaim")


@dataclass(frozen=True, slots=True)
class Job:
    key: str
    tenant: str
    arrival_s: float
    duration_s: float
    gpus: int
    pods: int
    per_pod: int
    utilization: float


@dataclass(frozen=True)
class Trace:
    jobs: tuple[Job, ...]
    shares: dict[str, float]  # tenant -> share of the whole trace's GPU time
    start: datetime
    days: float
    # Jobs submitted before the window that had finished by its start (submission + run time):
    # the history a running cluster has learnt run times from.
    history: tuple[Job, ...] = ()


def load_trace(
    path: Path,
    *,
    start: datetime | None = None,
    days: float = 14.0,
    max_gpus_per_pod: int = 8,
    seed: int = 1,
    max_duration_s: float | None = None,
) -> Trace:
    """The jobs submitted in [start, start + days) (default: the first Monday with a full week of
    jobs, 2017-10-02), those that had finished before `start` (the history), and every tenant's
    share of the whole trace's GPU time."""
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("timestamp")]
    gpu_time: dict[str, float] = defaultdict(float)
    for row in rows:
        gpu_time[row["cluster"]] += float(row["gpu_time"])
    total = sum(gpu_time.values()) or 1.0
    shares = {tenant: t / total for tenant, t in gpu_time.items()}
    start = start or datetime(2017, 10, 2, tzinfo=UTC)
    end = start + timedelta(days=days)
    rng = random.Random(seed)
    usage = {tenant: rng.uniform(0.15, 0.9) for tenant in sorted(shares)}
    jobs = []
    history = []
    for k, row in enumerate(sorted(rows, key=lambda r: (r["timestamp"], r["cluster"]))):
        at = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        if at >= end:
            continue
        gpus = max(1, int(row["num_gpus"]))
        pods = math.ceil(gpus / max_gpus_per_pod)
        duration = max(60.0, float(row["duration"]))
        if max_duration_s is not None:
            duration = min(duration, max_duration_s)
        job = Job(
            key=f"job-{k:06d}",
            tenant=row["cluster"],
            arrival_s=(at - start).total_seconds(),
            duration_s=duration,
            gpus=gpus,
            pods=pods,
            per_pod=math.ceil(gpus / pods),
            utilization=usage[row["cluster"]],
        )
        if at >= start:
            jobs.append(job)
        elif job.arrival_s + job.duration_s <= 0:
            history.append(job)
    return Trace(tuple(jobs), shares, start, days, tuple(history))


def nominal_quotas(shares: dict[str, float], capacity_gpus: int) -> dict[str, int]:
    """Whole GPUs proportional to the shares, summing to the capacity (largest remainder)."""
    total = sum(shares.values()) or 1.0
    exact = {t: capacity_gpus * s / total for t, s in shares.items()}
    quotas = {t: math.floor(v) for t, v in exact.items()}
    left = capacity_gpus - sum(quotas.values())
    for tenant in sorted(exact, key=lambda t: (-(exact[t] - quotas[t]), t))[:left]:
        quotas[tenant] += 1
    return quotas


def queue_documents(
    policy: str, shares: dict[str, float], capacity_gpus: int, history: Sequence[Job] = ()
) -> list[dict[str, Any]]:
    """The policy's queues as Kueue's objects (v1beta2), as an admin would apply them: one
    ResourceFlavor, the ClusterQueues, and each tenant's LocalQueue `default` in its namespace.
    Given the jobs that finished before (`history`), each ClusterQueue's default run time
    (gpusched.io/default-runtime, what estimated starts assume until its work has finished) is
    the median run time of its tenants' jobs there (of every job, for a queue whose tenants ran
    none), as an admin would set it from the weeks before."""
    if policy == "fifo":
        quotas, cohort, reclaim = {"all": capacity_gpus}, "", ReclaimWithinCohort.NEVER
        queue_of = dict.fromkeys(shares, "all")
    elif policy in POLICIES:
        quotas, cohort = nominal_quotas(shares, capacity_gpus), "philly"
        reclaim = (
            ReclaimWithinCohort.NEVER
            if policy == "gpusched-no-reclaim"
            else ReclaimWithinCohort.ANY
        )
        queue_of = {t: t for t in shares}
    else:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    docs: list[dict[str, Any]] = [{"kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}]
    for name in sorted(quotas):
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "queueingStrategy": QueueingStrategy.BEST_EFFORT_FIFO.value,
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": quotas[name]}]}
                    ],
                }
            ],
            "preemption": {"reclaimWithinCohort": reclaim.value},
        }
        if cohort:
            spec["cohortName"] = cohort
        metadata: dict[str, Any] = {"name": name}
        durations = [j.duration_s for j in history if queue_of.get(j.tenant) == name] or [
            j.duration_s for j in history
        ]
        if durations:
            typical = round(statistics.median(durations))
            metadata["annotations"] = {DEFAULT_RUNTIME_ANNOTATION: f"{typical}s"}
        docs.append({"kind": "ClusterQueue", "metadata": metadata, "spec": spec})
    docs.extend(
        {
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": tenant},
            "spec": {"clusterQueue": queue_of[tenant]},
        }
        for tenant in sorted(shares)
    )
    return docs


def queues_for(
    policy: str, shares: dict[str, float], capacity_gpus: int
) -> tuple[list[ClusterQueue], dict[str, str]]:
    """The cluster queues of a policy, and each tenant's cluster queue: its Kueue objects read
    by the same parser as `applyqueues`."""
    config = parse_documents(queue_documents(policy, shares, capacity_gpus))
    return list(config.cluster_queues), {q.namespace: q.cluster_queue for q in config.local_queues}
