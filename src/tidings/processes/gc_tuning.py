"""The cyclic garbage collector tuned for a serving process (a worker, an API process).

What the process built before serving (modules, settings, the runtime, the app) is
frozen out of every collection, and the youngest generation is collected every
``young`` allocations instead of CPython's 700. A delivery or a request allocates a few
dozen to a few hundred tracked objects that reference counting frees almost all of; at
the default threshold the collector ran every few of them and promoted the ones in
flight, for older collections to walk again and again: a sixth to a third of a
worker's CPU with one Redis round trip per send, a quarter of an API process's under
200 connections (``bench/RESULTS.md``). Cycles are still collected, less often.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Allocations (net of frees) between two young-generation collections while a worker
#: serves.
WORKER_GC_YOUNG = 10_000

#: The same for an API process: a request makes hundreds.
API_GC_YOUNG = 20_000


def tune_for_serving(young: int, *, collect: bool = True) -> tuple[int, int, int]:
    """Freeze what exists now out of the collector's sight and collect the youngest
    generation every ``young`` allocations; returns the thresholds it replaced.

    ``collect`` first collects everything, so no garbage is frozen with it. A worker
    passes False: its start is on the path of every restart after a crash, and the full
    collection of what it imported cost 30-40 ms of CPU there while finding nothing
    (``bench/startup.py``: 0 unreachable objects once the runtime is built)."""
    before = gc.get_threshold()
    if collect:
        gc.collect()
    gc.freeze()
    gc.set_threshold(young, *before[1:])
    return before


@contextlib.contextmanager
def serving_gc(young: int = WORKER_GC_YOUNG, *, collect: bool = True) -> Iterator[None]:
    """``tune_for_serving`` while the block runs; the collector put back after, also
    when the block raises."""
    before = tune_for_serving(young, collect=collect)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
