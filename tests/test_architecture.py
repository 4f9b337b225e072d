"""The layering and size rules of docs/architecture.md, read from the source (no code is run):
the layer table of which package may import which, with no cycle; only scheduling's services
write its rows and publish its events; modules stay small or say why not; a pod's resources are
converted by their one conversion each way."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
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

# The layer table (docs/architecture.md): the first-party packages each package may import at run
# time (imports under `if TYPE_CHECKING:` aside). The project wires the apps together; the apps
# lean on the leaf library; telemetry is a leaf scheduling reads; the harness may use the product,
# never the other way round.
LAYERS: dict[str, set[str]] = {
    "gpusched": {"common", "dashboard", "api", "kube", "scheduling", "telemetry"},  # the project
    "dashboard": {"common", "api", "scheduling", "telemetry"},
    "api": {"common", "scheduling", "telemetry"},
    "kube": {"common", "scheduling"},
    "scheduling": {"common", "telemetry"},
    "telemetry": {"common"},
    "common": set(),  # the leaf library
    "sim": {"common", "scheduling", "telemetry"},  # the harness
    "bench": {"common", "dashboard", "api", "kube", "scheduling", "telemetry", "sim"},
}
# Where a package may import another only through some of its modules.
ONLY_THROUGH = {("scheduling", "telemetry"): ("telemetry.selectors",)}
# The pure core imports nothing of the shell (and no Django: ruff's TID251).
PURE = "scheduling.core"

# A pod's resources (scheduling.core.types.Resources) are converted in these modules only.
RESOURCE_FIELDS = {f.name for f in fields(Resources)} | set(pod_resources.COLUMNS)
CONVERSIONS = {
    "scheduling/core/types.py",  # Resources itself, PodRequest.of / .resources
    "scheduling/core/resource_requests.py",  # Kubernetes quantities
    "scheduling/pod_resources.py",  # the Pod row
}
# Spelling out this many resource fields in one call is a conversion written again.
SPELLED_OUT = 4

# Only scheduling/services writes scheduling's rows and publishes its events (in one
# transaction); everything else calls a service. These calls on scheduling's models are writes.
WRITERS = "scheduling/services/"
WRITES = {
    "save",
    "delete",
    "create",
    "get_or_create",
    "update_or_create",
    "update",
    "bulk_create",
    "bulk_update",
}
BULK_HELPERS = {"insert_rows", "update_rows"}  # scheduling.bulk
# The writes outside scheduling/services there are, each with its reason.
OTHER_WRITERS = {
    ("scheduling/events.py", "insert_rows"): "`publish` itself: the outbox rows a service hands it",
    ("scheduling/bulk.py", "bulk_create"): "the bulk helpers services call, on the model given",
    ("kube/services.py", "update_rows"): "kube's own rows (KubePod), not scheduling's",
    ("kube/services.py", "insert_rows"): "kube's own rows (KubePod), not scheduling's",
}


def _modules(under: Path = ROOT) -> Iterator[tuple[str, Path]]:
    for path in sorted(under.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if not SKIPPED_DIRS.intersection(relative.parts):
            yield relative.as_posix(), path


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per process (every test here reads the whole tree)."""
    return ast.parse(path.read_text(), path.relative_to(ROOT).as_posix())


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:` (annotations only: no import at run time)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return found


def _imported(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The modules a module imports at run time (module-level or inside functions alike)."""
    annotations_only = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            # `from scheduling import services` imports scheduling.services
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def _package_imports() -> Iterator[tuple[str, str, str]]:
    """(importing package, imported module, where) for every import between first-party
    packages."""
    for package in LAYERS:
        for name, path in _modules(ROOT / package):
            for line, module in _imported(_tree(path)):
                target = module.split(".")[0]
                if target in LAYERS and target != package:
                    yield package, module, f"{name}:{line}"


def test_every_import_between_packages_is_in_the_layer_table() -> None:
    found = [
        f"{where} imports {module}"
        for package, module, where in _package_imports()
        if module.split(".")[0] not in LAYERS[package]
    ]
    assert not found, found


def test_a_package_reads_another_only_through_the_modules_the_table_names() -> None:
    found = [
        f"{where} imports {module}"
        for package, module, where in _package_imports()
        if (package, module.split(".")[0]) in ONLY_THROUGH
        and not module.startswith(ONLY_THROUGH[(package, module.split(".")[0])])
        and module != module.split(".")[0]  # the package itself (`from telemetry import x`)
    ]
    assert not found, found


def test_the_core_imports_nothing_of_the_shell() -> None:
    found = [
        f"{name}:{line} imports {module}"
        for name, path in _modules(ROOT / "scheduling" / "core")
        for line, module in _imported(_tree(path))
        if module.split(".")[0] in LAYERS and not module.startswith(PURE)
    ]
    assert not found, found


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of `graph` as the nodes along it, or [] if there is none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for successor in sorted(graph.get(node, ())):
            if cycle := visit(successor, [*path, node]):
                return cycle
        done.add(node)
        return []

    return next((c for node in sorted(graph) if (c := visit(node, []))), [])


def test_neither_the_layer_table_nor_the_imports_have_a_cycle() -> None:
    assert _cycle(LAYERS) == []
    imports: dict[str, set[str]] = defaultdict(set)
    for package, module, _ in _package_imports():
        imports[package].add(module.split(".")[0])
    assert _cycle(imports) == []
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # it finds one


def test_the_product_imports_nothing_of_the_harness() -> None:
    product = {p for p in LAYERS if p not in {"sim", "bench"}}
    assert all(not {"sim", "bench"} & LAYERS[p] for p in product)


# --- one writer and emitter ---------------------------------------------------------------------


def _writes(name: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Writes of scheduling's rows and outbox events in one module: a write method called on a
    model of scheduling.models (through its manager, or on a row bound from it), events.publish,
    and the bulk helpers. Writes through another object's related manager are not seen."""
    models: set[str] = set()
    publish: set[str] = set()
    bulk: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "scheduling.models":
            models |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "scheduling.events":
            publish |= {
                alias.asname or alias.name for alias in node.names if alias.name == "publish"
            }
        elif isinstance(node, ast.ImportFrom) and node.module == "scheduling.bulk":
            bulk |= {alias.asname or alias.name for alias in node.names}
    rows = set(models)  # names bound to a model, a queryset of one or a row of one
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value, targets = (
                node.value,
                node.targets if isinstance(node, ast.Assign) else [node.target],
            )
        elif isinstance(node, ast.For | ast.comprehension):
            value, targets = node.iter, [node.target]
        else:
            continue
        if _root(value) in models:
            rows |= {
                n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)
            }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Name) and callee.id in publish | bulk:
            yield node.lineno, callee.id
        elif isinstance(callee, ast.Attribute):
            if callee.attr == "publish" and _root(callee.value) == "events":
                yield node.lineno, "events.publish"
            elif callee.attr in WRITES and _root(callee.value) in rows:
                yield node.lineno, f"{_root(callee.value)}...{callee.attr}"
            elif callee.attr in WRITES and name == "scheduling/bulk.py":
                yield node.lineno, callee.attr  # on whatever model it is given


def _root(node: ast.expr) -> str:
    """The name an attribute/call/subscript chain starts from (`Pod.objects.filter(...)`: Pod)."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def test_only_scheduling_services_write_its_rows_and_publish_its_events() -> None:
    found = [
        f"{name}:{line} {what}"
        for name, path in _modules()
        if not name.startswith(WRITERS)
        for line, what in _writes(name, _tree(path))
        if (name, what) not in OTHER_WRITERS
    ]
    assert not found, found


def test_the_writer_check_sees_each_kind_of_write() -> None:
    source = """
from scheduling import events
from scheduling.models import Node, Pod
from kube.models import KubePod
Pod.objects.filter(pk=1).update(phase="Pending")
row = Node(name="n")
row.save()
for pod in Pod.objects.all():
    pod.delete()
events.publish(payload)
KubePod.objects.create(uid="u")
kept = {"a": 1}
kept.update(b=2)
"""
    found = [what for _, what in sorted(_writes("kube/example.py", ast.parse(source)))]
    assert found == ["Pod...update", "row...save", "pod...delete", "events.publish"]


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
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else ""
            fields = _spelled_out(node)
            if callee != "Resources" and len(fields) >= SPELLED_OUT:
                found.append(f"{name}:{node.lineno} spells out {sorted(fields)}")
    assert not found, found
