"""Suppression at the worker: a STOP answer suppresses the number, and a send to a
suppressed address ends ``suppressed`` with no provider call.

On the embedded store with a fake clock and a provider of the test's own that counts
what it is asked to send (its count is the witness, not the ledger).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.cron import Schedule
from tidings.core.model import IntentDraft, Recipient, SendRequest
from tidings.core.outcomes import RECIPIENT_STOPPED, Accepted, Outcome, Permanent
from tidings.core.states import State
from tidings.core.suppression import Reason, Suppression
from tidings.delivery.compose import Composer, Suppressed
from tidings.delivery.worker import Worker
from tidings.operate.snapshot import Totals, sli
from tidings.runtime import Runtime, build_runtime
from tidings.stores.base import Store

T0 = 1_790_000_000.0
STOPPED = "+15550009999"


@dataclass
class Phones:
    """An SMS provider whose STOP list is ``stopped``; ``sent`` is every send it saw."""

    stopped: set[str] = field(default_factory=lambda: {STOPPED})
    sent: list[str] = field(default_factory=list)
    name: str = "phones"
    channel: str = "sms"
    supports_lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None

    async def send(self, request: SendRequest) -> Outcome:
        self.sent.append(request.to)
        if request.to in self.stopped:
            return Permanent(reason="HTTP 400: Twilio error 21610: unsubscribed recipient",
                             code=RECIPIENT_STOPPED)
        return Accepted(receipt=f"SM{len(self.sent)}")

    async def close(self) -> None:
        return None


@pytest.fixture
async def phones() -> Phones:
    return Phones()


@pytest.fixture
async def runtime(tmp_path: Path, phones: Phones) -> AsyncIterator[Runtime]:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 's.db'}",
                               "channels": {"sms": {"kind": "sms"}}})
    rt = await build_runtime(settings, clock=FakeClock(T0), providers={"sms": phones},
                             campaigns=[])
    yield rt
    await rt.close()


async def text(runtime: Runtime, key: str, phone: str) -> Worker:
    """Given a text to ``phone`` admitted and worked through; the worker that did it."""
    await runtime.notify_many([NotifyRequest(key=key, recipient={"id": key, "phone": phone},
                                             channels=["sms"], template="t")])
    worker = runtime.worker("sms", "w1")
    while await worker.run_once():
        pass
    return worker


async def state(runtime: Runtime, key: str) -> State:
    intent = await runtime.store.intent_get(key)
    assert intent is not None
    return intent.state


async def test_a_stop_answer_rejects_the_send_and_suppresses_the_number(
        runtime: Runtime, phones: Phones) -> None:
    await text(runtime, "first", STOPPED)

    assert await state(runtime, "first:sms") is State.REJECTED
    found = await runtime.store.suppressions_for([(STOPPED, "sms")])
    [entry] = found.values()
    assert (entry.reason, entry.source, entry.key) == (Reason.SMS_STOP, "intent:first:sms",
                                                       "first:sms")
    assert entry.detail is not None and "21610" in entry.detail
    assert "address_suppressed" in [e.type for e in await runtime.store.events_for(
        "first:sms")]


async def test_any_other_refusal_suppresses_nothing(runtime: Runtime, phones: Phones) -> None:
    phones.stopped.clear()

    await text(runtime, "first", STOPPED)

    assert await runtime.store.suppression_list() == []


# ---------------------------------------------------------------- checked before every send


def manual(address: str, kind: str = "sms", reason: Reason = Reason.MANUAL) -> Suppression:
    return Suppression(address=address, kind=kind, reason=reason, source="operator:test",
                       created_at=T0)


async def test_the_next_send_to_a_stopped_number_ends_suppressed_unsent(
        runtime: Runtime, phones: Phones) -> None:
    await text(runtime, "first", STOPPED)

    worker = await text(runtime, "second", STOPPED)

    intent = await runtime.store.intent_get("second:sms")
    assert intent is not None
    assert (intent.state, intent.reason) == (State.SUPPRESSED, "sms_stop")
    assert phones.sent == [STOPPED]  # the provider saw the first send only
    events = await runtime.store.events_for("second:sms")
    assert [e.type for e in events][-1] == "suppressed"
    assert (worker.stats.suppressed, worker.stats.rejected, worker.stats.sent) == (1, 0, 0)


async def test_a_suppressed_send_is_counted_apart_and_not_eligible_for_the_sli(
        runtime: Runtime, phones: Phones) -> None:
    await runtime.store.suppression_add_many([manual("+15550001234")], now=T0)
    await text(runtime, "held-back", "+15550001234")
    await text(runtime, "fine", "+15550004321")

    [summary] = await runtime.store.intent_summary(now=T0, since=T0 - 60)
    totals = Totals()
    totals.add(summary)

    assert (summary.suppressed, summary.rejected, summary.dead) == (1, 0, 0)
    assert sli(totals) == 1.0  # one accepted in time of one eligible
    assert phones.sent == ["+15550004321"]


class CountingStore:
    """The store, counting the suppression reads the composer makes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: list[list[tuple[str, str]]] = []

    async def suppressions_for(self, pairs: Sequence[tuple[str, str]]
                               ) -> dict[tuple[str, str], Suppression]:
        self.reads.append(list(pairs))
        return await self.store.suppressions_for(pairs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_claimed_batch_reads_the_list_once_under_normalised_addresses(
        runtime: Runtime) -> None:
    await runtime.store.suppression_add_many([manual("ann@example.com", "email"),
                                              manual("+15550001111", "sms")], now=T0)
    counting = CountingStore(runtime.store)
    gate = Composer(store=counting, kinds={"sms": "sms"},  # type: ignore[arg-type]
                    clock=FakeClock(T0))
    drafts = [("a", "news", "Ann@Example.com"), ("b", "news", "bob@example.com"),
              ("c", "sms", "+15550001111"), ("d", "sms", "+15550002222"),
              ("e", "news", "ANN@example.COM")]
    await runtime.store.intent_admit([
        IntentDraft(key=k, channel=c, recipient_id=k, address=a, template="t", due_at=T0)
        for k, c, a in drafts], now=T0)
    claims = await runtime.store.intent_claim_many([k for k, _, _ in drafts], owner="w",
                                                   lease_s=30, now=T0)

    results = await gate.compose([c.intent for c in claims if c.intent is not None], now=T0)

    assert len(counting.reads) == 1
    assert sorted(counting.reads[0]) == [("+15550001111", "sms"), ("+15550002222", "sms"),
                                         ("ann@example.com", "email"),
                                         ("bob@example.com", "email")]
    assert [type(r).__name__ for r in results] == [
        "Suppressed", "Ready", "Suppressed", "Ready", "Suppressed"]
    assert results[0] == Suppressed(key="a", reason="manual")


# ---------------------------------------------------------------- campaign admission


async def test_campaign_admission_leaves_suppressed_recipients_out_and_counts_them(
        tmp_path: Path, phones: Phones) -> None:
    members = [Recipient(id="c1", email="Ann@Example.com", phone="+15550000001"),
               Recipient(id="c2", email="bob@example.com", phone=STOPPED),
               Recipient(id="c3", email="cy@example.com")]
    weekly = Campaign(name="weekly", schedule=Schedule("0 9 * * *", "UTC"),
                      channels=("email", "sms"), template="weekly", version=1,
                      audience=GeneratorAudience(lambda: iter(members)))
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'c.db'}",
                               "channels": {"email": {"kind": "email"},
                                            "sms": {"kind": "sms"}}})
    # 2026-09-16 09:00:10 UTC, ten seconds after the occurrence's logical time.
    now = 1_789_549_210.0
    rt = await build_runtime(settings, clock=FakeClock(now), campaigns=[weekly],
                             providers={"email": Phones(), "sms": phones})
    try:
        await rt.store.suppression_add_many([manual("ann@example.com", "email"),
                                             manual(STOPPED, "sms", Reason.SMS_STOP)], now=now)

        result = await rt.scheduler().run_pass(now=now)

        [occurrence] = await rt.store.occurrence_list("weekly")
        counts = await rt.store.intent_counts()
    finally:
        await rt.close()
    # c1 by sms, c2 by email, c3 by email (no phone: skipped on sms)
    assert (result.admitted, result.suppressed, result.skipped) == (3, 2, 1)
    assert (occurrence.admitted, occurrence.suppressed, occurrence.skipped) == (3, 2, 1)
    assert sum(sum(by.values()) for by in counts.values()) == 3
