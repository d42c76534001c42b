"""A notify repeated under its key, on every store (``Runtime.notify``, ``notify_many``,
the group commit): the same request again writes nothing and says ``existing``, another
request under that key raises ``KeyConflict`` and nothing of its batch is written, the
first request's intent kept as it was. The store is read back apart, by key and by
count, as the witness."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError, InvalidInput, KeyConflict
from tidings.core.repeats import Notified
from tidings.delivery.group_commit import GroupCommitConfig
from tidings.runtime import Runtime, build_runtime

NOW = 1_800_000_000.0
TWIN = {"provider": {"kind": "sandbox-twin"}}
WHO = {"id": "c1", "email": "c1@example.com", "phone": "+15550100123"}


@pytest.fixture(params=["store-queue", "no-group"])
async def runtime(store_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Runtime]:
    settings = Settings.parse({"store": store_url, "channels": {"email": TWIN, "sms": TWIN}})
    rt = await build_runtime(settings, clock=FakeClock(NOW))
    if request.param == "no-group":
        rt.group_commit = None
    try:
        yield rt
    finally:
        await rt.close()


async def notify(rt: Runtime, key: str = "order-1", **change: object) -> Notified:
    fields: dict[str, object] = {"recipient": WHO, "channels": ["email"],
                                 "template": "receipt/v1", "data": {"x": 1, "y": [1, 2]}}
    fields.update(change)
    return await rt.notify(key=key, **fields)  # type: ignore[arg-type]


def request(key: str = "order-1", **change: object) -> NotifyRequest:
    fields: dict[str, object] = {"key": key, "recipient": WHO, "channels": ["email"],
                                 "template": "receipt/v1", "data": {"x": 1, "y": [1, 2]}}
    fields.update(change)
    return NotifyRequest(**fields)  # type: ignore[arg-type]


async def intents(rt: Runtime) -> int:
    counts = await rt.store.intent_counts()
    return sum(n for per_state in counts.values() for n in per_state.values())


async def data_of(rt: Runtime, key: str) -> object:
    intent = await rt.store.intent_get(key)
    assert intent is not None, key
    return json.loads(intent.data)


def count_writes(rt: Runtime) -> list[list[str]]:
    """The keys of every ``intent_admit_groups`` transaction from now on."""
    writes: list[list[str]] = []
    store = rt.store
    admit = store.intent_admit_groups

    async def counted(groups: Any, **kwargs: Any) -> list[str]:
        writes.append([d.key for drafts, _ in groups for d in drafts])
        return await admit(groups, **kwargs)

    store.intent_admit_groups = counted  # type: ignore[method-assign]
    return writes


def advance(rt: Runtime, seconds: float) -> None:
    clock = rt.clock
    assert isinstance(clock, FakeClock)
    clock.advance(seconds)


async def test_the_same_request_again_is_existing_and_writes_nothing(runtime: Runtime) -> None:
    first = await notify(runtime, channels=["email", "sms"])
    assert first == ["order-1:email", "order-1:sms"]
    assert (first.created, first.existing) == (tuple(first), ())
    events = await runtime.store.events_for("order-1:email")
    advance(runtime, 3600)
    again = await notify(runtime, channels=["sms", "email"], data={"y": [1, 2], "x": 1})
    assert again == ["order-1:sms", "order-1:email"]
    assert (again.created, again.existing) == ((), tuple(again))
    assert await intents(runtime) == 2
    assert await runtime.store.events_for("order-1:email") == events


@pytest.mark.parametrize(("change", "field"), [
    ({"data": {"x": 2, "y": [1, 2]}}, "data.x"),
    ({"template": "receipt/v2"}, "template"),
    ({"recipient": {**WHO, "email": "other@example.com"}}, "recipient.email"),
    ({"recipient": {**WHO, "id": "c2"}}, "recipient.id"),
    ({"channels": ["email", "sms"]}, "channels"),
    ({"due_at": NOW + 600}, "due_at"),
    ({"expires_at": NOW + 86_400}, "expires_at"),
])
async def test_another_request_under_the_key_is_refused_and_the_first_kept(
        runtime: Runtime, change: dict[str, object], field: str) -> None:
    await notify(runtime)
    before = await runtime.store.intent_get("order-1:email")
    advance(runtime, 5)
    with pytest.raises(KeyConflict) as caught:
        await notify(runtime, **change)
    assert isinstance(caught.value, InvalidInput)
    assert (caught.value.key, caught.value.field) == ("order-1", field)
    assert await runtime.store.intent_get("order-1:email") == before
    assert await runtime.store.intent_get("order-1:sms") is None
    assert await intents(runtime) == 1


async def test_three_calls_under_one_key_with_other_data_keep_the_first_and_say_so(
        runtime: Runtime) -> None:
    """Issue 28: the second and third were once answered with the key, silently."""
    assert (await notify(runtime, data={"x": 1})).created == ("order-1:email",)
    for x in (2, 3):
        with pytest.raises(KeyConflict, match="order-1") as caught:
            await notify(runtime, data={"x": x})
        assert caught.value.field == "data.x"
    assert await data_of(runtime, "order-1:email") == {"x": 1}
    assert (await notify(runtime, data={"x": 1})).existing == ("order-1:email",)


async def test_a_future_intent_is_compared_too(runtime: Runtime) -> None:
    later = NOW + 7 * 86_400
    made = await notify(runtime, due_at=later)
    advance(runtime, 60)
    assert (await notify(runtime, due_at=later)).existing == tuple(made)
    with pytest.raises(KeyConflict) as caught:
        await notify(runtime)  # no due time: now, not next week
    assert caught.value.field == "due_at"
    with pytest.raises(KeyConflict) as caught:
        await notify(runtime, due_at=later, data={"x": 9, "y": [1, 2]})
    assert caught.value.field == "data.x"
    intent = await runtime.store.intent_get("order-1:email")
    assert intent is not None and intent.due_at == later


async def test_a_batch_with_one_conflict_writes_none_of_its_requests(runtime: Runtime) -> None:
    await notify(runtime)
    with pytest.raises(KeyConflict) as caught:
        await runtime.notify_many([request("order-2"), request("order-3", due_at=NOW + 86_400),
                                   request(data={"x": 5, "y": [1, 2]})])
    assert caught.value.field == "requests[2].data.x"
    for key in ("order-2:email", "order-3:email"):
        assert await runtime.store.intent_get(key) is None, key
    assert await intents(runtime) == 1
    assert await data_of(runtime, "order-1:email") == {"x": 1, "y": [1, 2]}


async def test_a_batch_conflicting_with_itself_writes_nothing(runtime: Runtime) -> None:
    with pytest.raises(KeyConflict) as caught:
        await runtime.notify_many([request("order-9"), request(),
                                   request(template="receipt/v2")])
    assert caught.value.field == "requests[2].template"
    assert await intents(runtime) == 0


async def test_a_batch_says_which_it_created_and_which_existed(runtime: Runtime) -> None:
    await notify(runtime)
    answers = await runtime.notify_many([request("order-2"), request(), request("order-2")])
    assert [a.created for a in answers] == [("order-2:email",), (), ()]
    assert [a.existing for a in answers] == [(), ("order-1:email",), ("order-2:email",)]
    assert await intents(runtime) == 2


async def test_concurrent_calls_one_conflicting_fail_that_call_alone(
        runtime: Runtime) -> None:
    runtime.group_commit = GroupCommitConfig()  # whatever the fixture's: grouped
    await notify(runtime)
    calls = [notify(runtime, f"many-{i}") for i in range(6)]
    calls.insert(3, notify(runtime, data={"x": 2, "y": [1, 2]}))  # conflicts with the ledger
    calls.insert(5, notify(runtime))                               # the same again
    calls.append(notify(runtime, "many-0", template="receipt/v9"))  # conflicts in the group
    writes = count_writes(runtime)
    results = await asyncio.gather(*calls, return_exceptions=True)
    # The group (9), without the first conflict (8), without the second (7), then each
    # conflicting call alone: not one transaction per call.
    assert [len(w) for w in writes] == [9, 8, 7, 1, 1]
    errors = {i: r for i, r in enumerate(results) if isinstance(r, BaseException)}
    assert sorted(errors) == [3, 8], results
    assert isinstance(errors[3], KeyConflict) and errors[3].field == "data.x"
    assert isinstance(errors[8], KeyConflict) and errors[8].field == "template"
    answered = [r for r in results if isinstance(r, Notified)]
    assert [a.created for a in answered] == [(f"many-{i}:email",) for i in range(4)] + [
        (), *[(f"many-{i}:email",) for i in range(4, 6)]]
    assert answered[4].existing == ("order-1:email",)
    assert await intents(runtime) == 7
    intent = await runtime.store.intent_get("many-0:email")
    assert intent is not None and intent.template == "receipt/v1"
    assert await data_of(runtime, "order-1:email") == {"x": 1, "y": [1, 2]}


async def test_concurrent_repeats_of_one_new_request_make_one_intent(runtime: Runtime) -> None:
    runtime.group_commit = GroupCommitConfig()
    answers = await asyncio.gather(*(notify(runtime, "burst") for _ in range(5)))
    assert all(a == ["burst:email"] for a in answers)
    assert sum(len(a.created) for a in answers) == 1
    assert sum(len(a.existing) for a in answers) == 4
    assert await intents(runtime) == 1


async def test_the_async_door_refuses_what_is_no_async_connection(runtime: Runtime) -> None:
    sqlite = runtime.settings.store.startswith("sqlite")
    for wrong in ("postgresql://localhost/db", object(), 5):
        if sqlite:  # no transaction of a caller's is joined on SQLite, whatever is given
            with pytest.raises(ConfigurationError, match="connection"):
                await notify(runtime, connection=wrong)
            continue
        with pytest.raises(InvalidInput) as caught:
            await notify(runtime, connection=wrong)
        assert caught.value.field == "connection"
    assert await intents(runtime) == 0


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "one-each"])
async def test_two_processes_racing_under_one_key_one_wins_the_other_is_told(
        store_url: str, grouped: bool) -> None:
    """Two runtimes on one store (two processes, as far as the store can tell) notify
    under the same new keys at once: per key, other data makes exactly one of them
    win and the other a KeyConflict, the same data makes one created and one
    existing; the store holds the winner's data."""
    settings = Settings.parse({"store": store_url, "channels": {"email": TWIN, "sms": TWIN}})
    one = await build_runtime(settings, clock=FakeClock(NOW))
    two = await build_runtime(settings, clock=FakeClock(NOW))
    try:
        for rt in (one, two):
            if not grouped:
                rt.group_commit = None
        keys = [f"race-{i}" for i in range(12)]
        same = {k for n, k in enumerate(keys) if n % 3 == 0}
        calls = []
        for k in keys:
            calls.append(notify(one, k, data={"x": 1}))
            calls.append(notify(two, k, data={"x": 1 if k in same else 2}))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for n, k in enumerate(keys):
            first, second = results[2 * n], results[2 * n + 1]
            if k in same:
                assert isinstance(first, Notified) and isinstance(second, Notified), k
                assert len(first.created) + len(second.created) == 1, k
                assert len(first.existing) + len(second.existing) == 1, k
                assert await data_of(one, f"{k}:email") == {"x": 1}
                continue
            won = [r for r in (first, second) if isinstance(r, Notified)]
            lost = [r for r in (first, second) if isinstance(r, KeyConflict)]
            assert len(won) == 1 and len(lost) == 1, (k, first, second)
            assert won[0].created == (f"{k}:email",)
            assert lost[0].field == "data.x" and lost[0].key == k
            winner = 1 if won[0] is first else 2
            assert await data_of(one, f"{k}:email") == {"x": winner}
        assert await intents(one) == len(keys)
    finally:
        await one.close()
        await two.close()
