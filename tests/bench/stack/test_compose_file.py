"""docker-compose.yml is valid, and bench/stack.py reads it as compose does.

`docker-compose config` (Debian's docker-compose 1.29, which validates and resolves a file without
a container engine) checks the file; where it is installed, its resolved services are compared
with the launcher's reading of them. The launcher's own rules (interpolation, start order, address
rewriting, stopping) are checked on small compose files of real processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.compose import COMPOSE_FILE, StackError, interpolate, load_compose, start_order
from bench.loopback import http_get
from bench.stack import NativeStack
from tests.support.binaries import installed

ROLES = ("migrate", "web", "scheduler", "simulator", "ingester")
# What compose requires from the environment (docker-compose.yml's header).
REQUIRED = {
    "GPUSCHED_SECRET_KEY": "test-secret-key",
    "GPUSCHED_DB_PASSWORD": "test-db-password",
    "GPUSCHED_METRICS_TOKEN": "test-metrics-token",
}


def required_env() -> dict[str, str]:
    """REQUIRED, keeping only the variables this compose file names."""
    text = COMPOSE_FILE.read_text()
    return {name: value for name, value in REQUIRED.items() if name in text}


def compose_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def docker_compose() -> str:
    return installed("docker-compose")


def compose_config(binary: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "config"],
        cwd=COMPOSE_FILE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- the file ---------------------------------------------------------------------------------


def test_docker_compose_validates_the_file(docker_compose: str) -> None:
    result = subprocess.run(
        [docker_compose, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=COMPOSE_FILE.parent,
        env=compose_env(**required_env()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_every_secret_must_come_from_the_environment(docker_compose: str, missing: str) -> None:
    if missing not in required_env():
        pytest.skip(f"{missing} is not used by this compose file")
    env = {k: v for k, v in required_env().items() if k != missing}
    result = compose_config(docker_compose, compose_env(**env))
    assert result.returncode != 0
    assert missing in result.stderr
    with pytest.raises(StackError, match=missing):
        load_compose(COMPOSE_FILE, env)


def test_the_launcher_reads_the_file_as_docker_compose_does(docker_compose: str) -> None:
    env = {**required_env(), "GPUSCHED_LOG_LEVEL": "DEBUG"}
    result = compose_config(docker_compose, compose_env(**env))
    assert result.returncode == 0, result.stderr
    resolved: dict[str, Any] = yaml.safe_load(result.stdout)["services"]
    ours = load_compose(COMPOSE_FILE, env)
    assert set(ours) == set(resolved)
    for name, service in ours.items():
        theirs = resolved[name]
        assert list(service.command) == [str(a) for a in theirs.get("command", [])], name
        assert dict(service.environment) == {
            k: str(v) for k, v in (theirs.get("environment") or {}).items()
        }, name
        assert dict(service.depends_on) == {
            dep: spec["condition"] for dep, spec in (theirs.get("depends_on") or {}).items()
        }, name
        assert service.build == ("build" in theirs), name
        assert service.replicas == int((theirs.get("deploy") or {}).get("replicas", 1)), name
    assert ours["web"].environment["GPUSCHED_LOG_LEVEL"] == "DEBUG"


def test_every_role_is_a_gpusched_service_behind_migrate() -> None:
    services = load_compose(COMPOSE_FILE, required_env())
    order = start_order(services)
    for role in ROLES:
        assert services[role].kind == "gpusched"
        assert services[role].command[:2] == ("python", "manage.py"), role
    for role in ROLES[1:]:
        assert services[role].depends_on.get("migrate") == "service_completed_successfully"
        assert order.index("migrate") < order.index(role)
    assert services["ingester"].depends_on["prometheus"] == "service_healthy"
    assert services["web"].healthcheck is not None
    assert services["prometheus"].healthcheck is not None
    # Debug off: the settings need ALLOWED_HOSTS to take the loopback address the port is on.
    assert "GPUSCHED_DEBUG" not in services["web"].environment
    hosts = services["web"].environment["GPUSCHED_ALLOWED_HOSTS"].split(",")
    assert "127.0.0.1" in hosts and "web" in hosts


def test_the_native_plan_points_every_address_at_loopback(tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("the prometheus binary is not installed")
    stack = NativeStack(
        tmp_path,
        env=required_env(),
        external={"postgres": "postgres://u@127.0.0.1:5432/db", "redis": "redis://127.0.0.1/3"},
    )
    web = stack.env_of("web")
    assert web["DATABASE_URL"] == "postgres://u@127.0.0.1:5432/db"
    assert web["REDIS_URL"] == "redis://127.0.0.1/3"
    argv = {name: stack.argv_of(name) for name in (*ROLES, "prometheus")}
    assert argv["migrate"][0] == sys.executable
    assert argv["web"][:5] == [sys.executable, "manage.py", "runweb", "--host", "127.0.0.1"]
    assert argv["web"][argv["web"].index("--port") + 1] == str(stack.port("web", 8000))
    simulator = argv["simulator"]
    assert simulator[simulator.index("--metrics-port") + 1] == str(stack.port("simulator", 9400))
    ingester = argv["ingester"]
    assert ingester[ingester.index("--prometheus-url") + 1] == stack.url("prometheus", 9090)
    for args in argv.values():
        assert "0.0.0.0" not in " ".join(args)
    config = yaml.safe_load((tmp_path / "prometheus" / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    assert targets["nvidia-dcgm-exporter"] == f"127.0.0.1:{stack.port('simulator', 9400)}"
    assert all(t.startswith("127.0.0.1:") for t in targets.values()), targets
    ports = list(stack.ports.values())
    assert len(set(ports)) == len(ports)


# --- the launcher's rules, on small compose files ---------------------------------------------


def write_compose(tmp_path: Path, services: dict[str, Any]) -> Path:
    path = tmp_path / "compose.yml"
    path.write_text(yaml.safe_dump({"services": services}))
    return path


def py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "1"}, "1"),
        ("$A/x", {"A": "1"}, "1/x"),
        ("${A:-d}", {}, "d"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A-d}", {"A": ""}, ""),
        ("${A:-d}", {"A": "v"}, "v"),
        ("$${A}", {"A": "1"}, "${A}"),
        ("${A:?}", {"A": "v"}, "v"),
        ("a:${B}:c", {}, "a::c"),
    ],
)
def test_interpolation(text: str, env: dict[str, str], expected: str) -> None:
    assert interpolate(text, env) == expected


@pytest.mark.parametrize("text", ["${A:?set A}", "${A?set A}"])
def test_interpolation_of_a_required_variable(text: str) -> None:
    with pytest.raises(StackError, match="set A"):
        interpolate(text, {})
    assert interpolate("${A:?x}", {"A": "y"}) == "y"


def test_depends_on_order_and_conditions(tmp_path: Path) -> None:
    marker = tmp_path / "order.txt"
    write = "import sys, pathlib; p = pathlib.Path(sys.argv[1]); p.write_text(p.read_text() + '{}')"
    compose = write_compose(
        tmp_path,
        {
            "setup": {
                "build": ".",
                "command": [
                    "python",
                    "-c",
                    "import time; time.sleep(0.5); " + write.format("setup,"),
                    str(marker),
                ],
            },
            "server": {
                "build": ".",
                "command": py(
                    """
                    import http.server, sys
                    port = int(sys.argv[sys.argv.index('--port') + 1])
                    http.server.HTTPServer(('127.0.0.1', port), http.server.SimpleHTTPRequestHandler).serve_forever()
                    """  # noqa: E501
                )
                + ["--port", "8080"],
                "healthcheck": {"test": ["CMD", "wget", "-qO-", "http://127.0.0.1:8080/"]},
                "depends_on": {"setup": {"condition": "service_completed_successfully"}},
            },
            "client": {
                "build": ".",
                "restart": "unless-stopped",  # an exit is a failure
                "command": py(
                    """
                    import sys, time, urllib.request
                    urllib.request.urlopen(sys.argv[1], timeout=5).read()
                    print('reached', flush=True)
                    time.sleep(60)
                    """
                )
                + ["http://server:8080/"],
                "depends_on": {"server": {"condition": "service_healthy"}},
            },
        },
    )
    marker.write_text("")
    stack = NativeStack(tmp_path, compose_file=compose, env={}, grace=5)
    assert stack.order == ["setup", "server", "client"]
    with stack.start(timeout=30):
        assert marker.read_text() == "setup,"
        assert stack.timings["server_started_s"] >= stack.timings["setup_exited_s"]
        assert stack.timings["client_started_s"] >= stack.timings["server_healthy_s"]
        # The client reached the server at its rewritten address.
        deadline = time.monotonic() + 10
        while "reached" not in stack.log_tail("client") and time.monotonic() < deadline:
            stack.check_running()
            time.sleep(0.05)
        assert "reached" in stack.log_tail("client")
    assert stack.exit_codes["setup"] == 0
    assert stack.killed == []


def test_each_replica_is_a_process_on_its_own_ports(tmp_path: Path) -> None:
    """A service of two replicas runs twice, each on its own port; what depends on it waits for
    both to be healthy; a reference to it from elsewhere means the first."""
    compose = write_compose(
        tmp_path,
        {
            "server": {
                "build": ".",
                "deploy": {"replicas": 2},
                "command": py(
                    """
                    import http.server, sys
                    port = int(sys.argv[sys.argv.index('--port') + 1])
                    http.server.HTTPServer(('127.0.0.1', port), http.server.SimpleHTTPRequestHandler).serve_forever()
                    """  # noqa: E501
                )
                + ["--port", "8080"],
                "healthcheck": {"test": ["CMD", "wget", "-qO-", "http://127.0.0.1:8080/"]},
            },
            "client": {
                "build": ".",
                "command": py("import sys, time; time.sleep(60)") + ["http://server:8080/"],
                "depends_on": {"server": {"condition": "service_healthy"}},
            },
        },
    )
    stack = NativeStack(tmp_path, compose_file=compose, env={}, grace=5)
    assert stack.order == ["server", "server-2", "client"]
    first, second = stack.port("server", 8080), stack.port("server-2", 8080)
    assert first != second
    assert stack.argv_of("client")[-1] == f"http://127.0.0.1:{first}/"
    with stack.start(timeout=30):
        assert stack.timings["client_started_s"] >= max(
            stack.timings["server_healthy_s"], stack.timings["server-2_healthy_s"]
        )
        for port in (first, second):
            assert http_get(f"http://127.0.0.1:{port}/")[0] == 200
    wider = NativeStack(tmp_path, compose_file=compose, env={}, replicas={"server": 3})
    assert wider.order == ["server", "server-2", "server-3", "client"]


def test_a_failed_dependency_stops_the_start_with_its_log(tmp_path: Path) -> None:
    compose = write_compose(
        tmp_path,
        {
            "migrate": {"build": ".", "command": py("print('no such table'); raise SystemExit(3)")},
            "web": {
                "build": ".",
                "command": py("import time; time.sleep(60)"),
                "depends_on": {"migrate": {"condition": "service_completed_successfully"}},
            },
        },
    )
    stack = NativeStack(tmp_path, compose_file=compose, env={})
    with pytest.raises(StackError, match=r"migrate exited with 3:[\s\S]*no such table"):
        stack.start(timeout=30)
    assert "web" not in stack.exit_codes  # never started
    assert (tmp_path / "logs" / "migrate.log").exists()


def test_a_role_that_dies_while_starting_fails_the_start(tmp_path: Path) -> None:
    compose = write_compose(
        tmp_path,
        {
            "web": {
                "build": ".",
                "restart": "unless-stopped",
                "command": py("import sys; sys.exit('cannot bind')"),
                "healthcheck": {"test": ["CMD", "python", "-c", "raise SystemExit(1)"]},
            }
        },
    )
    with pytest.raises(StackError, match="web exited with 1:[\\s\\S]*cannot bind"):
        NativeStack(tmp_path, compose_file=compose, env={}).start(timeout=30)


def test_stop_sends_sigterm_then_sigkill_after_the_grace(tmp_path: Path) -> None:
    compose = write_compose(
        tmp_path,
        {
            "polite": {"build": ".", "command": py("import time; time.sleep(60)")},
            "stubborn": {
                "build": ".",
                "command": py(
                    """
                    import signal, time
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    print('ready', flush=True)
                    time.sleep(60)
                    """
                ),
                "healthcheck": {"test": ["CMD", "python", "-c", "raise SystemExit(0)"]},
            },
        },
    )
    stack = NativeStack(tmp_path, compose_file=compose, env={}, grace=1.0)
    stack.start(timeout=30)
    deadline = time.monotonic() + 10
    while "ready" not in stack.log_tail("stubborn") and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    codes = stack.stop()
    assert time.monotonic() - began < 5
    assert stack.killed == ["stubborn"]
    assert codes == {"stubborn": -9, "polite": -15}


def test_what_cannot_run_natively_is_an_error(tmp_path: Path) -> None:
    unknown = write_compose(tmp_path, {"mail": {"image": "mailhog/mailhog"}})
    with pytest.raises(StackError, match="no native equivalent"):
        NativeStack(tmp_path, compose_file=unknown, env={})
    leftover = write_compose(
        tmp_path,
        {
            "db": {"image": "postgres:15"},
            "app": {"build": ".", "command": ["python", "-c", "1", "--db=db:5432"]},
        },
    )
    with pytest.raises(StackError, match="names service 'db:5432'"):
        NativeStack(tmp_path, compose_file=leftover, env={}, external={"db": "postgres://x/y"})
    cycle = write_compose(
        tmp_path,
        {
            "a": {"build": ".", "command": ["python"], "depends_on": ["b"]},
            "b": {"build": ".", "command": ["python"], "depends_on": ["a"]},
        },
    )
    with pytest.raises(StackError, match="cycle"):
        NativeStack(tmp_path, compose_file=cycle, env={})


def test_supervise_restarts_a_role_that_dies_as_its_restart_policy_says(tmp_path: Path) -> None:
    marker, go = tmp_path / "crashed-once", tmp_path / "crash-now"
    # It crashes once the stack is up: a role that exits while the stack starts fails the start.
    crash_once = py(
        """
        import pathlib, sys, time
        marker, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
        if not marker.exists():
            while not go.exists():
                time.sleep(0.05)
            marker.write_text("x")
            sys.exit("crash")
        time.sleep(60)
        """
    ) + [str(marker), str(go)]
    compose = write_compose(
        tmp_path,
        {
            "flaky": {"build": ".", "restart": "unless-stopped", "command": crash_once},
            "oneshot": {"build": ".", "restart": "no", "command": py("pass")},
        },
    )
    stack = NativeStack(tmp_path, compose_file=compose, env={}, grace=2).start(timeout=30)
    try:
        stack.supervise()
        go.touch()
        deadline = time.monotonic() + 10
        while not stack.restarts and time.monotonic() < deadline:
            time.sleep(0.1)
        # No second restart, of either, comes within one and a half restart delays: an absence,
        # so a wait and not an event.
        time.sleep(1.5)
        assert stack.restarts == {"flaky": 1}  # once; the one-shot is not restarted
        assert stack.pid("flaky") is not None
        assert stack.log_tail("flaky").count("$ ") == 2  # both runs in one log
    finally:
        codes = stack.stop()
    assert codes == {"flaky": -15, "oneshot": 0}
