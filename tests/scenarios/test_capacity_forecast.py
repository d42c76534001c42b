"""The capacity forecast against the drain it forecasts: given, when, then.

A worker that has been sending on a paced channel leaves its outcomes in the ledger;
``operations.campaign_forecast`` reads them, counts the campaign's audience and
forecasts the drain before the campaign is enabled; the campaign is then admitted and
delivered, and its drain is measured on the fake clock (the clock driver moves it only
while the worker waits on it, so the figure is the same on every machine). Judged by
the sandbox's counts. ``bench/capacity_check.py`` does the same in real time with
worker processes and 1,000,000 recipients.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

import pytest

from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.core.cron import Schedule
from tidings.core.model import Recipient
from tidings.core.states import State
from tidings.operate import operations
from tidings.operate.capacity import Bound, Verdict

if TYPE_CHECKING:
    from collections.abc import Iterator

    from conftest import Harness, HarnessFactory

QUOTA = 100  # per second: the pacer aims at 98/s
RECIPIENTS = 500
CALIBRATION = 100


def members(n: int) -> Iterator[Recipient]:
    for i in range(n):
        yield Recipient(id=f"{i:06d}", email=f"r{i}@example.com")


def digest(n: int) -> Campaign:
    return Campaign(name="digest", schedule=Schedule("0 9 * * *", "UTC"), channels=("email",),
                    template="digest", version=1, audience=GeneratorAudience(partial(members, n)),
                    expires_after_s=86_400.0, grace_s=2 * 86_400.0)


async def test_the_forecast_of_a_campaign_matches_its_drain(
        make_harness: HarnessFactory) -> None:
    # given a worker that has sent a hundred one-off intents on a channel paced at 98/s
    campaign = digest(RECIPIENTS)
    h: Harness = await make_harness(settings={"channels": {"email": {"quota": f"{QUOTA}/s"}}},
                                    campaigns=[campaign])
    keys = [await h.notify(f"receipt:c{i:04d}") for i in range(CALIBRATION)]
    w = h.worker()
    running = asyncio.create_task(w.run())
    try:
        await h.run_until(lambda: all(h.accepted_by_sandbox(k) for k in keys))

        # when the campaign is forecast before it is enabled
        (line,) = await operations.campaign_forecast(
            h.rt.store, campaign, limits=h.rt.limits, now=h.clock.now(), window_s=60.0,
            workers=1)
        f = line.forecast

        # then the forecast used the audience's count and the rate the ledger observed
        paced = h.rt.limits["email"].paced_per_s
        assert paced is not None
        assert (line.rate_source, f.recipients) == ("observed", RECIPIENTS)
        assert line.observed_rate_per_s == pytest.approx(paced, rel=0.05)
        assert f.bound in (Bound.QUOTA, Bound.WORKERS)
        assert f.drain_s == pytest.approx(RECIPIENTS / f.rate_per_s)
        assert f.verdict is Verdict.OK and f.late == 0

        # and when it is enabled: admitted, then delivered by the same worker
        started = h.clock.now()
        scheduler = h.rt.scheduler()
        while (await scheduler.run_pass(now=h.clock.now())).more:
            pass
        await h.run_until(lambda: h.stats()["accepted_keys"] == CALIBRATION + RECIPIENTS)
        measured = h.clock.now() - started
    finally:
        w.stop()
        await h.guard(running)

    # then the drain took the time forecast, within 10 %
    assert 0.9 <= measured / f.drain_s <= 1.1, (measured, f.drain_s)
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (
        CALIBRATION + RECIPIENTS, 0)
    assert all(i.state is State.ACCEPTED for i in await h.all_intents())
