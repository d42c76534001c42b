"""Per-recipient throttles at the worker, on the embedded store with a fake clock and a
provider of the test's own that counts what it is asked to send (its count is the
witness, not the ledger)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome, Transient
from tidings.core.states import State
from tidings.operate.snapshot import Totals, sli
from tidings.runtime import Runtime, build_runtime

WINDOW = 1_790_000_040.0  # a minute starts (1_790_000_040 is 60 * 29_833_334)
T0 = WINDOW + 40.0  # 40 s into it


@dataclass
class Phones:
    """An SMS provider; ``sent`` is every (number, time) it was asked to send."""

    clock: FakeClock
    fail: set[str] = field(default_factory=set)
    sent: list[tuple[str, float]] = field(default_factory=list)
    name: str = "phones"
    channel: str = "sms"
    supports_lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None

    async def send(self, request: SendRequest) -> Outcome:
        self.sent.append((request.to, self.clock.now()))
        if request.key in self.fail:
            return Transient(reason="HTTP 503")
        return Accepted(receipt=f"SM{len(self.sent)}")

    async def close(self) -> None:
        return None


def settings(tmp_path: Path, mode: str = "drop") -> Settings:
    return Settings.parse({"store": f"sqlite:///{tmp_path / 's.db'}", "channels": {
        "sms": {"kind": "sms", "throttle": {"limit": 2, "window_s": 60, "mode": mode}}}})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


async def runtime_for(tmp_path: Path, clock: FakeClock, phones: Phones,
                      mode: str = "drop") -> Runtime:
    return await build_runtime(settings(tmp_path, mode), clock=clock,
                               providers={"sms": phones}, campaigns=[])


@pytest.fixture
async def phones(clock: FakeClock) -> Phones:
    return Phones(clock)


@pytest.fixture
async def runtime(tmp_path: Path, clock: FakeClock, phones: Phones) -> AsyncIterator[Runtime]:
    rt = await runtime_for(tmp_path, clock, phones)
    yield rt
    await rt.close()


async def texts(runtime: Runtime, keys: list[str], phone: str = "+15550001234") -> None:
    await runtime.notify_many([NotifyRequest(key=k, recipient={"id": "cust-1", "phone": phone},
                                             channels=["sms"], template="t") for k in keys])


async def work(runtime: Runtime) -> None:
    worker = runtime.worker("sms", "w1")
    while await worker.run_once():
        pass


async def test_sends_over_the_limit_end_throttled_naming_the_rule(
        runtime: Runtime, phones: Phones) -> None:
    await texts(runtime, ["a", "b", "c", "d"])

    await work(runtime)

    assert len(phones.sent) == 2  # the provider saw two sends only
    intents = [await runtime.store.intent_get(f"{k}:sms") for k in "abcd"]
    states = sorted(i.state for i in intents if i is not None)
    assert states == [State.ACCEPTED, State.ACCEPTED, State.THROTTLED, State.THROTTLED]
    throttled = [i for i in intents if i is not None and i.state is State.THROTTLED]
    assert all(i.reason == "channel:sms (2 per 60 s)" for i in throttled)
    events = await runtime.store.events_for(throttled[0].key)
    assert events[-1].type == "throttled"
    assert await runtime.store.intent_throttled_counts() == {
        ("sms", "channel:sms (2 per 60 s)"): 2}
    # not a failure, and not eligible for the SLI
    totals = Totals()
    for s in await runtime.store.intent_summary(now=T0, since=T0 - 60):
        totals.add(s)
    assert (totals.throttled, totals.dead, totals.rejected, sli(totals)) == (2, 0, 0, 1.0)


async def test_a_send_the_provider_refused_hands_its_reservation_back(
        runtime: Runtime, phones: Phones, clock: FakeClock) -> None:
    phones.fail.add("a:sms")
    await texts(runtime, ["a"])
    await work(runtime)
    window = WINDOW
    assert await runtime.store.throttle_sends("channel:sms", "cust-1", window) == 0

    await texts(runtime, ["b", "c"])
    await work(runtime)

    assert await runtime.store.throttle_sends("channel:sms", "cust-1", window) == 2
    assert sorted(t for t, _ in phones.sent) == ["+15550001234"] * 3


async def test_defer_mode_sends_the_rest_in_the_next_window(
        tmp_path: Path, clock: FakeClock, phones: Phones) -> None:
    rt = await runtime_for(tmp_path, clock, phones, mode="defer")
    try:
        await texts(rt, ["a", "b", "c", "d", "e"])
        await work(rt)
        assert len(phones.sent) == 2
        deferred = [i for k in "abcde" if (i := await rt.store.intent_get(f"{k}:sms"))
                    is not None and i.state is State.RETRYABLE]
        assert len(deferred) == 3
        assert {i.next_attempt_at for i in deferred} == {WINDOW + 60.0}
        [event] = [e for e in await rt.store.events_for(deferred[0].key)
                   if e.type == "throttle_deferred"]
        # The event names its rule and when the send comes back, and the recipient by
        # surrogate only (docs/throttles.md, "What shows it")
        back = datetime.fromtimestamp(WINDOW + 60.0, tz=UTC).isoformat(timespec="seconds")
        assert event.detail is not None and "throttled by channel:" in event.detail
        assert f"back at {back.replace('+00:00', 'Z')}" in event.detail
        assert "recipient " in event.detail and "@" not in event.detail

        clock.advance(20.0)  # the next window
        await work(rt)
        clock.advance(60.0)  # and the one after
        await work(rt)

        # two per window, judged by the provider's own send times
        per_window: dict[float, int] = {}
        for _, at in phones.sent:
            n = (at - WINDOW) // 60
            per_window[n] = per_window.get(n, 0) + 1
        assert sorted(per_window.values()) == [1, 2, 2]
        final = [await rt.store.intent_get(f"{k}:sms") for k in "abcde"]
        assert [i.state if i else None for i in final] == [State.ACCEPTED] * 5
    finally:
        await rt.close()


@pytest.mark.parametrize(("throttle", "field"), [
    ({"limit": 0, "window_s": 60}, "channels.sms.throttle.limit"),
    ({"limit": 1, "window_s": 0}, "channels.sms.throttle.window_s"),
    ({"limit": 1}, "channels.sms.throttle.window_s"),
    ({"limit": 1, "window_s": 60, "mode": "skip"}, "channels.sms.throttle.mode"),
])
def test_a_bad_throttle_is_refused_naming_its_field(throttle: dict[str, Any],
                                                    field: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.parse({"channels": {"sms": {"kind": "sms", "throttle": throttle}}})
    assert err.value.field == field


async def test_a_prune_drops_the_counts_of_windows_that_ended(
        runtime: Runtime, phones: Phones, clock: FakeClock) -> None:
    from tidings.recovery.retention import prune, retention_config

    await texts(runtime, ["a", "b"])
    await work(runtime)
    assert await runtime.store.throttle_sends("channel:sms", "cust-1", WINDOW) == 2

    await prune(runtime.store, retention_config(runtime.settings), now=clock.now())
    assert await runtime.store.throttle_sends("channel:sms", "cust-1", WINDOW) == 2  # live
    clock.advance(20.0)  # the window ends
    await prune(runtime.store, retention_config(runtime.settings), now=clock.now())

    assert await runtime.store.throttle_sends("channel:sms", "cust-1", WINDOW) == 0


def test_a_campaign_throttle_overrides_the_channel_rule_on_each_of_its_channels() -> None:
    from tidings.runtime import throttle_rules

    parsed = Settings.parse({
        "channels": {"sms": {"kind": "sms", "throttle": {"limit": 3, "window_s": 86400}},
                     "email": {"kind": "email"}},
        "campaigns": {"promo": {
            "cron": "0 10 * * *", "channels": ["sms", "email"], "template": "promo",
            "audience": {"kind": "sql", "query": "select 1"},
            "throttle": {"limit": 1, "window_s": 604800, "mode": "defer"}}}})
    rules = throttle_rules(parsed)
    promo_sms, channel_sms = rules.rule_for("sms", "promo"), rules.rule_for("sms", None)
    promo_email = rules.rule_for("email", "promo")
    assert promo_sms is not None and channel_sms is not None and promo_email is not None
    assert (promo_sms.name, promo_sms.limit, promo_sms.mode.value) == (
        "campaign:promo/sms", 1, "defer")
    assert (channel_sms.name, channel_sms.limit) == ("channel:sms", 3)
    assert promo_email.name == "campaign:promo/email"
    assert rules.rule_for("email", None) is None
    with pytest.raises(ConfigurationError) as err:
        Settings.parse({"campaigns": {"promo": {
            "cron": "0 10 * * *", "channels": ["sms"], "template": "promo",
            "audience": {"kind": "sql", "query": "select 1"},
            "throttle": {"limit": 1, "window_s": -1}}}})
    assert err.value.field == "campaigns.promo.throttle.window_s"
