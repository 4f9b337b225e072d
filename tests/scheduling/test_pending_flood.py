"""One tenant flooding the API with pending pods (issue 33's done-when: 20 submits of 5,000 pods
took the scheduler to 3.0 GB and another tenant's time to bind from 0.6 s to 45 s): the submits past
the tenant's pending bound are refused, a real `runscheduler` holds what it admits (under 1 GiB at
its peak), and another tenant's pod is bound within 20 s."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from scheduling.models import Pod
from tests.api.conftest import onboard, submit
from tests.scheduling import factories
from tests.scheduling.test_runscheduler_processes import start_scheduler, stop, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.slow]

GIB = 1 << 30


def body(name: str, count: int) -> dict[str, Any]:
    """`count` pods of one GPU each, in pod sets of at most 1,000 (the API's bound)."""
    template = {"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}
    sizes = [min(1000, count - k) for k in range(0, count, 1000)]
    return {
        "name": name,
        "queueName": name.split("-")[0],
        "serviceClass": "batch",
        "podSets": [
            {"name": f"set-{k}", "count": size, "template": template}
            for k, size in enumerate(sizes)
        ],
    }


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_tenant_flooding_pending_pods_neither_grows_the_scheduler_nor_delays_another() -> None:
    factories.nodes(4)
    flood = onboard("flood", quota={"nvidia.com/gpu": "8"})
    other = onboard("other", quota={"nvidia.com/gpu": "8"})
    answers = [submit(flood, body(f"flood-{k}", 5000)).status_code for k in range(20)]
    assert answers == [201] * 2 + [403] * 18  # 10,000 pending pods per LocalQueue at most
    scheduler = start_scheduler()
    try:
        # The flood is over quota: its first workload waits for quota, whatever the cycles read.
        wait_until(lambda: Pod.objects.filter(workload__name="flood-0").exists(), 10)
        started = time.monotonic()
        assert submit(other, body("other-0", 1)).status_code == 201
        wait_until(
            lambda: Pod.objects.filter(workload__name="other-0", phase=Pod.Phase.BOUND).exists(),
            20,
        )
        took = time.monotonic() - started
        rss = peak_rss(scheduler.pid)
    finally:
        stop(scheduler)
    assert took <= 20, took
    assert rss < GIB, rss
    assert not Pod.objects.filter(workload__tenant=flood.tenant, phase=Pod.Phase.BOUND).exists()
