import json

import pytest
from django.core.management import call_command

from bench.scheduler import run
from scheduling.profile_files import load_profile


def test_small_run_places_everything_in_the_best_scope() -> None:
    result = run(load_profile("topology"), nodes=40, pods=150, topology="mixed")
    assert result.placed + result.unschedulable == 150
    assert result.placed == 150
    assert result.multi_gpu_placed > 0
    assert result.best_scope_ratio == 1.0


def test_command_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    call_command(
        "bench_scheduler", "--nodes", "20", "--pods", "50", "--profile", "topology", "--json"
    )
    report = json.loads(capsys.readouterr().out)
    for key in ("pods_per_s", "p50_ms", "p99_ms", "placed", "unschedulable", "best_scope_ratio"):
        assert key in report
