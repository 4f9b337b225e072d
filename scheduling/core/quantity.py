"""Kubernetes resource quantities, read with bounded cost, in the units the scheduler counts.

One parser for every way a quantity reaches gpusched: the REST API (api/quantities.py), the
Kubernetes translation of nodes, pods and NodeResourceTopology zones (kube/translate.py,
kube/nrt.py, so the extender too) and the queue YAML (scheduling/core/queueing/). The grammar is
Kubernetes' (apimachinery `resource.Quantity`):

    quantity ::= [+-] number [suffix | exponent]
    number   ::= digits | digits "." [digits] | "." digits
    suffix   ::= Ki Mi Gi Ti Pi Ei | n u m "" k M G T P E
    exponent ::= (e | E) [+-] digits

Converting a text such as `1e999990` to an exact number costs seconds of CPU (a million-digit
integer), so the order of magnitude is read from the text first and anything beyond any cluster
(more than 10^21 of the base unit: bytes, cores, devices) or finer than 10^-30 is refused before a
number is built. What passes is an exact Fraction of small size, so every later conversion costs
microseconds.

Device resources are counts: `nvidia.com/gpu`, `gpusched.io/gpu-milli`, `nvidia.com/mig-<profile>`
and `pods` take plain numbers (`4`, or `2.5` GPUs in a quota), never a suffix or an exponent
(`4Gi` GPUs is a typo, not 4,294,967,296 GPUs).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE, MIG_RESOURCE_PREFIX

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
MIB = 2**20

MAX_TEXT = 64
# Decimal orders of magnitude a quantity may have, in its base unit: 10^21 bytes is a zettabyte
# (a 5,000-node cluster has about 10^16), 10^-30 is far below Kubernetes' nano.
MAX_ORDER = 21
MIN_ORDER = -30
# Far beyond any node, small enough for every database column they land in.
MAX_CPU_MILLI = 10**9
MAX_MEMORY_MIB = 2**40
MAX_GPUS = 1024
MAX_MIG = 64
MAX_PODS = 10**6
MAX_QUOTA_GPU_MILLI = MAX_GPUS * 10**6  # a quota may cover a million GPUs' worth of shares
MAX_QUOTA_COUNT = 10**9

EXAMPLES = "e.g. '8', '500m' or '64Gi'"

_QUANTITY = re.compile(
    r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_LOG10_2 = math.log10(2)


class QuantityError(ValueError):
    """A quantity that cannot be used; the caller puts the key or field in front of the message."""


def is_count(resource: str) -> bool:
    """Resources counted in devices or objects: plain numbers only."""
    return resource in (GPU_RESOURCE, GPU_MILLI_RESOURCE, PODS) or resource.startswith(
        MIG_RESOURCE_PREFIX
    )


def parse(value: object, *, count: bool = False, negative: bool = False) -> Fraction:
    """A quantity as an exact number of its base unit. `count`: a plain number (no suffix, no
    exponent); `negative`: allow a minus sign. Raises QuantityError (a clear message) for
    anything else, in time bounded by the length of the text."""
    return _parse_text(_text(value), count, negative)


@lru_cache(maxsize=4096)
def _parse_text(text: str, count: bool, negative: bool) -> Fraction:
    """`parse` of a text, kept for the texts seen last: a cluster's pods and nodes repeat a few
    quantities ("500m", "8Gi", "1") thousands of times, and a Fraction is immutable."""
    match = _QUANTITY.match(text)
    if match is None or not (match.group(2) or match.group(3)):
        raise QuantityError(f"{text!r} is not a quantity ({EXAMPLES})")
    sign, whole, fraction, exponent, suffix = match.groups()
    fraction = fraction or ""
    if count and (exponent is not None or suffix):
        raise QuantityError(f"a count takes a plain number such as '4', not {text!r}")
    if sign == "-" and not negative:
        raise QuantityError(f"must not be negative (got {text!r})")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return Fraction(0)
    power10 = int(exponent) if exponent is not None else _DECIMAL_SUFFIX.get(suffix or "", 0)
    power2 = _BINARY_SUFFIX.get(suffix or "", 0)
    # The value lies in [10^(order-1), 10^order): known from the text alone.
    order = len(digits) - len(fraction) + power10 + power2 * _LOG10_2
    if order > MAX_ORDER + 1:
        raise QuantityError(f"{text!r} is more than any cluster has (at most about 1e{MAX_ORDER})")
    if order < MIN_ORDER:
        raise QuantityError(f"{text!r} is below any resource's smallest unit")
    amount = Fraction(int(digits)) * Fraction(10) ** (power10 - len(fraction)) * 2**power2
    return Fraction(-amount if sign == "-" else amount)


def _text(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"must be a quantity string ({EXAMPLES})")
    if isinstance(value, int) and value.bit_length() > 4 * MAX_TEXT:
        raise QuantityError(f"is more than any cluster has (at most about 1e{MAX_ORDER})")
    text = str(value).strip()
    if len(text) > MAX_TEXT:
        raise QuantityError(f"{text[:16]!r}... is longer than {MAX_TEXT} characters")
    return text


# --- conversions: an exact amount to the scheduler's integer units -----------------------------


def whole(amount: Fraction, what: str) -> int:
    if amount.denominator != 1:
        raise QuantityError(f"must be a whole number of {what} (got {float(amount):g})")
    return int(amount)


def bounded(value: int, limit: int, what: str) -> int:
    if value > limit:
        raise QuantityError(f"{value} {what} is more than any cluster has (at most {limit})")
    return value


def cpu_milli(amount: Fraction, *, round_up: bool = True) -> int:
    milli = amount * 1000
    return bounded(math.ceil(milli) if round_up else math.floor(milli), MAX_CPU_MILLI, "milli-CPU")


def memory_mib(amount: Fraction, *, round_up: bool = True) -> int:
    mib = amount / MIB
    return bounded(math.ceil(mib) if round_up else math.floor(mib), MAX_MEMORY_MIB, "MiB")


def pod_units(resource: str, amount: Fraction) -> int:
    """One pod's request of a known `resource` in scheduler units: milli-CPU, MiB, whole GPUs,
    milli of one GPU (1..999), MIG instances."""
    if resource == CPU:
        return cpu_milli(amount)
    if resource == MEMORY:
        return memory_mib(amount)
    if resource == GPU_RESOURCE:
        if 0 < amount < 1:
            raise QuantityError(
                f"whole GPUs only; ask for a share with {GPU_MILLI_RESOURCE} (e.g. '500')"
            )
        return bounded(whole(amount, "GPUs"), MAX_GPUS, "GPUs")
    if resource == GPU_MILLI_RESOURCE:
        milli = whole(amount, "milli-GPUs")
        if milli >= 1000:
            raise QuantityError(
                f"a share of one GPU is 1..999 milli-GPUs; ask for whole GPUs with {GPU_RESOURCE}"
            )
        return milli
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return bounded(whole(amount, "MIG instances"), MAX_MIG, "MIG instances")
    raise QuantityError(f"unknown resource {resource!r}")


def quota_units(resource: str, amount: Fraction) -> int:
    """A quota or limit of `resource`: GPUs in milli-GPUs (shares count), counts whole."""
    if resource == GPU_RESOURCE:
        return bounded(math.ceil(amount * 1000), MAX_QUOTA_GPU_MILLI, "milli-GPUs")
    if resource == CPU:
        return cpu_milli(amount)
    if resource == MEMORY:
        return memory_mib(amount)
    if resource == PODS:
        return bounded(whole(amount, "pods"), MAX_PODS, "pods")
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return bounded(whole(amount, "MIG instances"), MAX_QUOTA_COUNT, "MIG instances")
    raise QuantityError(f"unknown resource {resource!r}")


def pod_amount(resource: str, value: object) -> int:
    """parse() then pod_units()."""
    return pod_units(resource, parse(value, count=is_count(resource)))


def quota_amount(resource: str, value: object) -> int:
    """parse() then quota_units()."""
    return quota_units(resource, parse(value, count=is_count(resource)))
