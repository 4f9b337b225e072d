"""Secrets come from the environment only: the settings have none of their own in production, and
the deployment files that the repository ships (compose, Kubernetes manifests, Dockerfile) name
where each secret comes from without holding one."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.security.production import ROOT, production_env

# Environment variable names that hold a secret, or a URL that may carry a password.
SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|DATABASE_URL|REDIS_URL")
# Compose's "required" substitution, ${NAME:?message}: no default to fall back on.
REQUIRED_VARIABLE = re.compile(r"\$\{\w+:\?[^}]*\}")
URL_PASSWORD = re.compile(r"://[^/:@]+:(?P<password>[^@]+)@")


def settings_with(monkeypatch: pytest.MonkeyPatch, **variables: str) -> dict[str, Any]:
    """gpusched/settings.py run afresh with `variables` as its only gpusched settings."""
    for name in list(os.environ):
        if name.startswith("GPUSCHED_") or name in {"DATABASE_URL", "REDIS_URL"}:
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "gpusched" / "settings.py"))


# --- settings ---------------------------------------------------------------------------------


def test_the_secret_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_with(monkeypatch)["SECRET_KEY"] == ""
    key = "k" * 60
    assert settings_with(monkeypatch, GPUSCHED_SECRET_KEY=key)["SECRET_KEY"] == key
    # Debug alone has a key of its own, one that `check --deploy` rejects (test_deploy_check).
    debug_key = settings_with(monkeypatch, GPUSCHED_DEBUG="1")["SECRET_KEY"]
    assert debug_key.startswith("django-insecure-")


def test_production_without_a_secret_key_signs_nothing() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.core import signing; signing.dumps(1)",
        ],
        cwd=ROOT,
        env=production_env(GPUSCHED_SECRET_KEY="", DJANGO_SETTINGS_MODULE="gpusched.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "The SECRET_KEY setting must not be empty" in result.stderr


def test_the_database_password_comes_from_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgres://gpusched:from-the-environment@db.example.com:5432/gpusched"
    database = settings_with(monkeypatch, DATABASE_URL=url)["DATABASES"]["default"]
    assert database["PASSWORD"] == "from-the-environment"
    database = settings_with(monkeypatch)["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.sqlite3"
    assert "PASSWORD" not in database


# --- deployment files -------------------------------------------------------------------------


def test_compose_takes_every_secret_from_the_environment() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    checked = set()
    for service in compose["services"].values():
        for name, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(name):
                checked.add(name)
                password = URL_PASSWORD.search(value)
                if "://" in value:
                    # A URL: any password in it is a required variable; none is fine (Redis).
                    assert password is None or REQUIRED_VARIABLE.fullmatch(password["password"])
                else:
                    assert REQUIRED_VARIABLE.fullmatch(value), f"{name}: {value}"
    assert {"GPUSCHED_SECRET_KEY", "POSTGRES_PASSWORD", "DATABASE_URL"} <= checked


def env_entries(node: Any) -> Iterator[dict[str, Any]]:
    """Every container `env` entry anywhere in a Kubernetes object."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                yield from value
            else:
                yield from env_entries(value)
    elif isinstance(node, list):
        for item in node:
            yield from env_entries(item)


def test_kubernetes_manifests_take_every_secret_from_a_secret() -> None:
    checked = set()
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document:
                continue
            # The admin creates the Secret (docs/deployment.md); the repository holds none.
            assert document.get("kind") != "Secret", path
            for entry in env_entries(document):
                if SECRET_NAME.search(entry["name"]):
                    checked.add(entry["name"])
                    assert "value" not in entry, f"{path.name}: {entry['name']}"
                    assert entry["valueFrom"]["secretKeyRef"]["name"], f"{path.name}: {entry}"
    assert {"GPUSCHED_SECRET_KEY", "DATABASE_URL"} <= checked


def test_the_image_bakes_in_no_secret() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"SECRET|PASSWORD|TOKEN", dockerfile)
