"""The layering and size rules of docs/architecture.md, read from the source (no code is run):
`scheduling/` imports nothing of the apps around it, modules stay small or say why not, and a
pod's resources are converted by their one conversion each way."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

from scheduling import pod_resources
from scheduling.core.types import Resources

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {".venv", "node_modules", "tests", "migrations", "build", "dist"}
MAX_LINES = 600
# A longer module says why in its first lines, e.g. "Over 600 lines because ...".
REASON = "over 600 lines because"
REASON_WITHIN = 10

# The shell's apps that `scheduling/` (the scheduler and its data) must not depend on.
OUTER_APPS = {"api", "dashboard", "kube"}

# A pod's resources (scheduling.core.types.Resources) are converted in these modules only.
RESOURCE_FIELDS = {f.name for f in fields(Resources)} | set(pod_resources.COLUMNS)
CONVERSIONS = {
    "scheduling/core/types.py",  # Resources itself, PodRequest.of / .resources
    "scheduling/core/resource_requests.py",  # Kubernetes quantities
    "scheduling/pod_resources.py",  # the Pod row
}
# Spelling out this many resource fields in one call is a conversion written again.
SPELLED_OUT = 4


def _modules(under: Path = ROOT) -> Iterator[tuple[str, Path]]:
    for path in sorted(under.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if not SKIPPED_DIRS.intersection(relative.parts):
            yield relative.as_posix(), path


def _imported(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_scheduling_imports_nothing_of_the_apps_around_it() -> None:
    found = [
        f"{name}:{line} imports {module}"
        for name, path in _modules(ROOT / "scheduling")
        for line, module in _imported(ast.parse(path.read_text(), name))
        if module.split(".")[0] in OUTER_APPS
    ]
    assert not found, found


def test_modules_stay_under_600_lines_or_say_why() -> None:
    too_long = {}
    for name, path in _modules():
        lines = path.read_text().splitlines()
        head = "\n".join(lines[:REASON_WITHIN]).lower()
        if len(lines) > MAX_LINES and REASON not in head:
            too_long[name] = len(lines)
    assert not too_long, too_long


def _spelled_out(call: ast.Call) -> set[str]:
    """The resource fields a call names: as keywords (`PodRequest(cpu_milli=...)`) or as column
    names (`values_list("cpu_milli", ...)`)."""
    named = {k.arg for k in call.keywords if k.arg}
    named |= {a.value for a in call.args if isinstance(a, ast.Constant) and type(a.value) is str}
    return named & RESOURCE_FIELDS


def test_a_pods_resources_are_converted_in_one_place_each_way() -> None:
    found = []
    for name, path in _modules():
        if name in CONVERSIONS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else ""
            fields = _spelled_out(node)
            if callee != "Resources" and len(fields) >= SPELLED_OUT:
                found.append(f"{name}:{node.lineno} spells out {sorted(fields)}")
    assert not found, found
