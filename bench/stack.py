"""docker-compose.yml's process set, run natively on one machine (no container engine).

`NativeStack` reads the compose file (bench/compose.py), and runs (each replica of a service as a
process of its own):
- each gpusched role (a service built from this repository: migrate, web, scheduler, simulator,
  ingester) as a real subprocess of its compose `command`, `python` being this interpreter and a
  console script the one beside it, with the service's compose `environment`;
- the Prometheus service as the local `prometheus` binary, from the compose file's mounted config
  with its scrape targets pointed at the native processes;
- PostgreSQL and Redis as given URLs (`external`): an environment value whose URL names such a
  service (DATABASE_URL, REDIS_URL) becomes the given URL.

Every `service:port` the stack refers to (commands, environments, health checks, the Prometheus
config) becomes `127.0.0.1:<free port>`, every `0.0.0.0` bind becomes `127.0.0.1`, and a role's own
container port in its command (`-p 8000`, `--metrics-port 9400`) becomes its free port. A reference
left over (a service this module cannot place) is an error, not a silent miss.

`start()` honours `depends_on`: a service starts once each dependency is started, healthy
(`service_healthy`: its compose health check, run natively, passes) or exited 0
(`service_completed_successfully`); then it waits until every started service with a health check
is healthy (`docker compose up --wait`). A role that exits early fails the start with the tail of
its log; after `start()`, `supervise()` restarts a role that exits, as compose's `restart` policy
does, and counts it in `restarts`. `stop()` sends SIGTERM in reverse start order, waits `grace`
seconds, then SIGKILL; exit codes are kept in `exit_codes`, the roles that needed SIGKILL in
`killed`. Each process writes stdout and stderr to `<workdir>/logs/NAME.log`.

No Django here: the tests and `manage.py bench_stack` both use it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import yaml

from bench.compose import COMPOSE_FILE, Service, StackError, load_compose, start_order
from bench.loopback import free_port, http_get, tcp_open

# Variables of the parent environment that must not leak into a role: the compose file decides.
_SCRUBBED = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")
_SCRUBBED_PREFIXES = ("GPUSCHED_",)


# --- the stack ------------------------------------------------------------------------------


@dataclass
class _Running:
    service: Service
    argv: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    healthy: bool = False
    next_check: float = 0.0


class NativeStack:
    """docker-compose.yml's services as local processes on loopback ports (module docstring).

    env         the variables compose would interpolate from (GPUSCHED_SECRET_KEY, ...); default
                os.environ.
    external    service name -> URL for PostgreSQL and Redis ({"postgres": ..., "redis": ...}).
    services    run only these (and what they depend on); default all.
    extra_args  service -> arguments appended to its command (later options win in argparse).
    extra_env   variables added to every gpusched role's environment.
    scrape_interval  replaces the Prometheus config's scrape (and evaluation) intervals.
    replicas    service -> how many processes run it (default: its compose `deploy.replicas`).

    A service of N replicas runs as N processes, `NAME` and `NAME-2` ... `NAME-N`, each with its
    own loopback ports (`port("web-2", 8000)`), log and restarts; a dependency on it waits for
    all of them; a reference `NAME:port` from elsewhere (a scrape target) means the first, where
    compose's DNS would pick any one.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        compose_file: Path = COMPOSE_FILE,
        env: Mapping[str, str] | None = None,
        external: Mapping[str, str] | None = None,
        services: Sequence[str] | None = None,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        extra_env: Mapping[str, str] | None = None,
        scrape_interval: str | None = None,
        grace: float = 10.0,
        replicas: Mapping[str, int] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.compose_file = compose_file
        self.root = compose_file.resolve().parent
        self.all_services = load_compose(compose_file, os.environ if env is None else env)
        self.external = dict(external or {})
        self.extra_args = {name: list(args) for name, args in (extra_args or {}).items()}
        self.extra_env = dict(extra_env or {})
        self.scrape_interval = scrape_interval
        self.grace = grace
        wanted = list(services) if services is not None else list(self.all_services)
        self.services = self._closure(wanted)
        counts = {name: service.replicas for name, service in self.services.items()}
        counts.update(replicas or {})
        # Each process (a replica of a service) -> its service, in start order.
        self.instances = {
            (name if k == 1 else f"{name}-{k}"): name
            for name in start_order(self.all_services)
            if name in self.services
            for k in range(1, max(counts[name], 1) + 1)
        }
        clash = set(self.instances) & (set(self.all_services) - set(self.instances.values()))
        if clash or any(counts[name] < 1 for name in self.services):
            raise StackError(f"replicas: at least one each, not named like a service {clash}")
        self.order = list(self.instances)
        self.ports = self._allocate_ports()
        self.running: dict[str, _Running] = {}
        self.exit_codes: dict[str, int] = {}
        self.killed: list[str] = []  # services still running `grace` seconds after SIGTERM
        self.restarts: dict[str, int] = {}  # by supervise()
        self._supervisor: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        # "NAME_started_s" / "_healthy_s" / "_exited_s": seconds from start(); "up_s"
        self.timings: dict[str, float] = {}
        self._began = time.monotonic()
        self.log_dir = self.workdir / "logs"
        self._plans = {name: self._plan(name) for name in self.order}

    # --- planning -------------------------------------------------------------------------

    def _closure(self, wanted: Sequence[str]) -> dict[str, Service]:
        out: dict[str, Service] = {}
        stack = list(wanted)
        while stack:
            name = stack.pop()
            if name not in self.all_services:
                raise StackError(f"no service {name!r} in {self.compose_file.name}")
            if name not in out:
                out[name] = self.all_services[name]
                stack.extend(out[name].depends_on)
        return out

    def _references(self) -> set[tuple[str, int]]:
        """Every (service, container port) the stack refers to."""
        names = "|".join(re.escape(n) for n in self.all_services)
        pattern = re.compile(rf"(?<![\w.-])({names}):(\d+)\b")
        texts: list[str] = []
        for service in self.services.values():
            texts.extend(service.command)
            texts.extend(service.environment.values())
            if service.healthcheck:
                texts.extend(service.healthcheck.test)
            if service.kind == "prometheus":
                texts.append(self._prometheus_source_config().read_text())
        refs = {(m.group(1), int(m.group(2))) for text in texts for m in pattern.finditer(text)}
        for service in self.services.values():
            refs.update((service.name, port) for port in service.published_ports())
            refs.update((service.name, port) for port in service.listen_ports())
        return refs

    def _allocate_ports(self) -> dict[tuple[str, int], int]:
        ports: dict[tuple[str, int], int] = {}
        for name, port in sorted(self._references()):
            if name in self.services and self.services[name].kind in ("gpusched", "prometheus"):
                for instance in self._replicas(name):
                    ports[(instance, port)] = free_port()
        return ports

    def _replicas(self, service: str) -> list[str]:
        return [instance for instance, name in self.instances.items() if name == service]

    def _rewrite(self, text: str, own: str | None = None) -> str:
        """service:port -> 127.0.0.1:free port (of its first replica); the own (process's)
        127.0.0.1/localhost:port too."""
        for (name, port), host_port in self.ports.items():
            text = re.sub(rf"(?<![\w.-]){re.escape(name)}:{port}\b", f"127.0.0.1:{host_port}", text)
            if name == own:
                text = re.sub(
                    rf"\b(127\.0\.0\.1|localhost):{port}\b", f"127.0.0.1:{host_port}", text
                )
        return text

    def _leftover(self, where: str, text: str) -> None:
        names = "|".join(re.escape(n) for n in self.all_services)
        match = re.search(rf"(?<![\w.-])({names}):\d+\b|//({names})[/:]", text)
        if match:
            raise StackError(f"{where}: {text!r} names service {match.group(0)!r}, not placed")

    def _executable(self, name: str) -> str:
        if name in ("python", "python3", Path(sys.executable).name):
            return sys.executable
        beside = Path(sys.executable).parent / name  # a console script of this environment
        if beside.exists():
            return str(beside)
        found = shutil.which(name)
        if not found:
            raise StackError(f"{name!r} is not installed")
        return found

    def _plan(self, instance: str) -> tuple[list[str], dict[str, str]] | None:
        """The argv and environment of a service's process; None for an external one."""
        service = self.all_services[self.instances[instance]]
        kind = service.kind
        if kind in ("postgres", "redis"):
            if service.name not in self.external:
                raise StackError(f"service {service.name}: give its URL in `external`")
            return None
        if kind == "prometheus":
            return self._prometheus_plan(service), {}
        own_ports = {p: h for (n, p), h in self.ports.items() if n == instance}
        argv: list[str] = []
        for arg in [*service.command, *self.extra_args.get(service.name, [])]:
            arg = self._rewrite(arg.replace("0.0.0.0", "127.0.0.1"))
            if arg.isdigit() and int(arg) in own_ports:
                arg = str(own_ports[int(arg)])
            self._leftover(f"service {service.name}: command", arg)
            argv.append(arg)
        if not argv:
            raise StackError(f"service {service.name}: no command")
        argv[0] = self._executable(argv[0])
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)
        }
        env["PYTHONUNBUFFERED"] = "1"
        loopback = "127.0.0.1,localhost"  # health checks and clients never go through a proxy
        for key in ("NO_PROXY", "no_proxy"):
            env[key] = f"{env[key]},{loopback}" if env.get(key) else loopback
        for key, value in service.environment.items():
            host = urllib.parse.urlsplit(value).hostname if "://" in value else None
            if host in self.external:
                value = self.external[host]
            value = self._rewrite(value)
            self._leftover(f"service {service.name}: {key}", value)
            env[key] = value
        env.update(self.extra_env)
        return argv, env

    def _prometheus_source_config(self) -> Path:
        service = next(s for s in self.services.values() if s.kind == "prometheus")
        for volume in service.volumes:
            host, _, rest = volume.partition(":")
            if rest.split(":")[0].endswith(".yml") and host.startswith("."):
                return (self.root / host).resolve()
        raise StackError(f"service {service.name}: no prometheus.yml volume")

    def _prometheus_plan(self, service: Service) -> list[str]:
        binary = shutil.which("prometheus")
        if binary is None:
            raise StackError("the prometheus binary is not installed (Debian package prometheus)")
        text = self._rewrite(self._prometheus_source_config().read_text())
        self._leftover("prometheus.yml", text)
        config = yaml.safe_load(text)
        if self.scrape_interval:
            config.setdefault("global", {})
            config["global"]["scrape_interval"] = self.scrape_interval
            config["global"]["evaluation_interval"] = self.scrape_interval
            config["global"]["scrape_timeout"] = self.scrape_interval
            for job in config.get("scrape_configs") or []:
                job.pop("scrape_interval", None)
                job.pop("scrape_timeout", None)
        prom_dir = self.workdir / service.name
        prom_dir.mkdir(parents=True, exist_ok=True)
        self._write_credentials_files(service, config, prom_dir)
        config_path = prom_dir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        ((_, container_port),) = [key for key in self.ports if key[0] == service.name]
        argv = [binary]
        for arg in [*service.command, *self.extra_args.get(service.name, [])]:
            if arg.startswith(("--config.file=", "--storage.tsdb.path=", "--web.listen-address=")):
                continue  # replaced below: container paths and the container's listen address
            argv.append(arg)
        return [
            *argv,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={prom_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.ports[(service.name, container_port)]}",
        ]

    def _write_credentials_files(
        self, service: Service, config: dict[str, Any], prom_dir: Path
    ) -> None:
        """docker-compose.yml's Prometheus entrypoint writes GPUSCHED_METRICS_TOKEN into the file
        a job's `authorization.credentials_file` names: natively, a file in `prom_dir`."""
        token = service.environment.get("GPUSCHED_METRICS_TOKEN")
        for job in config.get("scrape_configs") or []:
            authorization = job.get("authorization") or {}
            if "credentials_file" in authorization:
                if token is None:
                    raise StackError(f"service {service.name}: no GPUSCHED_METRICS_TOKEN")
                path = prom_dir / Path(authorization["credentials_file"]).name
                path.write_text(token)
                authorization["credentials_file"] = str(path)

    # --- addresses ------------------------------------------------------------------------

    def port(self, service: str, container_port: int) -> int:
        """The loopback port standing for `service:container_port`."""
        return self.ports[(service, container_port)]

    def url(self, service: str, container_port: int, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port(service, container_port)}{path}"

    def argv_of(self, service: str) -> list[str]:
        """The command line the service runs with."""
        plan = self._plans[service]
        if plan is None:
            raise StackError(f"service {service} is external")
        return list(plan[0])

    def env_of(self, service: str) -> dict[str, str]:
        plan = self._plans[service]
        if plan is None:
            raise StackError(f"service {service} is external")
        return dict(plan[1])

    def pid(self, service: str) -> int | None:
        running = self.running.get(service)
        return running.process.pid if running and running.process.poll() is None else None

    # --- running --------------------------------------------------------------------------

    def _launch(self, name: str) -> None:
        plan = self._plans[name]
        assert plan is not None
        argv, env = plan
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            log.write(f"$ {shlex.join(argv)}\n".encode())
            log.flush()
            process = subprocess.Popen(
                argv,
                cwd=self.root,
                env=env or None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C goes to us; we stop them in order
            )
        self.running[name] = _Running(
            self.all_services[self.instances[name]], argv, process, log_path, time.monotonic()
        )

    def _check_health(self, name: str) -> bool:
        """One run of the service's compose health check, natively (`name`: one process)."""
        service = self.all_services[self.instances[name]]
        if service.kind in ("postgres", "redis"):
            return tcp_open(self.external[name], 5432 if service.kind == "postgres" else 6379)
        check = service.healthcheck
        if check is None:
            return True
        argv = [self._rewrite(arg, own=name) for arg in check.test]
        timeout = min(check.timeout_s, 5.0)
        if Path(argv[0]).name in ("wget", "curl"):  # an HTTP probe: made here, no binary needed
            urls = [a for a in argv[1:] if a.startswith(("http://", "https://"))]
            if len(urls) != 1:
                raise StackError(f"service {name}: healthcheck {check.test!r} has no single URL")
            try:
                return http_get(urls[0], timeout=timeout)[0] < 400
            except OSError:
                return False
        argv[0] = self._executable(argv[0])
        plan = self._plans[name]
        try:
            result = subprocess.run(
                argv,
                cwd=self.root,
                env=plan[1] or None if plan else None,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def _condition_met(self, dependency: str, condition: str) -> bool:
        """`condition` holds for every replica of service `dependency`."""
        service = self.all_services[dependency]
        if service.kind in ("postgres", "redis"):
            return condition == "service_started" or self._check_health(dependency)
        return all(self._replica_met(name, condition) for name in self._replicas(dependency))

    def _replica_met(self, dependency: str, condition: str) -> bool:
        running = self.running.get(dependency)
        if running is None:
            return False
        if condition == "service_completed_successfully":
            code = self._exited(dependency)
            if code is not None and code != 0:
                raise StackError(f"{dependency} exited with {code}:\n{self.log_tail(dependency)}")
            return code == 0
        if condition == "service_healthy":
            return running.healthy
        return True

    def _exited(self, name: str) -> int | None:
        """The service's exit code (noting when it was first seen), None while it runs."""
        code = self.running[name].process.poll()
        if code is not None:
            self.timings.setdefault(f"{name}_exited_s", round(time.monotonic() - self._began, 2))
        return code

    def _fail_if_exited(self) -> None:
        for name, running in self.running.items():
            code = running.process.poll()
            if code is not None and running.service.restart != "no":
                raise StackError(f"{name} exited with {code}:\n{self.log_tail(name)}")

    def start(self, timeout: float = 120.0) -> Self:
        """Start every service in dependency order; return once all are up and healthy."""
        began = self._began = time.monotonic()
        deadline = began + timeout
        pending = [n for n in self.order if self._plans[n] is not None]
        try:
            while True:
                for name, running in self.running.items():
                    now = time.monotonic()
                    if self._exited(name) is not None:
                        continue
                    if running.healthy or now < running.next_check:
                        continue
                    running.next_check = now + 0.25
                    if self.all_services[self.instances[name]].healthcheck is None:
                        running.healthy = True
                    elif self._check_health(name):
                        running.healthy = True
                        self.timings[f"{name}_healthy_s"] = round(time.monotonic() - began, 2)
                for name in list(pending):
                    deps = self.all_services[self.instances[name]].depends_on
                    if all(
                        self._condition_met(d, c) for d, c in deps.items() if d in self.services
                    ):
                        self._launch(name)
                        self.timings[f"{name}_started_s"] = round(time.monotonic() - began, 2)
                        pending.remove(name)
                self._fail_if_exited()
                waiting = [
                    n
                    for n, r in self.running.items()
                    if self.all_services[self.instances[n]].healthcheck and not r.healthy
                ]
                if not pending and not waiting:
                    self.timings["up_s"] = round(time.monotonic() - began, 2)
                    return self
                if time.monotonic() > deadline:
                    raise StackError(
                        f"not up within {timeout} s: waiting to start {pending}, "
                        f"to be healthy {waiting}"
                    )
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def check_running(self) -> None:
        """StackError when a long-running service has exited (unless supervised: see
        `supervise()`, which restarts it instead)."""
        if self._supervisor is None:
            self._fail_if_exited()

    def supervise(self) -> Self:
        """From now on, restart a role that exits as compose's `restart` policy would (`always`,
        `unless-stopped`, or `on-failure` after a non-zero exit), a second after it exited; each
        restart is counted in `restarts` and its output appended to the role's log."""
        if self._supervisor is None:
            self._supervisor = threading.Thread(
                target=self._supervise, name="stack-supervisor", daemon=True
            )
            self._supervisor.start()
        return self

    def _supervise(self) -> None:
        exited: dict[str, float] = {}
        while not self._stopping.wait(0.2):
            with self._lock:
                for name, running in list(self.running.items()):
                    code = running.process.poll()
                    policy = running.service.restart
                    if code is None or policy == "no" or (policy == "on-failure" and code == 0):
                        continue
                    first_seen = exited.setdefault(name, time.monotonic())
                    if time.monotonic() - first_seen >= 1.0:
                        del exited[name]
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        self._launch(name)

    def run(self, service: str, *args: str, timeout: float = 120.0) -> str:
        """A one-off command in `service`'s environment (`docker compose run --rm SERVICE ...`),
        `python` being this interpreter; its stdout (StackError on a non-zero exit)."""
        argv = [self._executable(args[0]), *args[1:]]
        result = subprocess.run(
            argv,
            cwd=self.root,
            env=self.env_of(service),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise StackError(f"{shlex.join(args)} exited with {result.returncode}: {result.stderr}")
        return result.stdout

    def stop(self) -> dict[str, int]:
        """SIGTERM every process (dependents first), SIGKILL after `grace`; the exit codes."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
        with self._lock:
            return self._stop_all()

    def _stop_all(self) -> dict[str, int]:
        for name in reversed(list(self.running)):
            process = self.running[name].process
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.grace
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if process.poll() is None:
                self.killed.append(name)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
            self.exit_codes[name] = process.returncode
        self.running.clear()
        return dict(self.exit_codes)

    def log_tail(self, service: str, lines: int = 40) -> str:
        path = self.log_dir / f"{service}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
