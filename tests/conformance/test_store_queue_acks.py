"""Outcomes and the acks of their messages in one transaction, on the store's own queue.

Part of the Store conformance suite (every store adapter, unchanged): a store whose
queue table is in its own database (``transport = "sql"``) says so
(``acks_commit_with``), and ``intent_apply_many(acks=...)`` deletes the message of
every change it applies, in the same transaction, and of no other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tidings.core.model import IntentDraft, Message
from tidings.core.states import State
from tidings.runtime import open_store
from tidings.stores.base import Change, ClaimKind, QueueAcks, Store
from tidings.transports.base import Transport

T0 = 1_000_000.0
LEASE = 30.0


@pytest.fixture
async def own_queue(store: Store, store_url: str) -> AsyncIterator[tuple[Store, Transport]]:
    """The migrated store of the suite, opened again with its own queue table (one
    database for both, as the runtime opens ``transport = "sql"``)."""
    same_store, queue = await open_store(store_url)
    yield same_store, queue
    await queue.close()
    await same_store.close()


def draft(key: str) -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id=f"r-{key}",
                       address=f"{key}@example.com", template="receipt@v1", data="{}",
                       due_at=T0)


async def received_and_claimed(store: Store, queue: Transport, *keys: str
                               ) -> dict[str, tuple[str, int]]:
    """Given intents born enqueued, received and claimed: key -> (receipt, lease token)."""
    await store.intent_admit([draft(k) for k in keys], now=T0, enqueue=True)
    messages = await queue.receive("email", max_messages=10, visibility_s=60, now=T0 + 1)
    receipts = {Message.decode(m.body).key: m.receipt for m in messages}
    claims = await store.intent_claim_many(list(keys), owner="w1", lease_s=LEASE, now=T0 + 1)
    assert [c.kind for c in claims] == [ClaimKind.CLAIMED] * len(keys)
    return {c.key: (receipts[c.key], c.token or 0) for c in claims}


def outcome(key: str, to: State, token: int) -> Change:
    return Change(key=key, from_state=State.CLAIMED, to_state=to, event=to.value,
                  lease_token=token, next_attempt_at=T0 + 60 if to is State.RETRYABLE else None)


async def test_the_store_commits_acks_with_its_own_queue_and_no_other(
        own_queue: tuple[Store, Transport], store_url: str) -> None:
    store, queue = own_queue
    other_store, other_queue = await open_store(store_url)  # the same URL, another pool
    try:
        assert store.acks_commit_with(queue)
        # Another connection pool (or file handle) cannot share the store's transaction.
        assert not store.acks_commit_with(other_queue)
        assert not other_store.acks_commit_with(queue)
        assert not store.acks_commit_with(object())
    finally:
        await other_queue.close()
        await other_store.close()


async def test_only_the_messages_of_applied_changes_are_acked_in_the_commit(
        own_queue: tuple[Store, Transport]) -> None:
    # given three intents received and claimed from the store's own queue
    store, queue = own_queue
    held = await received_and_claimed(store, queue, "a", "b", "c")

    # when one is accepted with its ack, one is retryable with no ack, and one carries
    # an ack but a lease token that is no longer its own (so it does not apply)
    changes = [outcome("a", State.ACCEPTED, held["a"][1]),
               outcome("b", State.RETRYABLE, held["b"][1]),
               outcome("c", State.ACCEPTED, held["c"][1] + 1)]
    applied = await store.intent_apply_many(
        changes, now=T0 + 2, acks=QueueAcks("email", [held["a"][0], None, held["c"][0]]))

    # then "a" and "b" applied, and only the message of "a" left the queue
    assert applied == ["a", "b"]
    assert await queue.contains("email", ["a", "b", "c"]) == {"b", "c"}
    states = {k: (await store.intent_get(k)) for k in "abc"}
    assert {k: i.state for k, i in states.items() if i is not None} == {
        "a": State.ACCEPTED, "b": State.RETRYABLE, "c": State.CLAIMED}


async def test_acks_that_do_not_pair_with_the_changes_are_refused_before_writing(
        own_queue: tuple[Store, Transport]) -> None:
    store, queue = own_queue
    held = await received_and_claimed(store, queue, "a")

    with pytest.raises(ValueError, match="pair one to one"):
        await store.intent_apply_many([outcome("a", State.ACCEPTED, held["a"][1])],
                                      now=T0 + 2, acks=QueueAcks("email", []))

    intent = await store.intent_get("a")
    assert intent is not None and intent.state is State.CLAIMED
    assert await queue.contains("email", ["a"]) == {"a"}
