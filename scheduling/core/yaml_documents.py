"""The one loader of the YAML documents people write for gpusched, and the shape checks their
readers make (`Shapes`): scheduler profiles (scheduling/core/profiles.py), Kueue-shaped queue
files (scheduling/core/queueing/config.py, `applyqueues`) and simulator specs (sim/spec.py).

PyYAML's safe loader keeps the last of two equal keys (`weight: 1` then `weight: 5` in one
mapping silently means 5), so a typo or a bad merge changes scheduling without a word; here a
repeated key is an error naming it and its line, as Kubernetes' strict decoding does. Aliases are
counted too: a few lines of nested aliases expand to billions of nodes ("billion laughs"), and
no configuration needs more than MAX_ALIASES of them; so is nesting (MAX_DEPTH).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode

MAX_ALIASES = 100
# Nesting of collections: PyYAML composes recursively (a 5,000-deep document raised
# RecursionError in `applyqueues`); no configuration comes near this.
MAX_DEPTH = 64


class YamlError(ValueError):
    """A document that cannot be read; the message says where and why."""


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlError(f"line {mark.line + 1}: more than {MAX_ALIASES} aliases")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH and not self.check_event(yaml.ScalarEvent, yaml.AliasEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the constructor says so below
                break
            if repeated:
                line = key_node.start_mark.line + 1
                raise YamlError(f"line {line}: duplicate key {key!r}")
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def load_all(text: str) -> list[Any]:
    """Every document of `text` (empty ones, such as after a trailing `---`, as None)."""
    loader = _StrictLoader(text)
    try:
        documents = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            documents.append(loader.get_data())
        return documents
    except yaml.YAMLError as exc:
        raise YamlError(f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def load_one(text: str) -> Any:
    """The single document of `text`."""
    documents = [doc for doc in load_all(text) if doc is not None]
    if len(documents) > 1:
        raise YamlError(f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None


@dataclass(frozen=True)
class Shapes:
    """The shape checks every reader of these documents makes, each raising the reader's own
    error (`error`) with the path of the offending value."""

    error: type[Exception]

    def mapping(self, value: object, path: str, allowed: Set[str] | None = None) -> dict[str, Any]:
        """`value` as a mapping; with `allowed`, one naming no other key."""
        if not isinstance(value, dict):
            raise self.error(f"{path} must be a mapping, got {type(value).__name__}")
        if allowed is not None:
            self.no_unknown(value, allowed, path)
        return value

    def list_of(self, value: object, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(f"{path} must be a list, got {type(value).__name__}")
        return value

    def no_unknown(self, doc: Mapping[str, Any], allowed: Set[str], path: str) -> None:
        unknown = sorted(set(doc) - set(allowed))
        if unknown:
            raise self.error(f"{path}: unknown key {unknown[0]!r}")
