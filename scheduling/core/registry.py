"""Every plugin the core knows, by the name profiles use. Explicit on purpose: grep a name, find its
code.

Shells extend it by building their own mapping (`{**REGISTRY, "DefaultBinder": ...}`), never by
mutation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from scheduling.core.plugins import (
    default_binder,
    gpu_allocator,
    gpu_topology,
    node_resources_fit,
    priority_sort,
)

PluginFactory = Callable[[Mapping[str, Any] | None], object]

REGISTRY: Mapping[str, PluginFactory] = {
    priority_sort.NAME: priority_sort.new,
    node_resources_fit.NAME: node_resources_fit.new,
    gpu_topology.NAME: gpu_topology.new,
    gpu_topology.SEEDS_NAME: partial(gpu_topology.new, name=gpu_topology.SEEDS_NAME),
    gpu_allocator.NAME: gpu_allocator.new,
    default_binder.NAME: default_binder.new,
}

# Enabled in every profile unless disabled, like kube-scheduler's defaults: HEAD before the
# profile's own plugins at each point, TAIL after them (the allocator must see what topology plugins
# already chose).
DEFAULT_HEAD: Mapping[str, tuple[tuple[str, int], ...]] = {
    "queueSort": ((priority_sort.NAME, 0),),
    "preFilter": ((node_resources_fit.NAME, 0),),
    "filter": ((node_resources_fit.NAME, 0),),
    "score": ((node_resources_fit.NAME, 1),),
    "bind": ((default_binder.NAME, 0),),
}
DEFAULT_TAIL: Mapping[str, tuple[tuple[str, int], ...]] = {
    "reserve": ((gpu_allocator.NAME, 0),),
}
