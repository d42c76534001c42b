"""Claim no further ahead than the channel can send: given, when, then.

On a paced channel a worker holds claims for at most what its share of the pacer
starts in ``worker.claim_ahead_s`` (never more than the lease): a crash then expires
only what was about to be sent, not ``max_held`` intents queued behind the pacer. The
share is the pacer's rate over the workers the shared pacer state has heard from
within a lease (see tests/unit/test_pacing.py for that estimate). Judged by the
sandbox's own counts, on the fake clock.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from tidings.core.errors import StoreError
from tidings.core.model import Received
from tidings.core.states import State
from tidings.delivery.worker import Worker

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

EMAIL = "email"
QUOTA = 20  # per second: the pacer aims at 18/s (2 below the quota)
PACED = 18.0
LEASE_S = 10.0
INTENTS = 120
SETTINGS = {"channels": {EMAIL: {"quota": f"{QUOTA}/s"}},
            "worker": {"lease_s": LEASE_S, "visibility_s": 2 * LEASE_S}}


def record_receives(h: Harness) -> list[int]:
    """The ``max_messages`` of every receive from now on."""
    asked: list[int] = []
    receive = h.rt.transport.receive

    async def recording(queue: str, *, max_messages: int, visibility_s: float,
                        now: float, **lanes: Any) -> list[Received]:
        asked.append(max_messages)
        return await receive(queue, max_messages=max_messages, visibility_s=visibility_s,
                             now=now, **lanes)

    h.rt.transport.receive = recording  # type: ignore[method-assign]
    return asked


async def drive_until_accepted(h: Harness, w: Worker, keys: list[str], *,
                               bound: int | None) -> int:
    """Run the worker until every key is accepted, the fake clock moving only while the
    worker waits on it alone (never ahead of the store's thread); return the most claims
    it held at once, checking every turn of the loop against ``bound``."""
    most = 0

    def observe() -> None:
        nonlocal most
        most = max(most, w.held)
        if bound is not None:
            assert w.held <= bound, (w.held, bound)

    await h.run_until(lambda: all(h.accepted_by_sandbox(k) for k in keys), observe=observe)
    return most


async def test_a_paced_worker_holds_only_what_its_share_starts_in_a_second(
        make_harness: HarnessFactory) -> None:
    # given a hundred and twenty intents on a channel paced at 18/s and one worker
    h: Harness = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"weekly:c{i:02d}") for i in range(INTENTS)]
    w = h.worker()
    depth = math.ceil(PACED * w.config.claim_ahead_s)
    asked = record_receives(h)

    # when it serves the channel
    running = asyncio.create_task(w.run())
    try:
        most = await drive_until_accepted(h, w, keys, bound=depth)
    finally:
        w.stop()
        await h.guard(running)

    # then it never held more claims than a second of the pacer's rate, yet held that
    # many (the pacer was never starved), and every key was accepted once
    assert w.claim_depth == depth
    assert most == depth
    # and, just started (its peers may not have been heard yet), it began at a quarter
    assert asked[0] == math.ceil(depth / 4)
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (INTENTS, 0)
    assert all(i.state is State.ACCEPTED for i in await h.all_intents())


async def test_the_depth_is_split_over_the_workers_the_pacer_has_heard_from(
        make_harness: HarnessFactory) -> None:
    # given another worker of the channel, heard from by the shared pacer state just now
    h: Harness = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"weekly:d{i:02d}") for i in range(INTENTS)]
    other = h.rt.pacer(EMAIL, "other-worker")
    await other.acquire()
    await other.release()
    await other.flush()
    w = h.worker()
    half = math.ceil(PACED / 2 * w.config.claim_ahead_s)

    # when this worker serves the channel while the other is live
    running = asyncio.create_task(w.run())
    try:
        most = await drive_until_accepted(h, w, keys, bound=half)
    finally:
        w.stop()
        await h.guard(running)

    # then it held half the depth at most (and that much), and every key went once
    assert w.claim_depth == half and most == half
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (INTENTS, 0)


async def test_an_unpaced_channel_keeps_max_held(make_harness: HarnessFactory) -> None:
    # given a channel with no quota and more intents than a batch
    h: Harness = await make_harness(settings={"worker": {"batch_size": 150}})
    keys = [await h.notify(f"weekly:e{i:03d}") for i in range(300)]
    w = h.worker()
    asked = record_receives(h)

    # when a worker serves it
    running = asyncio.create_task(w.run())
    try:
        await drive_until_accepted(h, w, keys, bound=None)
    finally:
        w.stop()
        await h.guard(running)

    # then it took whole batches, bounded by max_held alone, as before: no depth was set
    assert w.claim_depth is None
    assert asked[0] == 150
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (300, 0)


class ShareUnreadable:
    """The worker's pacer, but the shared state cannot be read for the worker's share."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def share_per_s(self, *, heard_within_s: float) -> float | None:
        raise StoreError("database is locked")


async def test_a_share_that_cannot_be_read_starts_the_worker_at_a_quarter_of_the_rate(
        make_harness: HarnessFactory) -> None:
    # given a paced channel whose pacer state cannot be read for the share (a restarted
    # worker's first look, while the store recovers from its killed predecessor)
    h: Harness = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"weekly:f{i:02d}") for i in range(30)]
    w = h.worker()
    w.pacer = ShareUnreadable(w.pacer)  # type: ignore[assignment]
    quarter = math.ceil(PACED * w.config.claim_ahead_s / 4)
    asked = record_receives(h)

    # when the worker serves the channel
    running = asyncio.create_task(w.run())
    try:
        most = await drive_until_accepted(h, w, keys, bound=quarter)
    finally:
        w.stop()
        await h.guard(running)

    # then it held no more than a worker alone starts with (a quarter of a second of the
    # whole rate), never max_held, and it sent each once
    assert w.claim_depth == quarter and most == quarter
    assert asked[0] == quarter
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (30, 0)
