"""The harness fenced off (docs/architecture.md): with production settings (GPUSCHED_HARNESS
unset) neither the simulator nor the benchmarks are installed, and importing every module of the
product loads neither; the switch installs both. Each in a fresh interpreter, as a process of
that role reads its settings."""

from __future__ import annotations

import json

from bench.compose import COMPOSE_FILE, load_compose
from tests import fresh_settings

HARNESS = ("sim", "bench")
PRODUCT = ("gpusched", "common", "api", "scheduling", "telemetry", "dashboard", "kube")
# Every module of the product, imported after django.setup(); then which apps are installed and
# which harness modules got loaded.
IMPORT_ALL = f"""
import importlib, json, pkgutil, sys
import django
django.setup()
from django.apps import apps
for top in {PRODUCT!r}:
    package = importlib.import_module(top)
    for module in pkgutil.walk_packages(package.__path__, top + "."):
        if module.name != "gpusched.harness_settings":  # the switch itself
            importlib.import_module(module.name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {HARNESS!r})
print(json.dumps({{"installed": [a.name for a in apps.get_app_configs()], "loaded": loaded}}))
"""


def test_production_settings_install_no_harness_and_the_product_imports_none() -> None:
    result = fresh_settings.run(IMPORT_ALL, GPUSCHED_HARNESS="")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert not set(HARNESS) & set(found["installed"])
    assert set(PRODUCT) - {"gpusched", "common"} <= set(found["installed"])
    assert found["loaded"] == []


def test_the_switch_installs_the_simulator_and_the_benchmarks() -> None:
    code = (
        "import django; django.setup(); from django.apps import apps; "
        "print(apps.is_installed('sim'), apps.is_installed('bench'))"
    )
    result = fresh_settings.run(code, GPUSCHED_HARNESS="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def _stages(dockerfile: str) -> dict[str, list[str]]:
    """Each stage's lines by its name, and "default" for the last (what `docker build` makes)."""
    stages: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in dockerfile.splitlines():
        if line.startswith("FROM "):
            lines = []
            stages[line.split()[-1]] = lines
        lines.append(line)
    stages["default"] = lines
    return stages


def test_the_production_image_holds_no_harness() -> None:
    stages = _stages((fresh_settings.ROOT / "Dockerfile").read_text())
    default = stages["default"]
    assert default[0].split()[1] == "product" and len(default) == 1  # the product alone
    copied = [line.split()[1] for line in stages["product"] if line.startswith("COPY ")]
    assert not set(HARNESS) & set(copied)
    assert not any("GPUSCHED_HARNESS" in line for line in stages["product"])
    assert {"COPY sim sim", "COPY bench bench", "ENV GPUSCHED_HARNESS=1"} <= set(stages["harness"])


def test_compose_turns_the_harness_on_for_the_simulated_roles_only() -> None:
    env = {"GPUSCHED_DB_PASSWORD": "x", "GPUSCHED_SECRET_KEY": "y", "GPUSCHED_METRICS_TOKEN": "z"}
    services = load_compose(COMPOSE_FILE, env)
    with_harness = {n for n, s in services.items() if s.environment.get("GPUSCHED_HARNESS") == "1"}
    assert with_harness == {"migrate", "simulator"}  # the migrations create sim's tables too
