"""Waiting on a condition in real time, bounded by a hang guard."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def until(predicate: Callable[[], Any], what: str, guard_s: float) -> None:
    """Return as soon as ``predicate()`` (awaited if it is a coroutine) is truthy;
    raise AssertionError naming ``what`` after ``guard_s`` seconds."""
    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
