"""Two demos on one machine, as a user runs them: the second moved by the documented variables
(README.md) works beside the first; a demo whose port is taken or whose database another demo
holds refuses in one line and a non-zero exit; `kill -9` of a demo frees all its ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.sim.test_demo import ROOT, free_port, placed_pods


def start_demo(database: Path, ports: dict[str, int]) -> subprocess.Popen[bytes]:
    """`manage.py demo` on `database` with `ports`; its errors in `database`.log, its output in
    `database`.out (a pipe left unread would stall it)."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "GPUSCHED_ADMIN_PASSWORD": "demo-test",
        **{variable: str(port) for variable, port in ports.items()},
    }
    env.pop("GPUSCHED_DEBUG", None)  # `manage.py demo` sets what it needs on its own
    # The child keeps its own copies of the files.
    with log_of(database).open("wb") as log, database.with_suffix(".out").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "demo"], cwd=ROOT, env=env, stdout=out, stderr=log
        )


def log_of(database: Path) -> Path:
    return database.with_suffix(".log")


def exit_error(demo: subprocess.Popen[bytes], database: Path) -> str:
    """The demo's exit status and the last line of what it printed."""
    demo.wait(timeout=60)
    assert demo.returncode != 0
    return log_of(database).read_text().strip().splitlines()[-1]


def demo_ports() -> dict[str, int]:
    return {"GPUSCHED_PORT": free_port(), "GPUSCHED_DCGM_PORT": free_port()}


def wait_until_ready_and_placed(demo: subprocess.Popen[bytes], database: Path) -> None:
    """Until the demo printed its address (the web answers from then on) and placed a pod."""
    deadline = time.monotonic() + 300  # two demos of five processes each on a loaded machine
    announced = database.with_suffix(".out")
    while "gpusched demo: http://" not in announced.read_text() or placed_pods(database) == 0:
        assert demo.poll() is None, log_of(database).read_text()
        assert time.monotonic() < deadline, "no address printed or nothing placed"
        time.sleep(0.5)


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_two_demos_run_side_by_side_and_a_killed_one_frees_its_ports(tmp_path: Path) -> None:
    first_ports, second_ports = demo_ports(), demo_ports()
    first = start_demo(tmp_path / "first.sqlite3", first_ports)
    second = start_demo(tmp_path / "second.sqlite3", second_ports)
    try:
        for demo, database, ports in (
            (first, tmp_path / "first.sqlite3", first_ports),
            (second, tmp_path / "second.sqlite3", second_ports),
        ):
            wait_until_ready_and_placed(demo, database)
            url = f"http://127.0.0.1:{ports['GPUSCHED_PORT']}/healthz"
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200
            # The web answers plainly (no redirect to an https nothing serves).
            url = f"http://127.0.0.1:{ports['GPUSCHED_PORT']}/admin/login/"
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200 and response.url == url

        # A third demo on the first one's database refuses before touching it.
        third = tmp_path / "third" / "first.sqlite3"
        third.parent.mkdir()
        third.symlink_to(tmp_path / "first.sqlite3")
        error = exit_error(start_demo(third, demo_ports()), third)
        assert "another demo" in error and "DATABASE_URL" in error

        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0

        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        deadline = time.monotonic() + 30
        while not all(port_is_free(port) for port in first_ports.values()):
            assert time.monotonic() < deadline, "a child of the killed demo holds its ports"
            time.sleep(0.2)
    finally:
        for demo in (first, second):
            if demo.poll() is None:
                demo.kill()
                demo.wait()


def test_a_demo_whose_port_is_taken_exits_non_zero_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        database = tmp_path / "demo.sqlite3"
        demo = start_demo(database, {"GPUSCHED_PORT": free_port(), "GPUSCHED_DCGM_PORT": port})
        error = exit_error(demo, database)
    assert f"port {port}" in error and "GPUSCHED_DCGM_PORT" in error
    assert log_of(database).read_text().count("\n") == 1  # one line, no traceback
