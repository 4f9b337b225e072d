"""`manage.py bench_worker`, run as a user runs it (its own throwaway database, SQLite here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_worker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'bench.sqlite3'}"}
    return subprocess.run(
        [sys.executable, "manage.py", "bench_worker", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_kubernetes_side_binds_every_pod_from_the_binding_process(tmp_path: Path) -> None:
    done = bench_worker(tmp_path, "--side", "kubernetes", "--nodes", "20", "--pods", "120")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["bound"], report["waiting"]) == (120, 0)
    # The binding process's CPU is counted in the scheduler's.
    assert 0 < report["binding_cpu_ms_per_pod"] < report["cpu_ms_per_pod"]


def test_the_database_side_takes_as_many_workloads_as_pods_when_told(tmp_path: Path) -> None:
    done = bench_worker(tmp_path, "--nodes", "20", "--pods", "120", "--pods-per-workload", "1")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["pods_per_workload"], report["bound"]) == (1, 120)


def test_a_workload_of_no_pods_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    done = bench_worker(tmp_path, "--pods-per-workload", "0")
    assert done.returncode == 1
    assert "--pods-per-workload must be at least 1" in done.stderr
    assert not (tmp_path / "bench.sqlite3").exists()
