"""Lanes through the runtime, on both stores' own queues, with a provider of the test's
own that keeps the order it was asked to send in (its list is the witness): a
``notify`` admitted behind a campaign's backlog is sent first, a lower lane with work
keeps its share while the first is busy, and a call may name its lane."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import InvalidInput
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome
from tidings.runtime import Runtime, build_runtime

T0 = 1_790_000_000.0


@dataclass
class Outbox:
    """A provider that keeps the keys it was asked to send, in order."""

    keys: list[str] = field(default_factory=list)
    name: str = "outbox"
    channel: str = "email"
    supports_lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None

    async def send(self, request: SendRequest) -> Outcome:
        self.keys.append(request.key)
        return Accepted(receipt=f"m{len(self.keys)}")

    async def close(self) -> None:
        return None


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 's.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


async def runtime_for(store_url: str, outbox: Outbox, **channel: object) -> Runtime:
    settings = Settings.parse({"store": store_url, "worker": {"batch_size": 10},
                               "channels": {"email": {**channel}}})
    return await build_runtime(settings, clock=FakeClock(T0), providers={"email": outbox},
                               campaigns=[])


@pytest.fixture
async def runtime(store_url: str, outbox: Outbox) -> AsyncIterator[Runtime]:
    rt = await runtime_for(store_url, outbox)
    yield rt
    await rt.close()


async def call(runtime: Runtime, key: str, lane: str | None = None) -> None:
    await runtime.notify(key=key, recipient={"id": key, "email": f"{key}@example.com"},
                         channels=["email"], template="t", lane=lane)


async def test_a_notify_goes_out_ahead_of_a_bulk_backlog(runtime: Runtime,
                                                         outbox: Outbox) -> None:
    # Given a backlog of 60 in the bulk lane, admitted first
    for n in range(60):
        await call(runtime, f"bulk-{n:02d}", lane="bulk")
    # When a call (the transactional lane by default) comes after them
    await call(runtime, "reset-password")
    worker = runtime.worker("email", "w1")
    while await worker.run_once():
        pass
    # Then it is in the first batch the worker sends, and everything is sent once
    assert "reset-password:email" in outbox.keys[:10]
    assert sorted(outbox.keys) == sorted([f"bulk-{n:02d}:email" for n in range(60)]
                                         + ["reset-password:email"])


async def test_a_busy_bulk_lane_keeps_its_share(runtime: Runtime, outbox: Outbox) -> None:
    for n in range(100):
        await call(runtime, f"bulk-{n:03d}", lane="bulk")
    for n in range(200):
        await call(runtime, f"call-{n:03d}")
    worker = runtime.worker("email", "w1")
    for _ in range(10):  # 100 sends while both lanes have work
        await worker.run_once()
    first_hundred = outbox.keys[:100]
    bulk = sum(1 for key in first_hundred if key.startswith("bulk-"))
    assert 8 <= bulk <= 12, bulk  # lane_min_share 0.1 of what is taken


async def test_one_lane_is_first_in_first_out(store_url: str, outbox: Outbox) -> None:
    rt = await runtime_for(store_url, outbox, lanes=["all"])
    try:
        for n in range(15):
            await call(rt, f"k{n:02d}")
        worker = rt.worker("email", "w1")
        while await worker.run_once():
            pass
        assert outbox.keys == [f"k{n:02d}:email" for n in range(15)]
        with pytest.raises(InvalidInput, match="lane") as caught:
            await call(rt, "x", lane="bulk")
        assert caught.value.field == "lane"
    finally:
        await rt.close()


async def test_status_shows_each_lanes_depth_by_name(runtime: Runtime) -> None:
    from tidings.operate import operations

    for n in range(4):
        await call(runtime, f"bulk-{n}", lane="bulk")
    await call(runtime, "reset-password")
    snap = await operations.snapshot(runtime.store, runtime.transport,
                                     channels=runtime.channels, now=runtime.clock.now(),
                                     window_s=300.0)
    status = operations.status(snap, campaigns={}, channels=runtime.channels,
                               lanes=runtime.channel_lanes)

    queue = status.channels["email"].queue
    assert queue is not None
    assert [(lane.name, lane.ready, lane.total) for lane in queue.lanes] == [
        ("transactional", 1, 1), ("bulk", 4, 4)]
