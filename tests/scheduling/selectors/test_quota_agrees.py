"""Property: for random queue setups (two ClusterQueues in one cohort, two flavors, tenants feeding
any of them, admitted workloads holding random amounts, some borrowing), the quota figures the
Tenants page shows equal the REST API's /quota for each tenant, and both equal a recomputation
from the raw rows written here: nominal summed over the tenant's ClusterQueues, used by its
admitted workloads, a queue's total and what it borrows beyond its nominal quota."""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.services import token_create
from dashboard.selectors import tenants as tenant_docs
from scheduling.models import ClusterQueue, LocalQueue, ResourceFlavor, Tenant, Workload
from scheduling.selectors.quota import cluster_quota
from tests.api.conftest import client_for
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db]

GPU = "nvidia.com/gpu"
QUEUES = ("cq0", "cq1")
FLAVORS = ("f0", "f1")
TENANTS = ("t0", "t1", "t2")

setups = st.tuples(
    # Nominal GPUs per (queue, flavor).
    st.lists(st.integers(0, 8), min_size=4, max_size=4),
    # Which queues each tenant's LocalQueues point at.
    st.lists(st.sets(st.sampled_from(QUEUES)), min_size=3, max_size=3),
    # Workloads: (tenant, queue, flavor, milli-GPU held, admitted or pending).
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from(QUEUES),
            st.sampled_from(FLAVORS),
            st.sampled_from([250, 1000, 2000, 4000]),
            st.booleans(),
        ),
        max_size=8,
    ),
)


def write(setup) -> None:
    nominal, feeds, workloads = setup
    for flavor in FLAVORS:
        ResourceFlavor.objects.get_or_create(name=flavor)
    for i, queue in enumerate(QUEUES):
        ClusterQueue.objects.create(
            name=queue,
            cohort="shared",
            resource_groups=[
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {
                                    "name": GPU,
                                    "nominalQuota": nominal[2 * i + j] * 1000,
                                    "borrowingLimit": None,
                                    "lendingLimit": None,
                                }
                            ],
                        }
                        for j, flavor in enumerate(FLAVORS)
                    ],
                }
            ],
        )
    for name, queues in zip(TENANTS, feeds, strict=True):
        tenant = factories.tenant(name)
        for queue in queues:
            LocalQueue.objects.create(
                namespace=tenant.namespace,
                name=f"lq-{queue}",
                cluster_queue=ClusterQueue.objects.get(name=queue),
            )
    for k, (owner, queue, flavor, milli, admitted) in enumerate(workloads):
        tenant = Tenant.objects.get(name=TENANTS[owner])
        w = factories.workload(tenant, f"w{k}", gpus=1)
        if admitted and queue in feeds[owner]:
            Workload.objects.filter(pk=w.pk).update(
                state=Workload.State.ADMITTED,
                queue_name=f"lq-{queue}",
                cluster_queue=ClusterQueue.objects.get(name=queue),
                quota_usage={f"{flavor}|{GPU}": milli},
            )


def recompute(setup):
    """Per tenant: nominal and used milli-GPU over its queues; per (queue, flavor): total held."""
    nominal, feeds, workloads = setup
    total: dict[tuple[str, str], int] = defaultdict(int)
    used: dict[str, int] = defaultdict(int)
    for owner, queue, flavor, milli, admitted in workloads:
        if admitted and queue in feeds[owner]:
            total[(queue, flavor)] += milli
            used[TENANTS[owner]] += milli
    nominal_of = {
        (queue, flavor): nominal[2 * i + j] * 1000
        for i, queue in enumerate(QUEUES)
        for j, flavor in enumerate(FLAVORS)
    }
    hard = {
        name: sum(nominal_of[(q, f)] for q in queues for f in FLAVORS)
        for name, queues in zip(TENANTS, feeds, strict=True)
    }
    return nominal_of, total, used, hard


def gpus(text: str) -> float:
    return float(text)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(setup=setups)
def test_the_page_and_the_api_show_the_recomputed_quota(setup) -> None:
    Workload.objects.all().delete()
    LocalQueue.objects.all().delete()
    ClusterQueue.objects.all().delete()
    write(setup)
    nominal_of, total, used, hard = recompute(setup)
    _, feeds, _ = setup
    read = cluster_quota()
    for queue in QUEUES:
        for r in read[queue].resources:
            fr = (queue, r.flavor)
            assert r.nominal == nominal_of[fr]
            assert r.used == total[fr] == sum(r.used_by.values())
            assert r.borrowed == max(0, total[fr] - nominal_of[fr])
    page = tenant_docs.tenants()
    for name, queues in zip(TENANTS, feeds, strict=True):
        tenant = Tenant.objects.get(name=name)
        _, token = token_create(tenant=tenant, name=f"n{uuid.uuid4().hex[:8]}")
        doc = client_for(token).get("/api/v1/quota").json()
        shown = page[name]["quota"]
        if not queues:  # no LocalQueue: no quota on either side
            assert shown is None and doc["hard"] == {} and doc["clusterQueues"] == []
            continue
        assert gpus(doc["hard"][GPU]) == pytest.approx(hard[name] / 1000)
        assert shown["gpus"] == pytest.approx(gpus(doc["hard"][GPU]))
        assert shown["cluster_queues"] == [cq["name"] for cq in doc["clusterQueues"]]
        assert gpus(doc["used"][GPU]) == pytest.approx(used[name] / 1000)
        for cq in doc["clusterQueues"]:
            for flavor in cq["flavors"]:
                (resource,) = flavor["resources"]
                fr = (cq["name"], flavor["name"])
                assert gpus(resource["nominalQuota"]) == pytest.approx(nominal_of[fr] / 1000)
                assert gpus(resource["total"]) == pytest.approx(total[fr] / 1000)
