"""Concurrent ``notify()`` calls in one process share a transaction: given, when, then.

Each caller is answered once its own intents are written, gets its own error for its
own bad request, and the intents are delivered exactly once (the sandbox's count).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from tidings.core.errors import InvalidInput, StoreError
from tidings.core.states import State

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

EMAIL = "email"


def call(i: int, **change: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"key": f"order-{i}", "recipient": {
        "id": f"c{i}", "email": f"c{i}@example.com"}, "channels": [EMAIL], "template": "t"}
    request.update(change)
    return request


async def test_concurrent_calls_are_one_transaction_and_each_is_delivered_once(
        make_harness: HarnessFactory) -> None:
    # given a channel whose in-flight budget covers the worker's batch of 200 (each send
    # holds its slot from its start mark to its answer: a full budget would make the
    # rest wait for a slot on the fake clock, which run_once does not move)
    h = await make_harness(settings={"channels": {EMAIL: {"max_in_flight": 256}}})
    # when two hundred callers notify at once, one intent each
    keys = await asyncio.gather(*(h.rt.notify(**call(i)) for i in range(200)))

    # then each got its own key back, all written in one transaction, each on the queue
    assert keys == [[f"order-{i}:{EMAIL}"] for i in range(200)]
    assert h.rt.notify_groups == 1
    assert {i.state for i in await h.all_intents()} == {State.ENQUEUED}
    assert await h.queue_total() == 200
    # and the worker delivers every one exactly once
    await h.drive(h.worker())
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (200, 0)


@pytest.mark.parametrize(("change", "field"), [
    ({"channels": ["pigeon"]}, "channels[0]"),
    ({"recipient": {"id": "c5"}}, "recipient.email"),
    ({"key": "has space"}, "key"),
])
async def test_a_bad_call_among_concurrent_ones_fails_alone(
        h: Harness, change: dict[str, Any], field: str) -> None:
    # when ten callers notify at once and the sixth request is bad
    results = await asyncio.gather(
        *(h.rt.notify(**call(i, **(change if i == 5 else {}))) for i in range(10)),
        return_exceptions=True)

    # then only that caller gets an error, naming its field; the nine are written
    bad = results[5]
    assert isinstance(bad, InvalidInput) and bad.field == field
    assert all(isinstance(r, list) for i, r in enumerate(results) if i != 5)
    assert sorted(i.key for i in await h.all_intents()) == sorted(
        f"order-{i}:{EMAIL}" for i in range(10) if i != 5)


async def test_a_store_that_fails_the_group_write_answers_each_caller_for_itself(
        h: Harness) -> None:
    # given a store whose next admission fails (briefly locked)
    real = h.rt.store.intent_admit
    failures = [StoreError("database is locked")]

    async def admit(*args: Any, **kw: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args, **kw)

    h.rt.store.intent_admit = admit  # type: ignore[method-assign]

    # when three callers notify at once, then each is written on its own retry
    keys = await asyncio.gather(*(h.rt.notify(**call(i)) for i in range(3)))
    assert keys == [[f"order-{i}:{EMAIL}"] for i in range(3)]
    assert len(await h.all_intents()) == 3 and await h.queue_total() == 3


async def test_a_repeated_key_among_concurrent_calls_is_one_intent(h: Harness) -> None:
    results = await asyncio.gather(*(h.rt.notify(**call(7)) for _ in range(5)))
    assert results == [[f"order-7:{EMAIL}"]] * 5
    assert [i.key for i in await h.all_intents()] == [f"order-7:{EMAIL}"]
    assert await h.queue_total() == 1


async def test_closing_the_runtime_answers_every_call_in_hand_first(h: Harness) -> None:
    calls = [asyncio.create_task(h.rt.notify(**call(i))) for i in range(20)]
    await asyncio.sleep(0)
    await h.rt.close()
    assert all(c.done() and c.exception() is None for c in calls)
