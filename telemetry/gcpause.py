"""Pause CPython's cyclic garbage collector around bulk steps."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Run the block with the cyclic collector off, then restore it.

    Parsing and storing one large scrape allocates about a million small objects, none in a
    cycle: reference counting frees them all, while every allocation-triggered collection
    would walk all the survivors again (a third of the time of a 5,000-node scrape).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
