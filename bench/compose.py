"""docker-compose.yml read as data: compose's `${VAR...}` interpolation, each service's command,
environment, dependencies, health check, ports, volumes, restart policy and replicas (PyYAML; YAML
anchors and merge keys resolved). No processes here: bench/stack.py runs what this describes."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"


class StackError(RuntimeError):
    """The compose file cannot be run natively, or a service failed to start."""


_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution: $$, $VAR, ${VAR}, ${VAR:-default}, ${VAR-default},
    ${VAR:?error}, ${VAR?error}."""

    def replace(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("braced") or match.group("bare")
        value = env.get(name)
        op, arg = match.group("op"), match.group("arg") or ""
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if op in (":-", "-") and unset:
            return arg
        if op in (":?", "?") and unset:
            raise StackError(f"{name} is required: {arg or 'not set'}")
        return value or ""

    return _VAR.sub(replace, text)


def _interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _interpolate_tree(value, env) for key, value in node.items()}
    return node


@dataclass(frozen=True)
class HealthCheck:
    test: tuple[str, ...]  # an argv ("CMD" form) or ("sh", "-c", text) for "CMD-SHELL"
    timeout_s: float = 30.0


@dataclass(frozen=True)
class Service:
    name: str
    image: str = ""
    build: bool = False  # built from this repository: a gpusched role
    command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    depends_on: Mapping[str, str] = field(default_factory=dict)  # service -> condition
    healthcheck: HealthCheck | None = None
    ports: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    restart: str = "no"
    replicas: int = 1  # deploy.replicas

    @property
    def kind(self) -> str:
        """gpusched | postgres | redis | prometheus (how it runs natively)."""
        if self.build or self.image.split(":")[0].endswith("gpusched"):
            return "gpusched"
        repository = self.image.split(":")[0].rsplit("/", 1)[-1]
        if repository in ("postgres", "redis", "prometheus"):
            return repository
        raise StackError(f"service {self.name}: no native equivalent for image {self.image!r}")

    def listen_ports(self) -> list[int]:
        """The ports its command listens on: the number after `-p`, `--port`, `--*-port`."""
        return [
            int(value)
            for flag, value in zip(self.command, self.command[1:], strict=False)
            if value.isdigit() and (flag == "-p" or re.fullmatch(r"--([\w-]+-)?port", flag))
        ]

    def published_ports(self) -> list[int]:
        """The container ports of `ports:` ("127.0.0.1:8000:8000" -> 8000)."""
        return [int(str(spec).split(":")[-1].split("/")[0]) for spec in self.ports]


def _seconds(value: Any, default: float) -> float:
    if value is None:
        return default
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", str(value).strip())
    if not match:
        raise StackError(f"duration {value!r}: expected e.g. 5s")
    number = float(match.group(1))
    return (
        number / 1000 if match.group(2) == "ms" else number * (60 if match.group(2) == "m" else 1)
    )


def _argv(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list):
        return tuple(str(item) for item in value)
    raise StackError(f"{where}: expected a list or a string")


def _healthcheck(doc: Any, name: str) -> HealthCheck | None:
    if not doc or doc.get("disable"):
        return None
    test = doc.get("test")
    if isinstance(test, str):
        argv: tuple[str, ...] = ("sh", "-c", test)
    elif isinstance(test, list) and test and test[0] == "CMD":
        argv = tuple(str(item) for item in test[1:])
    elif isinstance(test, list) and test and test[0] == "CMD-SHELL":
        argv = ("sh", "-c", " ".join(str(item) for item in test[1:]))
    elif isinstance(test, list) and test == ["NONE"]:
        return None
    else:
        raise StackError(f"service {name}: healthcheck.test {test!r} is not CMD or CMD-SHELL")
    return HealthCheck(argv, _seconds(doc.get("timeout"), 30.0))


def _depends(doc: Any) -> dict[str, str]:
    if doc is None:
        return {}
    if isinstance(doc, list):
        return {str(name): "service_started" for name in doc}
    return {
        str(name): str((spec or {}).get("condition", "service_started"))
        for name, spec in doc.items()
    }


def _environment(doc: Any) -> dict[str, str]:
    if doc is None:
        return {}
    if isinstance(doc, list):
        pairs = (str(item).partition("=") for item in doc)
        return {key: value for key, _, value in pairs}
    return {str(key): "" if value is None else str(value) for key, value in doc.items()}


def _replicas(deploy: Any, name: str) -> int:
    value = (deploy or {}).get("replicas", 1)
    if not str(value).isdigit():
        raise StackError(f"service {name}: deploy.replicas {value!r} is not a number")
    return int(value)


def load_compose(
    path: Path = COMPOSE_FILE, env: Mapping[str, str] | None = None
) -> dict[str, Service]:
    """The compose file's services, interpolated with `env` (default: os.environ), YAML anchors
    and merge keys resolved."""
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        raise StackError(f"{path}: no services")
    services: dict[str, Service] = {}
    for name, raw in doc["services"].items():
        spec = _interpolate_tree(raw or {}, os.environ if env is None else env)
        services[name] = Service(
            name=name,
            image=str(spec.get("image", "")),
            build="build" in spec,
            command=_argv(spec.get("command"), f"service {name}: command"),
            environment=_environment(spec.get("environment")),
            depends_on=_depends(spec.get("depends_on")),
            healthcheck=_healthcheck(spec.get("healthcheck"), name),
            ports=tuple(str(p) for p in spec.get("ports") or ()),
            volumes=tuple(str(v) for v in spec.get("volumes") or ()),
            restart=str(spec.get("restart", "no")),
            replicas=_replicas(spec.get("deploy"), name),
        )
    for service in services.values():
        for dependency, condition in service.depends_on.items():
            if dependency not in services:
                raise StackError(f"service {service.name} depends on unknown {dependency!r}")
            if condition not in (
                "service_started",
                "service_healthy",
                "service_completed_successfully",
            ):
                raise StackError(f"service {service.name}: unknown condition {condition!r}")
    return services


def start_order(services: Mapping[str, Service]) -> list[str]:
    """Services ordered so that each comes after what it depends on (file order otherwise)."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise StackError(f"depends_on cycle through {name}")
        visiting.add(name)
        for dependency in services[name].depends_on:
            visit(dependency)
        visiting.discard(name)
        order.append(name)

    for name in services:
        visit(name)
    return order
