"""What holds, bulk actions and rollout need of every store: a hold made once and
removed once, a switch declared only where none exists, parked intents moved by guarded
changes, and selections paged by key with every filter. Runs unchanged on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from tidings.core.model import Intent, IntentDraft
from tidings.core.states import State
from tidings.stores.base import Change, Selection, Store


def draft(key: str, *, campaign: str | None = "alpha", channel: str = "email",
          due_at: float = 0.0, expires_at: float | None = None) -> IntentDraft:
    return IntentDraft(key=key, channel=channel, recipient_id=key,
                       address=f"{key}@example.com", template="t/v1", due_at=due_at,
                       expires_at=expires_at, campaign=campaign,
                       occurrence=None if campaign is None else f"{campaign}/2026-08-10")


async def test_a_hold_is_made_once_and_removed_once(store: Store) -> None:
    first = await store.hold_insert(scope="campaign", name="alpha", now=10.0, by="cli:ada",
                                    reason="template bug")
    again = await store.hold_insert(scope="campaign", name="alpha", now=11.0, by="cli:bob")
    await store.hold_insert(scope="channel", name="sms", now=12.0, by="token ops (t1)")

    assert first is not None and (first.held_at, first.held_by, first.reason) == (
        10.0, "cli:ada", "template bug")
    assert again is None
    assert [(h.scope, h.name, h.held_by) for h in await store.hold_all()] == [
        ("campaign", "alpha", "cli:ada"), ("channel", "sms", "token ops (t1)")]

    removed = await store.hold_delete(scope="campaign", name="alpha")
    assert removed is not None and removed.held_by == "cli:ada"
    assert await store.hold_delete(scope="campaign", name="alpha") is None
    assert [h.name for h in await store.hold_all()] == ["sms"]


async def test_a_declared_switch_never_overwrites_one_that_exists(store: Store) -> None:
    made = await store.switch_declare(scope="campaign", name="alpha", paused=True, now=1.0,
                                      reason="declared start_paused")
    assert made is not None and made.paused and made.changed_at == 1.0
    assert await store.switch_declare(scope="campaign", name="alpha", paused=True,
                                      now=2.0) is None
    await store.switch_set(scope="campaign", name="alpha", paused=False, now=3.0)
    assert await store.switch_declare(scope="campaign", name="alpha", paused=True,
                                      now=4.0) is None
    [switch] = await store.switch_all()
    assert (switch.paused, switch.changed_at) == (False, 3.0)


async def test_selections_filter_and_page_by_key(store: Store) -> None:
    await store.intent_admit([
        draft("a1", due_at=0.0, expires_at=50.0), draft("a2", due_at=10.0),
        draft("a3", due_at=20.0, expires_at=500.0), draft("b1", campaign="beta"),
        draft("n1", campaign=None, channel="sms"),
    ], now=0.0)
    everything = (State.SELECTED,)

    def keys(found: Sequence[Intent]) -> list[str]:
        return [i.key for i in found]

    assert keys(await store.intent_select(Selection(states=everything))) == [
        "a1", "a2", "a3", "b1", "n1"]
    alpha = Selection(states=everything, campaign="alpha")
    assert keys(await store.intent_select(alpha, limit=2)) == ["a1", "a2"]
    assert keys(await store.intent_select(alpha, after="a2", limit=2)) == ["a3"]
    assert keys(await store.intent_select(
        Selection(states=everything, occurrence="beta/2026-08-10"))) == ["b1"]
    assert keys(await store.intent_select(Selection(states=everything, channel="sms"))) == [
        "n1"]
    assert keys(await store.intent_select(Selection(states=everything, campaign="alpha",
                                                    due_before=15.0))) == ["a1", "a2"]
    assert keys(await store.intent_select(Selection(states=everything,
                                                    expires_by=100.0))) == ["a1"]
    assert keys(await store.intent_select(Selection(states=(State.ENQUEUED,)))) == []
    assert keys(await store.intent_select(Selection(
        states=everything, not_campaigns=("alpha",)))) == ["b1", "n1"]
    assert keys(await store.intent_select(Selection(
        states=everything, not_channels=("email",)))) == ["n1"]
    assert keys(await store.intent_select(Selection(
        states=everything, not_occurrences=("alpha/2026-08-10", "x")))) == ["b1", "n1"]
    assert keys(await store.intent_select(Selection(
        states=everything, not_campaigns=("beta",), not_channels=("sms",),
        updated_after=0.0))) == ["a1", "a2", "a3"]
    assert keys(await store.intent_select(Selection(states=everything,
                                                    updated_after=0.5))) == []
    assert await store.intent_select_counts(alpha) == {"selected": 3}
    assert await store.intent_select_counts(Selection(states=(State.DEAD,))) == {}


async def test_parked_intents_move_by_guarded_changes_and_are_selected(store: Store) -> None:
    await store.intent_admit([draft("p1", expires_at=100.0), draft("p2")], now=0.0)
    claims = await store.intent_claim_many(["p1", "p2"], owner="w", lease_s=30.0, now=1.0)
    parked = await store.intent_apply_many([
        Change(key=c.key, from_state=State.CLAIMED, to_state=State.PARKED, event="parked",
               lease_token=c.token, worker="w", reason="campaign alpha held by cli:ada")
        for c in claims], now=2.0)
    assert sorted(parked) == ["p1", "p2"]
    p1 = await store.intent_get("p1")
    assert p1 is not None and (p1.state, p1.lease_owner, p1.lease_expires_at) == (
        State.PARKED, None, None)

    # a message for a parked intent is acked without a claim (HELD)
    [again] = await store.intent_claim_many(["p1"], owner="w2", lease_s=30.0, now=3.0)
    assert again.kind == "held"

    stale = Selection(states=(State.PARKED,), expires_by=150.0)
    assert [i.key for i in await store.intent_select(stale)] == ["p1"]
    applied = await store.intent_apply_many([
        Change(key="p1", from_state=State.PARKED, to_state=State.EXPIRED,
               event="expired_while_held", reason="deadline passed while held"),
        Change(key="p2", from_state=State.PARKED, to_state=State.ENQUEUED, event="released"),
    ], now=150.0)
    assert sorted(applied) == ["p1", "p2"]
    assert await store.intent_select_counts(Selection(states=(State.PARKED,))) == {}
    p2 = await store.intent_get("p2")
    assert p2 is not None and p2.state is State.ENQUEUED and p2.enqueued_at == 150.0
    assert (await store.event_counts())["email"]["expired_while_held"] == 1


async def test_a_cancel_ends_a_parked_intent_at_once(store: Store) -> None:
    await store.intent_admit([draft("c1")], now=0.0)
    [claim] = await store.intent_claim_many(["c1"], owner="w", lease_s=30.0, now=1.0)
    await store.intent_apply_many([Change(
        key="c1", from_state=State.CLAIMED, to_state=State.PARKED, event="parked",
        lease_token=claim.token)], now=2.0)
    assert await store.intent_request_cancel("c1", now=3.0, reason="not wanted") is \
        State.CANCELLED
    intent = await store.intent_get("c1")
    assert intent is not None and (intent.state, intent.reason) == (State.CANCELLED,
                                                                    "not wanted")
