"""GPU facts from NVIDIA GPU Feature Discovery node labels (all values are strings).

Full GPUs: `nvidia.com/gpu.product` (sanitised, e.g. `NVIDIA-H100-80GB-HBM3`), `gpu.count`,
`gpu.memory` (MiB), `gpu.sharing-strategy` (`none` / `time-slicing` / `mps`), `gpu.replicas`; a
time-sliced product carries a `-SHARED` suffix. MIG `single` strategy: `mig.strategy=single`, the
product gets `-MIG-<profile>` and count/memory describe one MIG device; the resource stays
`nvidia.com/gpu`. MIG `mixed`: `mig.strategy=mixed` and one `nvidia.com/mig-<profile>` resource per
profile (reference/wire-formats.md §5).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from scheduling.core.types import SharingMode

PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY = "nvidia.com/mig.strategy"
SLICES_GI = "nvidia.com/gpu.slices.gi"

_MIG_SUFFIX = re.compile(r"-MIG-(\d+g\.\d+gb(?:\.me)?)$")
_PROFILE = re.compile(r"^(\d+)g\.\d+gb(?:\.me)?$")


@dataclass(frozen=True, slots=True)
class GfdFacts:
    product: str  # the label as GFD wrote it
    model: str  # the product without the -SHARED / -MIG-<profile> suffixes
    memory_mib: int  # per GPU; 0 when unknown (or per MIG device under the single strategy)
    count: int | None  # physical GPUs, when GFD says
    sharing: SharingMode
    replicas: int
    mig_strategy: str  # "none" | "single" | "mixed"
    mig_profile: str  # the one profile of a `single`-strategy node
    slices_gi: int | None  # GPU instance slices of that profile

    @property
    def slices_per_gpu(self) -> int:
        """Compute slices of one physical GPU: 4 on the A30, 7 on the A100 / H100 / H200 / B200."""
        return 4 if "A30" in self.model else 7


def facts(labels: Mapping[str, str]) -> GfdFacts:
    product = labels.get(PRODUCT, "")
    model = product
    mig_profile = ""
    match = _MIG_SUFFIX.search(model)
    if match:
        mig_profile = match.group(1)
        model = model[: match.start()]
    if model.endswith("-SHARED"):
        model = model[: -len("-SHARED")]
    strategy = labels.get(SHARING_STRATEGY, "").lower()
    replicas = _int(labels.get(REPLICAS)) or 1
    if strategy == "mps":
        sharing = SharingMode.MPS
    elif strategy == "time-slicing" or (not strategy and replicas > 1):
        sharing = SharingMode.TIME_SLICING
    else:
        sharing = SharingMode.EXCLUSIVE
    mig_strategy = labels.get(MIG_STRATEGY, "none").lower()
    if mig_strategy not in ("none", "single", "mixed"):
        mig_strategy = "none"
    return GfdFacts(
        product=product,
        model=model,
        memory_mib=0 if mig_profile else (_int(labels.get(MEMORY)) or 0),
        count=_int(labels.get(COUNT)),
        sharing=sharing,
        replicas=replicas,
        mig_strategy=mig_strategy,
        mig_profile=mig_profile if mig_strategy == "single" else "",
        slices_gi=_int(labels.get(SLICES_GI)),
    )


def profile_slices(profile: str) -> int:
    """GPU-instance slices of a MIG profile (`3g.40gb` -> 3); 0 when the name is no profile."""
    match = _PROFILE.match(profile)
    return int(match.group(1)) if match else 0


def mig_profile_of_product(product: str) -> str:
    """The profile a `single`-strategy product label names (`...-MIG-1g.10gb` -> `1g.10gb`)."""
    match = _MIG_SUFFIX.search(product)
    return match.group(1) if match else ""


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
