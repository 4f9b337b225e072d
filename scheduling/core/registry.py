"""Every plugin the core knows, by the name profiles use. Explicit on purpose: grep a name, find its
code.

Shells extend it by building their own mapping (`{**REGISTRY, "DefaultBinder": ...}`), never by
mutation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from scheduling.core import domains
from scheduling.core.plugins import (
    best_fit,
    coscheduling,
    default_binder,
    dot_product,
    fragmentation,
    gpu_allocator,
    gpu_clustering,
    gpu_packing,
    gpu_topology,
    load_aware,
    node_resources_fit,
    preemption,
    priority_sort,
    random_fit,
)

PluginFactory = Callable[[Mapping[str, Any] | None], object]

REGISTRY: Mapping[str, PluginFactory] = {
    priority_sort.NAME: priority_sort.new,
    node_resources_fit.NAME: node_resources_fit.new,
    gpu_topology.NAME: gpu_topology.new,
    gpu_topology.SEEDS_NAME: partial(gpu_topology.new, name=gpu_topology.SEEDS_NAME),
    gpu_allocator.NAME: gpu_allocator.new,
    default_binder.NAME: default_binder.new,
    fragmentation.NAME: fragmentation.new,
    load_aware.NAME: load_aware.new,
    # The FGD paper's baselines (reference/fgd-and-baselines.md §4).
    random_fit.NAME: random_fit.new,
    dot_product.NAME: dot_product.new,
    gpu_clustering.NAME: gpu_clustering.new,
    gpu_packing.NAME: gpu_packing.new,
    best_fit.NAME: best_fit.new,
    # Queues and gangs: PostFilter preemption and the all-or-nothing Permit.
    preemption.NAME: preemption.new,
    coscheduling.NAME: coscheduling.new,
    # Not a plugin of an extension point: the batch's choice of topology domains across nodes
    # for pod sets that ask for them (pluginConfig only: {algorithm: BestFit | LeastFragmenting}).
    domains.PLUGIN: domains.domain_fit,
}

# Enabled in every profile unless disabled, like kube-scheduler's defaults: HEAD before the
# profile's own plugins at each point, TAIL after them (the allocator must see what topology plugins
# already chose).
DEFAULT_HEAD: Mapping[str, tuple[tuple[str, int], ...]] = {
    "queueSort": ((priority_sort.NAME, 0),),
    "preFilter": ((node_resources_fit.NAME, 0),),
    "filter": ((node_resources_fit.NAME, 0),),
    "postFilter": ((preemption.NAME, 0),),
    "score": ((node_resources_fit.NAME, 1),),
    "bind": ((default_binder.NAME, 0),),
}
DEFAULT_TAIL: Mapping[str, tuple[tuple[str, int], ...]] = {
    "preFilter": ((coscheduling.NAME, 0),),
    "reserve": ((gpu_allocator.NAME, 0),),
    "permit": ((coscheduling.NAME, 0),),
}
