"""Recording provider events on the embedded store: once per (provider, message id, type),
beside ``accepted``, moving the intent on (delivered), orphans kept and adopted later, and the
verify -> parse -> record order of one request."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidings.core.clock import FakeClock
from tidings.core.errors import InvalidInput
from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.recovery.provider_reports import receive
from tidings.recovery.reconciler import Reconciler
from tidings.stores.base import Change, ProviderEvent, ProviderEventType, RecordResult
from tidings.stores.sqlite import SqliteStore
from tidings.transports.sqlite import SqliteTransport
from tidings.webhooks import adopt_orphans, record_events
from tidings.webhooks.verify import HmacVerifier, SignatureError, WebhookRequest, signature_header

T0 = 1_780_000_000.0
DELIVERED, BOUNCED = ProviderEventType.DELIVERED, ProviderEventType.BOUNCED


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(f"sqlite:///{tmp_path / 'w.db'}")
    await opened.migrate(now=T0)
    yield opened
    await opened.close()


async def accepted(store: SqliteStore, key: str, receipt: str, *, now: float = T0) -> None:
    """Given an intent the provider accepted under ``receipt``."""
    await store.intent_admit([IntentDraft(key=key, channel="email", recipient_id="c1",
                                          address="c1@example.com", template="t/v1",
                                          due_at=now)], now=now)
    [claim] = await store.intent_claim_many([key], owner="w", lease_s=30, now=now)
    await store.intent_apply_many([Change(key=key, from_state=State.CLAIMED,
                                          to_state=State.ACCEPTED, event="accepted",
                                          lease_token=claim.token, receipt=receipt)], now=now)


def report(message_id: str, type: ProviderEventType = DELIVERED) -> ProviderEvent:
    return ProviderEvent(provider="generic", message_id=message_id, type=type, at=T0 + 1,
                         detail="mx said ok")


async def test_a_report_is_recorded_once_beside_accepted(store: SqliteStore) -> None:
    await accepted(store, "order-1:email", "m-1")

    first = await record_events(store, [report("m-1")], T0 + 2)
    replay = await record_events(store, [report("m-1")], T0 + 3)

    assert (first, replay) == (RecordResult(recorded=1, moved=1), RecordResult(duplicates=1))
    events = await store.events_for("order-1:email")
    assert [e.type for e in events] == ["selected", "claimed", "accepted", "provider_delivered"]
    assert events[-1].detail == "generic: mx said ok"
    intent = await store.intent_get("order-1:email")
    assert intent is not None and intent.state is State.DELIVERED


async def test_an_empty_batch_touches_nothing(store: SqliteStore) -> None:
    assert await record_events(store, [], T0) == RecordResult()
    assert await store.provider_event_counts() == []


async def test_an_unknown_message_id_is_kept_as_an_orphan_and_logged(
    store: SqliteStore, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="tidings.webhooks"):
        result = await record_events(store, [report("nobody-knows", BOUNCED)], T0)

    assert result == RecordResult(orphaned=1)
    [orphan] = await store.provider_events_orphaned()
    assert (orphan.message_id, orphan.type, orphan.key) == ("nobody-knows", BOUNCED, None)
    assert "orphaned=1" in caplog.text and "nobody-knows" in caplog.text


async def test_adopt_orphans_attaches_reports_that_beat_the_acceptance(
    store: SqliteStore,
) -> None:
    await record_events(store, [report("m-early")], T0)        # the webhook came first
    await record_events(store, [report("m-stale")], T0 - 7200)  # another system's message
    await accepted(store, "k-early", "m-early", now=T0 + 1)
    await accepted(store, "k-stale", "m-stale", now=T0 + 1)

    adopted = await adopt_orphans(store, T0 + 5, window_s=3600)

    assert adopted == 1
    assert (await store.events_for("k-early"))[-1].type == "provider_delivered"
    assert [o.message_id for o in await store.provider_events_orphaned()] == ["m-stale"]


# ---------------------------------------------------------------- one request, in order


def request(body: bytes, *, secret: str = "s3cret", at: int = int(T0)) -> WebhookRequest:
    return WebhookRequest(url="https://h.test/v1/webhooks/generic",
                          headers={"X-Tidings-Signature": signature_header(secret, at, body)},
                          body=body)


async def test_receive_verifies_then_parses_then_records(store: SqliteStore) -> None:
    await accepted(store, "k1", "m-1")
    verifier = HmacVerifier(["s3cret"], clock=FakeClock(T0))
    body = b'[{"message_id":"m-1","event":"delivered"},{"message_id":"m-1","event":"opened"}]'

    outcome = await receive(request(body), verifier=verifier, store=store, now=T0)

    assert (outcome.provider, outcome.recorded, outcome.ignored) == ("generic", 1, 1)
    assert outcome.ignored_kinds == ("opened",)


async def test_a_forged_or_malformed_request_records_nothing(store: SqliteStore) -> None:
    await accepted(store, "k1", "m-1")
    verifier = HmacVerifier(["s3cret"], clock=FakeClock(T0))
    body = b'{"message_id":"m-1","event":"delivered"}'

    with pytest.raises(SignatureError):
        await receive(request(body, secret="guess"), verifier=verifier, store=store, now=T0)
    with pytest.raises(InvalidInput):
        await receive(request(b'{"message_id":"m-1"}'), verifier=verifier, store=store, now=T0)

    assert await store.provider_event_counts() == []
    assert "provider_delivered" not in [e.type for e in await store.events_for("k1")]


async def test_the_reconciler_sweep_adopts_orphans(store: SqliteStore) -> None:
    await record_events(store, [report("SM-early")], now=T0)
    await accepted(store, "k-early", "SM-early", now=T0 + 1)

    result = await Reconciler(store=store, transport=SqliteTransport(store.db),
                              providers={}).run_pass(now=T0 + 2)

    assert result.orphans_adopted == 1
    assert [e.type for e in await store.events_for("k-early")][-1] == "provider_delivered"
