"""A worker whose store or queue is out of reach waits and tries again: given, when, then.

A database restarting, or one with no free connection, fails the worker's receive and
its claims for a while. The worker must not end (a supervisor would restart it into the
same wall, over and over), must not say so once per try, and must deliver everything
once the store answers again: judged by the sandbox's own counts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import pytest

from tidings.core.errors import StoreError, TransportError
from tidings.core.model import Received

if TYPE_CHECKING:
    from conftest import HarnessFactory


class Unreachable:
    """The worker's transport (or store), but its first ``down_for`` receives (or
    claims) fail as a database with no free connection does."""

    def __init__(self, inner: Any, down_for: int, error: Exception) -> None:
        self.inner = inner
        self.down_for = down_for
        self.error = error
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _fail(self) -> None:
        if self.down_for > 0:
            self.down_for -= 1
            self.failed += 1
            raise self.error

    async def receive(self, queue: str, **kwargs: Any) -> list[Received]:
        self._fail()
        got: list[Received] = await self.inner.receive(queue, **kwargs)
        return got

    async def intent_claim_many(self, keys: Any, **kwargs: Any) -> Any:
        self._fail()
        return await self.inner.intent_claim_many(keys, **kwargs)


NO_SLOT = "connection failed: FATAL: sorry, too many clients already"


@pytest.mark.parametrize("where", ["transport", "store"])
async def test_a_worker_waits_out_an_outage_and_delivers_everything_once(
        make_harness: HarnessFactory, where: str, caplog: pytest.LogCaptureFixture) -> None:
    # given twelve intents, and a worker whose queue (or store) fails its first 40 tries
    h = await make_harness()
    keys = [await h.notify(f"ship-1:c{i}") for i in range(12)]
    w = h.worker()
    if where == "transport":
        fault = Unreachable(w.transport, 40, TransportError(NO_SLOT))
        w.transport = fault  # type: ignore[assignment]
    else:
        fault = Unreachable(w.store, 40, StoreError(NO_SLOT))
        w.store = fault  # type: ignore[assignment]

    # when it runs through the outage
    with caplog.at_level(logging.INFO, logger="tidings.worker"):
        running = asyncio.create_task(w.run())
        await h.run_until(lambda: w.stats.accepted == len(keys) and not w._outcomes)
        w.stop()
        await h.guard(running)

    # then it never ended, every intent was sent once, by the sandbox's count
    assert fault.failed == 40
    stats = h.stats()
    assert stats["accepted_keys"] == len(keys) and stats["keys_accepted_twice"] == 0
    # and the outage was told at its start, now and then while it lasted (pauses of up
    # to 5 s, fake time), and at its end, not once per failed try
    said = [r.getMessage() for r in caplog.records if "out of reach" in r.getMessage()
            or "back after" in r.getMessage()]
    assert said[0].startswith("store or queue out of reach") and NO_SLOT in said[0]
    assert 3 <= len(said) <= 10, said
    assert said[-1].startswith("store or queue back after")
