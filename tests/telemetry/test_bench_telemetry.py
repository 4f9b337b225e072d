"""bench_telemetry runs end to end on a small cluster (the real numbers: docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from telemetry import services
from telemetry.models import GpuLatest, GpuMinute, PodMinute
from tests.telemetry.factories import T0, sample

pytestmark = pytest.mark.django_db


def test_a_small_run_reports_and_cleans_up() -> None:
    out = StringIO()
    call_command(
        "bench_telemetry", "--nodes", "3", "--gpus", "2", "--repeat", "2", "--json", stdout=out
    )
    result = json.loads(out.getvalue())
    assert result["lines"] == 3 * 2 * 10 + 2 * 10  # samples + HELP/TYPE per field
    assert result["samples"] == result["mapped"] == 60
    assert result["gpus"] == 6 and result["minutes_rolled"] == 1
    assert len(result["runs_total_s"]) == 2
    assert result["total_s"] >= result["parse_s"] > 0
    assert not GpuLatest.objects.exists() and not GpuMinute.objects.exists()
    assert not PodMinute.objects.exists()


def test_keep_leaves_the_rows() -> None:
    call_command(
        "bench_telemetry",
        "--nodes",
        "2",
        "--gpus",
        "1",
        "--repeat",
        "1",
        "--keep",
        stdout=StringIO(),
    )
    assert GpuLatest.objects.count() == 2


def test_refuses_a_database_with_real_telemetry() -> None:
    services.samples_ingest(gpus=[sample()], observed_at=T0, source="scrape")
    with pytest.raises(CommandError, match="empty telemetry database"):
        call_command("bench_telemetry", "--nodes", "1", stdout=StringIO())


def test_an_unmigrated_database_is_refused_with_the_advice_to_migrate(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}"}
    done = subprocess.run(
        [sys.executable, "manage.py", "bench_telemetry", "--nodes", "1", "--json"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "not migrated" in done.stderr and "manage.py migrate" in done.stderr
    assert "Traceback" not in done.stderr
