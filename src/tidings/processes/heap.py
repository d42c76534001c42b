"""Giving freed heap back to the system, once a minute, in a long-running service.

A service that runs for weeks allocates and frees in more than one thread (the SQLite
store's connection has a thread of its own). glibc gives each such thread an arena of
its own and keeps the pages freed in it: a scheduler on SQLite grew by about 2 MB every
10 minutes in a half-hour soak with nothing left allocated (``malloc_trim`` handed it
all back). ``malloc_trim(0)`` returns the free pages at the top and inside every arena.
It runs on a thread of the default executor, not the event loop: it holds each arena's
lock while it walks it, which the loop need not wait for. Where the C library has no
``malloc_trim`` (musl, macOS), there is nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger("tidings.service")

TRIM_EVERY_S = 60.0


def find_trim() -> Callable[[], object] | None:
    """The C library's ``malloc_trim(0)``, or None where there is none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


async def trim_loop(stopping: asyncio.Event, *, every_s: float = TRIM_EVERY_S,
                    trim: Callable[[], object] | None = None) -> int:
    """Until ``stopping``, trim the heap every ``every_s``; returns the trims made."""
    trim = trim or find_trim()
    if trim is None:
        return 0
    made = 0
    while not stopping.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=every_s)
        if stopping.is_set():
            break
        try:
            await asyncio.to_thread(trim)
        except Exception:  # the process's work matters more than its footprint
            log.debug("malloc_trim failed", exc_info=True)
            return made
        made += 1
    return made
