"""A pacer backend for one process: the state lives in a dict."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class MemoryPacerBackend:
    """Atomic read-modify-write over an in-process dict (tests, single-process use)."""

    def __init__(self) -> None:
        self._states: dict[str, dict[str, Any]] = {}
        self._pauses: dict[str, float] = {}
        self._lock = asyncio.Lock()

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        async with self._lock:
            current = self._states.get(channel)
            new, result = fn(copy.deepcopy(current) if current is not None else None)
            self._states[channel] = new
            return result

    async def pacer_read(self, channel: str) -> dict[str, Any] | None:
        state = self._states.get(channel)
        return copy.deepcopy(state) if state is not None else None

    async def pacer_pause(self, channel: str, until: float) -> None:
        self._pauses[channel] = max(self._pauses.get(channel, 0.0), until)

    async def pacer_paused_until(self, channel: str) -> float:
        return self._pauses.get(channel, 0.0)
