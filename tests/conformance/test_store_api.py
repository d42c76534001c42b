"""The Store conformance suite, operator API part: tokens, the trigger replay guard and
log, publish idempotency, and the summaries behind status, metrics and timelines.

Runs unchanged on every store adapter; scenarios are given / when / then with every
``now`` explicit.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from tidings.core.errors import StoreError
from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.stores.base import (
    ApiToken,
    Change,
    ClaimKind,
    IdempotentResponse,
    PublishWrite,
    Store,
)

T0 = 1_000_000.0


def token(id: str = "a1b2c3", *scopes: str) -> ApiToken:
    return ApiToken(id=id, name=f"token {id}", scopes=scopes or ("viewer",),
                    secret_hash="ab" * 32, created_at=T0)


def draft(key: str, *, channel: str = "email", campaign: str | None = "digest",
          recipient: str = "cust_1", due_at: float = T0,
          expires_at: float | None = None) -> IntentDraft:
    return IntentDraft(key=key, channel=channel, recipient_id=recipient,
                       address=f"{recipient}@example.com", template="digest/v1",
                       due_at=due_at, expires_at=expires_at, campaign=campaign,
                       occurrence=f"{campaign}/2026-08-14" if campaign else None)


async def settle(store: Store, key: str, state: State, *, now: float,
                 detail: str | None = None) -> None:
    """Given an admitted intent, claimed and moved to ``state`` at ``now``."""
    [claim] = await store.intent_claim_many([key], owner="w1", lease_s=30, now=now - 1)
    assert claim.kind is ClaimKind.CLAIMED
    applied = await store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=state, event=state.value,
        lease_token=claim.token, receipt="rcpt", detail=detail,
        next_attempt_at=now + 5 if state is State.RETRYABLE else None)], now=now)
    assert applied == [key]


# ---------------------------------------------------------------- tokens


async def test_a_token_is_stored_listed_and_revoked_once(store: Store) -> None:
    await store.api_token_insert(token("t1", "operator", "publish"))
    await store.api_token_insert(token("t2"))

    got = await store.api_token_get("t1")
    assert got == token("t1", "operator", "publish")
    assert [t.id for t in await store.api_token_list()] == ["t1", "t2"]
    assert await store.api_token_get("nope") is None

    revoked = await store.api_token_revoke("t1", now=T0 + 10)
    again = await store.api_token_revoke("t1", now=T0 + 20)

    assert revoked is not None and revoked.revoked_at == T0 + 10
    assert again is not None and again.revoked_at == T0 + 10  # the first time is kept
    assert await store.api_token_revoke("nope", now=T0) is None
    still = await store.api_token_get("t2")
    assert still is not None and still.revoked_at is None


async def test_a_token_keeps_its_expiry(store: Store) -> None:
    await store.api_token_insert(replace(token("t1"), expires_at=T0 + 30 * 86400.5))
    await store.api_token_insert(token("t2"))

    got = await store.api_token_get("t1")
    assert got is not None and got.expires_at == T0 + 30 * 86400.5
    assert [t.expires_at for t in await store.api_token_list()] == [T0 + 30 * 86400.5, None]
    revoked = await store.api_token_revoke("t1", now=T0 + 1)
    assert revoked is not None and revoked.expires_at == T0 + 30 * 86400.5


async def test_a_token_id_is_unique(store: Store) -> None:
    await store.api_token_insert(token("t1"))

    with pytest.raises(StoreError):
        await store.api_token_insert(token("t1", "publish"))

    got = await store.api_token_get("t1")
    assert got is not None and got.scopes == ("viewer",)


# ---------------------------------------------------------------- trigger guard and log


async def test_a_signature_is_claimed_once_until_it_expires(store: Store) -> None:
    assert await store.api_signature_claim("sig-a", now=T0, expires_at=T0 + 600) is True
    assert await store.api_signature_claim("sig-a", now=T0 + 1, expires_at=T0 + 601) is False
    assert await store.api_signature_claim("sig-b", now=T0 + 1, expires_at=T0 + 601) is True

    # Past its expiry the record is pruned (the caller refuses such old timestamps anyway).
    assert await store.api_signature_claim("sig-a", now=T0 + 600, expires_at=T0 + 1200) is True


async def test_concurrent_claims_of_one_signature_let_exactly_one_through(store: Store) -> None:
    results = await asyncio.gather(*(
        store.api_signature_claim("sig", now=T0, expires_at=T0 + 600) for _ in range(8)))

    assert sorted(results) == [False] * 7 + [True]


async def test_triggers_are_counted_per_occurrence_and_campaign(store: Store) -> None:
    assert await store.api_trigger_record("digest", "2026-08-14", now=T0) == 1
    assert await store.api_trigger_record("digest", "2026-08-14", now=T0 + 3) == 2
    assert await store.api_trigger_record("digest", "2026-08-21", now=T0 + 9) == 1
    assert await store.api_trigger_record("reminder", "2026-08-14", now=T0) == 1

    assert await store.api_trigger_counts() == {"digest": 3, "reminder": 1}


# ---------------------------------------------------------------- idempotency


def answer(key: str, request_hash: str, *, status: int = 202, body: str = '{"ok":true}',
           at: float = T0) -> IdempotentResponse:
    return IdempotentResponse(key=key, request_hash=request_hash, status=status, body=body,
                              created_at=at)


async def test_the_first_answer_to_an_idempotency_key_wins(store: Store) -> None:
    assert await store.api_idempotency_get("k1") is None
    first = answer("k1", "h1")

    assert await store.api_idempotency_put(first) == first
    later = await store.api_idempotency_put(answer("k1", "h2", status=409, body="{}",
                                                   at=T0 + 5))

    assert later == first
    assert await store.api_idempotency_get("k1") == first


async def test_concurrent_puts_of_one_key_all_return_the_same_stored_answer(
    store: Store,
) -> None:
    stored = await asyncio.gather(*(
        store.api_idempotency_put(answer("k", f"h{i}", body=f'{{"i":{i}}}'))
        for i in range(6)))

    assert len(set(stored)) == 1
    assert await store.api_idempotency_get("k") == stored[0]


async def test_a_reservation_is_finished_or_released_by_its_own_request_only(
    store: Store,
) -> None:
    reserved = await store.api_idempotency_put(answer("k", "h1", status=0, body=""))
    assert reserved.status == 0

    assert await store.api_idempotency_finish("k", "h2", status=202, body="{}") is False
    assert await store.api_idempotency_release("k", "h2") is False
    assert await store.api_idempotency_finish("k", "h1", status=202, body='{"a":1}') is True
    assert await store.api_idempotency_finish("k", "h1", status=202, body='{"b":2}') is False
    assert await store.api_idempotency_release("k", "h1") is False  # an answer stays

    stored = await store.api_idempotency_get("k")
    assert stored is not None and (stored.status, stored.body) == (202, '{"a":1}')

    await store.api_idempotency_put(answer("r", "h1", status=0, body=""))
    assert await store.api_idempotency_release("r", "h1") is True
    assert await store.api_idempotency_get("r") is None


def publish(key: str, request_hash: str, *drafts: IntentDraft, soon: bool = True,
            at: float = T0) -> PublishWrite:
    return PublishWrite(key=key, request_hash=request_hash,
                        later=[] if soon else list(drafts), soon=list(drafts) if soon else [],
                        answer=lambda created: json.dumps({"key": key, "new": list(created)}),
                        created_at=at)


async def test_a_group_of_publishes_reserves_admits_and_answers_each_in_one_write(
    store: Store,
) -> None:
    await store.api_idempotency_put(answer("replayed", "h1", body='{"first":1}'))
    await store.api_idempotency_put(answer("taken", "other", body='{"other":1}'))
    writes = [
        publish("p1", "h1", draft("i1"), draft("i2", channel="sms")),
        publish("p2", "h2", draft("i3", due_at=T0 + 3600), soon=False),
        publish("replayed", "h1", draft("i4")),   # answered before: nothing written
        publish("taken", "h9", draft("i5")),      # another request's key: nothing written
        publish("p1", "h1", draft("i1")),         # the same key twice: the first owns it
        publish("p3", "h3", draft("i1"), draft("i6")),  # i1 is p1's, created once
    ]

    done = await store.api_publish_many(writes, now=T0, enqueue=True)

    assert [w.created for w in done] == [["i1", "i2"], ["i3"], None, None, None, ["i6"]]
    assert done[0].body == json.dumps({"key": "p1", "new": ["i1", "i2"]})
    assert done[2].stored == answer("replayed", "h1", body='{"first":1}')
    assert done[3].stored is not None and done[3].stored.request_hash == "other"
    assert done[4].stored is not None and done[4].stored.body == done[0].body
    for key, body in (("p1", done[0].body), ("p2", done[1].body), ("p3", done[5].body)):
        stored = await store.api_idempotency_get(key)
        assert stored is not None and (stored.status, stored.body) == (202, body)
    assert await store.api_idempotency_get_many(["p1", "nope", "p2"]) == {
        "p1": await store.api_idempotency_get("p1"), "p2": await store.api_idempotency_get("p2")}
    assert await store.intent_counts() == {"email": {"enqueued": 2, "selected": 1},
                                           "sms": {"enqueued": 1}}
    assert await store.intent_get("i4") is None and await store.intent_get("i5") is None


async def test_a_publish_group_that_fails_writes_nothing_of_any_request(store: Store) -> None:
    def refuse(_created: object) -> str:
        raise StoreError("the answer could not be made")

    writes = [publish("ok", "h", draft("k1")),
              PublishWrite(key="bad", request_hash="h", later=[], soon=[draft("k2")],
                           answer=refuse, created_at=T0)]

    with pytest.raises(StoreError):
        await store.api_publish_many(writes, now=T0, enqueue=True)

    assert await store.api_idempotency_get("ok") is None
    assert await store.intent_get("k1") is None and await store.intent_get("k2") is None
    [alone] = await store.api_publish_many(writes[:1], now=T0, enqueue=True)
    assert alone.created == ["k1"]


async def test_expired_idempotency_records_are_dropped_on_put(store: Store) -> None:
    await store.api_idempotency_put(answer("old", "h", at=T0))
    await store.api_idempotency_put(answer("new", "h", at=T0 + 100),
                                    expire_before=T0 + 50)

    assert await store.api_idempotency_get("old") is None
    assert await store.api_idempotency_get("new") is not None


# ---------------------------------------------------------------- summaries


async def test_summary_counts_each_campaign_and_channel(store: Store) -> None:
    now = T0 + 100
    await store.intent_admit([
        draft("d/1/email", expires_at=T0 + 50),             # overdue backlog
        draft("d/2/email", expires_at=T0 + 1000),           # accepted in time
        draft("d/3/email", expires_at=T0 + 1000),           # dead
        draft("d/4/email", due_at=T0 + 500),                # scheduled later
        draft("d/5/email", expires_at=T0 + 1000),           # retryable backlog
        draft("d/1/sms", channel="sms", expires_at=T0 + 1000),
        draft("one-off:email", campaign=None),
    ], now=T0)
    await settle(store, "d/2/email", State.ACCEPTED, now=T0 + 60)
    await settle(store, "d/3/email", State.DEAD, now=T0 + 61)
    await settle(store, "d/5/email", State.RETRYABLE, now=T0 + 62)
    await settle(store, "d/1/sms", State.ACCEPTED, now=T0 + 10)

    rows = {(s.campaign, s.channel): s
            for s in await store.intent_summary(now=now, since=now - 50)}

    assert set(rows) == {(None, "email"), ("digest", "email"), ("digest", "sms")}
    email = rows[("digest", "email")]
    assert (email.total, email.backlog, email.scheduled) == (5, 2, 1)
    assert (email.accepted, email.accepted_in_time, email.accepted_recent) == (1, 1, 1)
    assert (email.dead, email.retryable, email.claimed, email.overdue) == (1, 1, 0, 1)
    assert (email.expired, email.rejected, email.cancelled, email.uncertain) == (0, 0, 0, 0)
    assert email.oldest_due_at == T0
    assert email.earliest_expiry == T0 + 50
    sms = rows[("digest", "sms")]
    assert (sms.accepted, sms.accepted_recent, sms.backlog) == (1, 0, 0)  # accepted before since
    assert sms.oldest_due_at is None and sms.earliest_expiry is None
    assert rows[(None, "email")].backlog == 1
    assert next(iter(await store.intent_summary(now=now, since=now))).campaign is None


async def test_latency_histogram_counts_due_to_accepted_seconds_per_channel(
    store: Store,
) -> None:
    await store.intent_admit([draft(f"k{i}") for i in range(4)]
                             + [draft("s0", channel="sms")], now=T0)
    for key, at in (("k0", T0 + 1), ("k1", T0 + 1), ("k2", T0 + 7), ("k3", T0 + 100),
                    ("s0", T0 + 2)):
        await settle(store, key, State.ACCEPTED, now=at)

    histograms = {h.channel: h for h in await store.intent_latency_histogram([1.0, 10.0])}

    email = histograms["email"]
    assert email.bounds == (1.0, 10.0)
    assert email.counts == (2, 1, 1)
    assert email.count == 4
    assert email.sum == pytest.approx(1 + 1 + 7 + 100)
    assert histograms["sms"].counts == (0, 1, 0)
    assert await store.intent_latency_histogram([1.0]) != []


async def test_a_recipients_intents_and_surrogate_keys_are_found(store: Store) -> None:
    await store.intent_admit([
        draft("d/a/email", recipient="cust_7", due_at=T0),
        draft("d/b/email", recipient="cust_7", due_at=T0 + 10),
        draft("d/c/email", recipient="cust_8"),
    ], now=T0)
    await settle(store, "d/a/email", State.ACCEPTED, now=T0 + 20, detail="r_77")

    found = await store.intent_find_by_recipient("cust_7")

    assert [i.key for i in found] == ["d/b/email", "d/a/email"]  # latest due first
    assert [i.key for i in await store.intent_find_by_recipient("cust_7", limit=1)] == [
        "d/b/email"]
    assert await store.intent_find_by_recipient("nobody") == []
    assert await store.event_keys_by_detail("r_77") == ["d/a/email"]
    assert await store.event_keys_by_detail("r_00") == []
