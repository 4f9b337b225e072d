"""docs/kubernetes.md's "simulated Kubernetes" commands, run as written (on free ports and
temporary paths) on a fresh database: the cluster's nodes are mirrored and placed on, kubectl
reads them, and the database the environment named before (a demo's) is left as it was."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.sim.test_demo import ROOT, free_port

DOC = ROOT / "docs" / "kubernetes.md"


def documented_lines() -> list[str]:
    """The first sh block of the section, continuation lines joined, comments dropped."""
    section = DOC.read_text().split("## The simulated Kubernetes", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    return [line.split("  #", 1)[0].strip() for line in lines if line.strip()]


def assignments(words: list[str]) -> dict[str, str]:
    return {name: value for name, _, value in (word.partition("=") for word in words)}


def mirrored_nodes(database: Path) -> int:
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as connection:
            (count,) = connection.execute(
                "SELECT COUNT(*) FROM scheduling_node WHERE source = 'kubernetes'"
            ).fetchone()
    except sqlite3.Error:
        return 0
    return int(count)


def until(condition, what: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 90
    while not condition():
        assert all(p.poll() is None for p in processes), f"a command exited before {what}"
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.2)


def test_the_simulated_kubernetes_sequence_runs_as_documented(tmp_path: Path) -> None:
    demo_database = tmp_path / "demo.sqlite3"
    with sqlite3.connect(demo_database) as connection:
        connection.execute("CREATE TABLE kept (value TEXT)")
        connection.execute("INSERT INTO kept VALUES ('the demo state')")
    demo_bytes = demo_database.read_bytes()
    kubeconfig, database = tmp_path / "fakekube.kubeconfig", tmp_path / "kube.sqlite3"
    replace = {
        "6443": str(free_port()),
        "9402": str(free_port()),
        "/tmp/gpusched-fakekube.kubeconfig": str(kubeconfig),
        "var/kube.sqlite3": str(database),
    }
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{demo_database}"}
    env.pop("GPUSCHED_HARNESS", None)  # where the doc needs it, it says so
    background: list[subprocess.Popen[bytes]] = []
    try:
        for line in documented_lines():
            for documented, here in replace.items():
                line = line.replace(documented, here)
            words = shlex.split(line.rstrip("&"))
            if words[0] == "export":
                env.update(assignments(words[1:]))
                continue
            own = assignments(words[: next(i for i, w in enumerate(words) if "=" not in w)])
            argv = words[len(own) :]
            if argv[0] == "python":
                argv[0] = sys.executable
            elif shutil.which(argv[0]) is None:
                continue  # kubectl is checked where installed (tests/sim/kubernetes)
            if line.endswith("&") or "--loop" in argv:
                log = (tmp_path / f"{len(background)}.log").open("wb")
                with log:
                    background.append(
                        subprocess.Popen(argv, cwd=ROOT, env={**env, **own}, stderr=log)
                    )
                if "fakekube" in argv:
                    until(kubeconfig.is_file, "kubeconfig", background)
                if "runkube" in argv:
                    until(lambda: mirrored_nodes(database) == 16, "mirrored nodes", background)
                continue
            done = subprocess.run(
                argv, cwd=ROOT, env={**env, **own}, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            if argv[0] == "kubectl":
                assert len(done.stdout.splitlines()) == 1 + 16  # the header and every node
    finally:
        for process in reversed(background):
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    assert [process.returncode for process in background] == [0, 0]
    assert demo_database.read_bytes() == demo_bytes


def test_runkube_on_a_database_without_tables_says_to_migrate(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    done = subprocess.run(
        [sys.executable, "manage.py", "runkube", "--loop", "--kubeconfig", str(tmp_path / "k")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "manage.py migrate" in done.stderr, done.stderr
