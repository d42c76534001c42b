"""The send-time gate: claimed intents become ready sends, or settle unsent with a reason.

Runs on the embedded SQLite store with a fake clock; the intents are really admitted
and claimed, as the worker would hand them over.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import Content, Intent, IntentDraft
from tidings.core.preferences import Preference
from tidings.core.states import State, check
from tidings.delivery.compose import Cancelled, Composed, Composer, Deferred, Ready, Rejected
from tidings.delivery.templates import TemplateSet
from tidings.stores.base import ClaimKind, Store
from tidings.stores.sqlite import SqliteStore

# 2026-05-28 08:00 UTC: 10:00 in Berlin, 04:00 in New York.
NOW = 1_779_955_200.0
TEMPLATES = TemplateSet.from_mapping({
    "weekly-digest/v3": {
        "subject.txt": "Digest for {{ name }}",
        "body.txt": "Hi {{ name }}, {{ count }} new.",
        "body.html": "<b>{{ name }}</b>",
        "sms.txt": "{{ count }} new, {{ name }}",
    },
    "broken/v1": {"subject.txt": "{{ nope }}", "body.txt": "x", "sms.txt": "{{ nope }}"},
})
DATA = {"name": "Ada", "count": 3}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(f"sqlite:///{tmp_path / 'compose.db'}")
    await opened.migrate(now=NOW)
    yield opened
    await opened.close()


class CountingStore:
    """The store, counting the preference reads the composer makes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: list[list[tuple[str, str]]] = []

    async def preferences_for(
        self, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Preference]:
        self.reads.append(list(pairs))
        return await self.store.preferences_for(pairs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def claimed(store: Store, *specs: dict[str, Any]) -> list[Intent]:
    """Given intents admitted and claimed by a worker; each spec overrides draft fields."""
    drafts = []
    for i, spec in enumerate(specs):
        fields: dict[str, Any] = {
            "key": f"k{i}", "channel": "email", "recipient_id": f"cust_{i}",
            "address": f"cust_{i}@example.com", "template": "weekly-digest/v3",
            "data": json.dumps(DATA), "due_at": NOW - 60, **spec}
        drafts.append(IntentDraft(**fields))
    await store.intent_admit(drafts, now=NOW - 60)
    claims = await store.intent_claim_many([d.key for d in drafts], owner="w1", lease_s=30,
                                           now=NOW)
    assert all(c.kind is ClaimKind.CLAIMED and c.intent is not None for c in claims)
    return [c.intent for c in claims if c.intent is not None]


def composer(store: Any, clock: FakeClock | None = None, **kwargs: Any) -> Composer:
    options: dict[str, Any] = {"kinds": {"email": "email", "sms": "sms"},
                               "templates": {"email": TEMPLATES, "sms": TEMPLATES}, **kwargs}
    return Composer(store=store, clock=clock or FakeClock(NOW), **options)


# ---------------------------------------------------------------- ready


async def test_an_intent_with_templates_is_ready_with_its_content_rendered(
    store: SqliteStore,
) -> None:
    email, sms = await claimed(store, {}, {"channel": "sms", "address": "+4915100000001"})

    [first, second] = await composer(store).compose([email, sms], now=NOW)

    assert isinstance(first, Ready) and isinstance(second, Ready)
    assert first.request.content == Content(subject="Digest for Ada", text="Hi Ada, 3 new.",
                                             html="<b>Ada</b>")
    assert second.request.content == Content(text="3 new, Ada")
    assert (first.request.key, first.request.to, first.request.recipient_id,
            first.request.template, first.request.data_json) == (
        email.key, email.address, email.recipient_id, email.template, email.data)


async def test_a_channel_without_templates_sends_identifiers_only(store: SqliteStore) -> None:
    [intent] = await claimed(store, {"template": "anything-at-all"})

    [result] = await composer(store, templates={}).compose([intent], now=NOW)

    assert isinstance(result, Ready) and result.request.content is None


async def test_a_channel_without_a_kind_is_neither_address_checked_nor_rendered(
    store: SqliteStore,
) -> None:
    [intent] = await claimed(store, {"channel": "sandbox", "address": "not an address"})

    [result] = await composer(store).compose([intent], now=NOW)

    assert isinstance(result, Ready) and result.request.content is None


# ---------------------------------------------------------------- not sent


async def test_an_opted_out_recipient_is_cancelled_whatever_else_is_wrong(
    store: SqliteStore,
) -> None:
    [intent] = await claimed(store, {"address": "broken", "template": "broken/v1"})
    await store.preference_set(Preference(recipient_id=intent.recipient_id, channel="email",
                                          opted_out=True), now=NOW)

    assert await composer(store).compose([intent], now=NOW) == [
        Cancelled(key=intent.key, reason="opted_out")]


async def test_an_invalid_address_is_rejected_without_quoting_it(store: SqliteStore) -> None:
    email, sms = await claimed(store, {"address": "ada.lovelace@@example.com"},
                               {"channel": "sms", "address": "0151 0000 0001"})

    results = await composer(store).compose([email, sms], now=NOW)

    assert [type(r) for r in results] == [Rejected, Rejected]
    reasons = [r.reason for r in results if isinstance(r, Rejected)]
    assert reasons[0].startswith("invalid email address")
    assert reasons[1].startswith("phone number is not in E.164 form")
    assert "lovelace" not in reasons[0] and "0151" not in reasons[1]


async def test_a_render_error_is_rejected_with_its_reason(store: SqliteStore) -> None:
    [intent] = await claimed(store, {"template": "broken/v1"})

    [result] = await composer(store).compose([intent], now=NOW)

    assert result == Rejected(key=intent.key,
                              reason="template 'broken/v1' subject.txt: undefined variable 'nope'")


async def test_data_that_is_not_a_json_object_is_rejected(store: SqliteStore) -> None:
    [intent] = await claimed(store, {"data": "[1, 2]"})

    [result] = await composer(store).compose([intent], now=NOW)

    assert result == Rejected(key=intent.key,
                              reason="template 'weekly-digest/v3': data is not a JSON object")


async def test_quiet_hours_defer_to_their_end_on_the_recipients_clock(store: SqliteStore) -> None:
    [intent] = await claimed(store, {"channel": "sms", "address": "+15550001"})
    await store.preference_set(Preference(
        recipient_id=intent.recipient_id, channel="sms", quiet_start="22:00",
        quiet_end="07:00", timezone="America/New_York"), now=NOW)
    clock = FakeClock(NOW)  # 04:00 in New York

    [result] = await composer(store, clock).compose([intent])

    assert result == Deferred(key=intent.key, until=NOW + 3 * 3600)


async def test_a_broken_template_is_rejected_now_rather_than_after_quiet_hours(
    store: SqliteStore,
) -> None:
    [intent] = await claimed(store, {"template": "broken/v1"})
    await store.preference_set(Preference(
        recipient_id=intent.recipient_id, channel="email", quiet_start="00:00",
        quiet_end="23:00", timezone="UTC"), now=NOW)

    [result] = await composer(store).compose([intent], now=NOW)

    assert isinstance(result, Rejected)


async def test_quiet_hours_elsewhere_or_on_another_channel_do_not_hold_a_send(
    store: SqliteStore,
) -> None:
    [intent] = await claimed(store, {})
    await store.preference_set(Preference(
        recipient_id=intent.recipient_id, channel="sms", quiet_start="00:00",
        quiet_end="23:59", timezone="UTC"), now=NOW)
    await store.preference_set(Preference(
        recipient_id=intent.recipient_id, channel="email", quiet_start="22:00",
        quiet_end="07:00", timezone="Europe/Berlin"), now=NOW)  # 10:00 there

    [result] = await composer(store).compose([intent], now=NOW)

    assert isinstance(result, Ready)


# ---------------------------------------------------------------- the batch


async def test_a_batch_reads_preferences_once_and_answers_in_order(store: SqliteStore) -> None:
    specs: list[dict[str, Any]] = []
    for i in range(40):
        specs.append({"recipient_id": f"cust_{i % 10}"})
        specs.append({"channel": "sms", "recipient_id": f"cust_{i % 10}",
                      "address": "+4915100000001"})
    intents = await claimed(store, *specs)
    for i in range(0, 10, 2):
        await store.preference_set(Preference(recipient_id=f"cust_{i}", channel="sms",
                                              opted_out=True), now=NOW)
    counting = CountingStore(store)

    results = await composer(counting).compose(intents, now=NOW)

    assert len(counting.reads) == 1 and len(counting.reads[0]) == 20
    assert [r.key for r in results] == [i.key for i in intents]
    cancelled = {r.key for r in results if isinstance(r, Cancelled)}
    assert cancelled == {i.key for i in intents
                         if i.channel == "sms" and int(i.recipient_id[5:]) % 2 == 0}


async def test_an_empty_batch_reads_nothing(store: SqliteStore) -> None:
    counting = CountingStore(store)

    assert await composer(counting).compose([], now=NOW) == []
    assert counting.reads == []


def test_every_unsent_outcome_is_a_transition_out_of_claimed() -> None:
    outcomes: list[Composed] = [Rejected(key="k", reason="r"), Cancelled(key="k"),
                                Deferred(key="k", until=NOW)]
    for outcome in outcomes:
        assert not isinstance(outcome, Ready)
        check(State.CLAIMED, outcome.to_state)
    assert [o.to_state for o in outcomes if not isinstance(o, Ready)] == [
        State.REJECTED, State.CANCELLED, State.RETRYABLE]


# ---------------------------------------------------------------- configuration


def test_a_channel_kind_must_be_email_or_sms(store: SqliteStore) -> None:
    with pytest.raises(ConfigurationError) as raised:
        composer(store, kinds={"push": "push"}, templates={})
    assert raised.value.field == "channels.push.kind"


def test_a_channel_with_templates_needs_a_kind(store: SqliteStore) -> None:
    with pytest.raises(ConfigurationError) as raised:
        composer(store, kinds={"email": "email"}, templates={"sms": TEMPLATES})
    assert raised.value.field == "channels.sms.kind"
