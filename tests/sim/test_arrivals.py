from collections import Counter

import pytest

from sim.arrivals import GeneratedArrivals, PhillyArrivals
from sim.spec import PhillySpec, load_spec


def test_generated_arrivals_are_reproducible_and_come_once() -> None:
    tenants = load_spec("demo").tenants
    first, second = GeneratedArrivals(tenants, seed=3), GeneratedArrivals(tenants, seed=3)
    assert first.due(7200) == second.due(7200)
    assert first.due(7200) == []  # nothing twice
    assert all(a.at_s > 7200 for a in first.due(9000))


def test_each_tenant_arrives_at_its_rate() -> None:
    tenants = load_spec("demo").tenants
    hours = 200
    counts = Counter(a.tenant for a in GeneratedArrivals(tenants, seed=1).due(hours * 3600))
    for tenant in tenants:
        assert counts[tenant.name] == pytest.approx(tenant.arrivals_per_hour * hours, rel=0.1)


def test_over_requesting_tenant_uses_a_fraction_of_its_request() -> None:
    tenants = load_spec("demo").tenants
    nlp = [a for a in GeneratedArrivals(tenants, seed=1).due(100 * 3600) if a.tenant == "nlp"]
    assert all(a.shape.resources.gpus >= 4 for a in nlp)
    assert sum(a.utilization.mean for a in nlp) / len(nlp) == pytest.approx(0.2, abs=0.03)


def test_philly_jobs_arrive_in_order_with_tenants_and_gangs() -> None:
    spec = load_spec("philly").philly
    if spec is None or not spec.path.is_file():
        pytest.skip("the Philly digest is not beside this checkout")
    stream = PhillyArrivals(PhillySpec(spec.path), seed=1)
    first_day = stream.due(86_400)
    assert first_day and first_day[0].at_s == 0.0
    assert [a.at_s for a in first_day] == sorted(a.at_s for a in first_day)
    everything = first_day + stream.due(10**9)
    assert len(everything) == 82_247
    assert len({a.tenant for a in everything}) == 15
    big = [a for a in everything if a.shape.pods > 1]
    assert big and all(a.gang and a.shape.resources.gpus <= 8 for a in big)
