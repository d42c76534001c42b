"""Lanes on the store's own queue (``tidings.core.lanes``), one suite for both stores:
admission writes each intent's lane with it and its message, a receive walks the lanes
in the order it is given (oldest first in each), and a message published again (a
republish, a redrive) goes back to its intent's lane.

Given / when / then; every ``now`` is explicit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tidings.core.fair import FairShare
from tidings.core.lanes import EVERY_LANE
from tidings.core.model import DraftPage, IntentDraft, OutgoingMessage, Received, message_body
from tidings.stores.base import Store
from tidings.stores.sqlite_db import SqliteDatabase
from tidings.transports.base import Transport
from tidings.transports.sqlite import SqliteTransport

T0 = 1_000_000.0
VIS = 30.0


def draft(key: str, lane: int, *, campaign: str | None = None, group: str = "") -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id=f"r-{key}",
                       address=f"{key}@example.com", template="t@v1", due_at=T0,
                       campaign=campaign, occurrence="2026-01-01" if campaign else None,
                       lane=lane, group=group)


@pytest.fixture
async def queue(store: Store, store_url: str) -> AsyncIterator[Transport]:
    """The store's own queue, on the store's (migrated) database."""
    opened: Transport
    if store_url.startswith("postgres"):
        from tidings.transports.postgres import PostgresTransport

        opened = await PostgresTransport.open(store_url)
    else:
        opened = SqliteTransport(SqliteDatabase.from_url(store_url))
    yield opened
    await opened.close()


async def take(queue: Transport, now: float, limit: int = 10,
               lanes: tuple[int, ...] = EVERY_LANE, fair: FairShare | None = None,
               ) -> list[Received]:
    return await queue.receive("email", max_messages=limit, visibility_s=VIS, now=now,
                               lanes=lanes, fair=fair)


async def test_a_receive_takes_the_first_lane_before_older_messages_of_the_next(
    store: Store, queue: Transport,
) -> None:
    # Given bulk messages admitted first, then transactional ones
    await store.intent_admit([draft("b1", 1), draft("b2", 1), draft("b3", 1)], now=T0,
                             enqueue=True)
    await store.intent_admit([draft("t1", 0), draft("t2", 0)], now=T0 + 1, enqueue=True)

    # When a worker receives fewer than all of them
    first = await take(queue, T0 + 2, limit=3)
    rest = await take(queue, T0 + 2)

    # Then the transactional ones come first, each lane oldest first
    assert [(m.message_id, m.lane) for m in first] == [("t1", 0), ("t2", 0), ("b1", 1)]
    assert [(m.message_id, m.lane) for m in rest] == [("b2", 1), ("b3", 1)]


async def test_a_receive_asks_only_the_lanes_it_names_in_their_order(
    store: Store, queue: Transport,
) -> None:
    await store.intent_admit([draft("t1", 0), draft("b1", 1), draft("x1", 2)], now=T0,
                             enqueue=True)

    owed = await take(queue, T0 + 1, lanes=(1,))
    reordered = await take(queue, T0 + 1, lanes=(2, 0))

    assert [m.message_id for m in owed] == ["b1"]
    assert [m.message_id for m in reordered] == ["x1", "t1"]
    assert await take(queue, T0 + 1) == []


async def test_a_campaign_page_goes_to_each_channels_lane(store: Store, queue: Transport) -> None:
    page = DraftPage(campaign="weekly", occurrence="2026-01-01", template="t@v1", due_at=T0,
                     expires_at=None, channels=[("email", "weekly/2026-01-01/", "/email/v1")],
                     lanes=[1])
    page.rows += [(0, "a", "a@example.com", "{}"), (0, "b", "b@example.com", "{}")]
    await store.intent_admit(page, now=T0, enqueue=True)
    await store.intent_admit([draft("t1", 0)], now=T0 + 5, enqueue=True)

    taken = await take(queue, T0 + 6)

    assert [(m.message_id, m.lane) for m in taken] == [
        ("t1", 0), ("weekly/2026-01-01/a/email/v1", 1), ("weekly/2026-01-01/b/email/v1", 1)]


async def test_a_message_published_again_goes_back_to_its_intents_lane(
    store: Store, queue: Transport,
) -> None:
    # Given an admitted bulk intent whose message was lost, and a message of no intent
    await store.intent_admit([draft("b1", 1, campaign="weekly")], now=T0)

    # When the reconciler (or an operator) publishes them
    await queue.publish("email", [OutgoingMessage(message_id="b1", body=message_body("b1")),
                                  OutgoingMessage(message_id="stray", body="{}")], now=T0)

    # Then the intent's message is in its lane, the stray one in the first
    taken = await take(queue, T0 + 1)
    assert sorted((m.message_id, m.lane) for m in taken) == [("b1", 1), ("stray", 0)]

    # And a dead letter redriven goes back to its intent's lane too
    b1 = next(m for m in taken if m.message_id == "b1")
    await queue.dead_letter("email", [(b1.receipt, "poison")], now=T0 + 2)
    [dead] = await queue.dead_letters("email")
    assert await queue.redrive("email", [dead.id], now=T0 + 3) == 1
    assert [(m.message_id, m.lane) for m in await take(queue, T0 + 4)] == [("b1", 1)]


async def admit_groups(store: Store, sizes: dict[str, int], *, lane: int = 1) -> None:
    """``sizes[group]`` intents of each group, the big group admitted first."""
    for group, size in sizes.items():
        await store.intent_admit([draft(f"{group or 'none'}-{n:03d}", lane, group=group)
                                  for n in range(size)], now=T0, enqueue=True)


def by_group(messages: list[Received]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in messages:
        group = m.message_id.rsplit("-", 1)[0]
        counts[group] = counts.get(group, 0) + 1
    return counts


async def test_a_shared_lane_gives_each_group_its_share_of_a_receive(
    store: Store, queue: Transport,
) -> None:
    # Given one big tenant admitted first and two small ones
    await admit_groups(store, {"big": 50, "small-a": 5, "small-b": 5})
    share = FairShare()

    # When a worker receives 9 with fair share
    first = await take(queue, T0 + 1, limit=9, fair=share)

    # Then each group gets a third, one from each in turn, oldest first
    assert by_group(first) == {"big": 3, "small-a": 3, "small-b": 3}
    assert [m.message_id for m in first[:3]] == ["big-000", "small-a-000", "small-b-000"]
    # And a group out of ready messages leaves its room to the others
    second = await take(queue, T0 + 1, limit=9, fair=share)
    assert by_group(second) == {"big": 5, "small-a": 2, "small-b": 2}
    # Only the big group has messages left: it has the whole receive
    assert by_group(await take(queue, T0 + 1, limit=9, fair=share)) == {"big": 9}


async def test_grouped_messages_are_never_stranded_on_a_lane_without_fair_share(
    store: Store, queue: Transport,
) -> None:
    # Given messages that name groups (written while the channel shared its lanes)
    await admit_groups(store, {"a": 3, "b": 3, "": 2})
    # When a worker receives without fair share, they all still come
    first = await take(queue, T0 + 1, limit=4)
    rest = await take(queue, T0 + 1, limit=10)
    # The ungrouped first (the lane's own order), then the groups in turn
    assert [m.message_id for m in first[:2]] == ["none-000", "none-001"]
    assert by_group(first + rest) == {"a": 3, "b": 3, "none": 2}


async def test_weights_and_groups_that_do_not_fit_one_receive(
    store: Store, queue: Transport,
) -> None:
    await admit_groups(store, {"a": 20, "b": 20, "c": 20, "": 20})
    weighted = FairShare({"a": 2.0})
    assert by_group(await take(queue, T0 + 1, limit=10, fair=weighted)) == {
        "a": 4, "b": 2, "c": 2, "none": 2}
    # Two at a time: the groups are visited in turn, none skipped
    share = FairShare()
    seen = [by_group(await take(queue, T0 + 1, limit=2, fair=share)) for _ in range(4)]
    assert all(sum(s.values()) == 2 for s in seen)
    assert {g for s in seen for g in s} == {"a", "b", "c", "none"}


async def test_a_message_published_again_keeps_its_intents_group(
    store: Store, queue: Transport,
) -> None:
    await store.intent_admit([draft("t-1", 1, campaign="weekly", group="tenant")], now=T0)
    await queue.publish("email", [OutgoingMessage(message_id="t-1", body=message_body("t-1"))],
                        now=T0)
    assert [m.message_id for m in await take(queue, T0 + 1, fair=FairShare())] == ["t-1"]
