"""``ReferenceClock``: the store's time, carried between readings by the monotonic clock.

Every clock here is fake: ``monotonic`` and ``wall`` are counters the test moves, and the
reference is a coroutine that answers what the test says, moving ``monotonic`` by the
round trip it models.
"""

from __future__ import annotations

import asyncio
import logging
import math

import pytest

from tidings.core.clock import Clock, ReferenceClock


class Host:
    """A host's two clocks, and a store whose clock runs ``store_ahead_s`` ahead of
    this host's true time; each reading takes the round trips in ``trips``."""

    def __init__(self, *, wall_off_s: float = 0.0, store_ahead_s: float = 0.0) -> None:
        self.true = 1_780_000_000.0  # true time
        self.mono = 500.0
        self.wall_off_s = wall_off_s
        self.store_ahead_s = store_ahead_s
        self.trips: list[float] = []
        self.failing = False

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.true + self.wall_off_s

    def pass_s(self, seconds: float) -> None:
        self.true += seconds
        self.mono += seconds

    async def read(self) -> float:
        if self.failing:
            raise OSError("the store is down")
        trip = self.trips.pop(0) if self.trips else 0.002
        self.pass_s(trip / 2)  # the request's way there
        reading = self.true + self.store_ahead_s
        self.pass_s(trip / 2)  # the answer's way back
        return reading

    def clock(self, **kwargs: float) -> ReferenceClock:
        return ReferenceClock(self.read, monotonic=self.monotonic, wall=self.wall, **kwargs)


def test_it_is_a_clock() -> None:
    assert isinstance(Host().clock(), Clock)


def test_before_its_first_reading_it_tells_the_hosts_wall_clock() -> None:
    host = Host(wall_off_s=7.0)
    clock = host.clock()
    assert clock.now() == pytest.approx(host.true + 7.0)
    host.pass_s(3.0)
    assert clock.now() == pytest.approx(host.true + 7.0)
    assert not clock.calibrated


async def test_it_keeps_the_stores_time_whatever_the_hosts_wall_clock_says() -> None:
    host = Host(wall_off_s=3600.0, store_ahead_s=0.25)
    clock = host.clock()
    await clock.calibrate()
    assert clock.now() == pytest.approx(host.true + 0.25, abs=1e-6)
    assert clock.host_skew_s == pytest.approx(3600.0 - 0.25)
    # The host's wall clock stepped back by two hours while the process runs: no effect.
    host.wall_off_s = -3600.0
    host.pass_s(10.0)
    assert clock.now() == pytest.approx(host.true + 0.25, abs=1e-6)


async def test_the_reading_with_the_shortest_round_trip_is_kept() -> None:
    host = Host()
    clock = host.clock(samples=3)
    # A slow reading whose answer waited on the way back would put the clock 0.4 s
    # behind, if its midpoint were trusted; the quick one is kept.
    host.trips = [0.8, 0.004, 0.3]

    async def asymmetric() -> float:
        trip = host.trips.pop(0)
        reading = host.true
        host.pass_s(trip)  # the whole trip on the way back
        return reading

    clock._read = asymmetric
    await clock.calibrate()
    assert clock.uncertainty_s == pytest.approx(0.002)
    assert abs(clock.now() - host.true) <= 0.002 + 1e-6


async def test_a_reference_that_steps_back_holds_time_still_until_it_catches_up(
        caplog: pytest.LogCaptureFixture) -> None:
    host = Host()
    clock = host.clock()
    await clock.calibrate()
    handed_out = clock.now()
    host.store_ahead_s = -5.0  # the store's clock stepped back by 5 s
    with caplog.at_level(logging.WARNING, logger="tidings.clock"):
        correction = await clock.calibrate()
    assert correction == pytest.approx(-5.0, abs=0.01)
    [moved] = [r for r in caplog.records if "moved" in r.getMessage()]
    assert getattr(moved, "moved_s", None) == pytest.approx(-5.0, abs=0.01)
    assert clock.now() >= handed_out  # never back
    host.pass_s(4.0)
    assert clock.now() == pytest.approx(handed_out, abs=0.01)  # still held
    host.pass_s(2.0)
    assert clock.now() == pytest.approx(host.true - 5.0, abs=1e-6)  # caught up


async def test_a_host_off_by_more_than_a_second_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    host = Host(wall_off_s=-90.0)
    clock = host.clock()
    with caplog.at_level(logging.WARNING, logger="tidings.clock"):
        await clock.calibrate()
        await clock.calibrate()
    told = [getattr(r, "host_skew_s", None) for r in caplog.records]
    assert told == [pytest.approx(-90.0, abs=0.01)]


async def test_a_small_disagreement_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    host = Host(wall_off_s=0.3, store_ahead_s=0.1)
    clock = host.clock()
    with caplog.at_level(logging.WARNING, logger="tidings.clock"):
        await clock.calibrate()
        host.store_ahead_s = 0.5
        await clock.calibrate()
    assert caplog.text == ""


async def test_the_offset_setting_shifts_the_stores_time() -> None:
    host = Host()
    clock = host.clock(offset=86_400.0)
    await clock.calibrate()
    assert clock.now() == pytest.approx(host.true + 86_400.0, abs=1e-6)


async def test_a_reading_that_is_no_time_is_refused() -> None:
    host = Host()
    clock = host.clock()

    async def nan() -> float:
        return math.nan

    clock._read = nan
    with pytest.raises(ValueError, match="nan"):
        await clock.calibrate()
    assert not clock.calibrated


async def test_keeping_time_follows_the_store_and_rides_out_a_failed_reading() -> None:
    host = Host()
    clock = host.clock()
    await clock.calibrate()
    keeper = asyncio.create_task(clock.keep(0))
    host.store_ahead_s = 30.0
    for _ in range(5):
        await asyncio.sleep(0)
    assert clock.now() == pytest.approx(host.true + 30.0, abs=1e-6)
    host.failing = True
    for _ in range(5):
        await asyncio.sleep(0)
    assert not keeper.done()  # a failed reading is not the end of it
    host.pass_s(1.0)
    assert clock.now() == pytest.approx(host.true + 30.0, abs=1e-6)  # the last offset kept
    keeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await keeper
