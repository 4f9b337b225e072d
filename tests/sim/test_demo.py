"""`manage.py demo`, on either cluster side, as a user starts it: the dashboard answers, workloads
arrive, are admitted, placed and run; SIGTERM stops every role."""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768-60999 by default): a port the kernel
    handed out could be taken by a client connection's local end before the server binds it."""
    while True:
        port = random.randrange(20000, 32000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def placed_pods(database: Path) -> int:
    """Read the demo's SQLite file directly (its schema may not be there yet)."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as connection:
            (count,) = connection.execute(
                "SELECT COUNT(*) FROM scheduling_pod WHERE phase IN ('Bound', 'Running', "
                "'Succeeded')"
            ).fetchone()
    except sqlite3.Error:
        return 0
    return int(count)


def queues(database: Path) -> tuple[int, str | None]:
    """The ClusterQueues in the database, and where the Kubernetes side found them."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as connection:
        (count,) = connection.execute("SELECT COUNT(*) FROM scheduling_clusterqueue").fetchone()
        source = connection.execute("SELECT kind FROM scheduling_queuesource").fetchone()
    return int(count), source[0] if source else None


@pytest.mark.slow
@pytest.mark.parametrize("side", [[], ["--kubernetes"]], ids=["database", "kubernetes"])
def test_the_demo_places_and_runs_workloads_and_stops_cleanly(tmp_path: Path, side) -> None:
    database = tmp_path / "demo.sqlite3"
    web, metrics, kube = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "GPUSCHED_DEBUG": "1",
        "GPUSCHED_ADMIN_PASSWORD": "demo-test",
    }
    args = ["--port", str(web), "--metrics-port", str(metrics), "--kube-port", str(kube)]
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", *args, *side],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while placed_pods(database) == 0:
            assert demo.poll() is None, "the demo stopped"
            assert time.monotonic() < deadline, "nothing was placed"
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/healthz", timeout=5) as response:
            assert response.status == 200
        # The shipped queues (scheduling/queues/demo.yaml: four ClusterQueues) are there on
        # either side: on the Kubernetes side created in the simulated cluster and mirrored.
        assert queues(database) == (4, "cluster" if side else None)
    finally:
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 0
