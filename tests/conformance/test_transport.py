"""The Transport conformance suite: every adapter must pass it unchanged.

Scenarios are written given / when / then; every ``now`` is explicit.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tidings.core.model import LaneDepth, OutgoingMessage, QueueDepth, Received
from tidings.transports.base import RecordsReceiver, Transport

T0 = 1_000_000.0
VIS = 30.0


def msg(message_id: str, delay_s: float = 0.0) -> OutgoingMessage:
    return OutgoingMessage(message_id=message_id, body=f'{{"key":"{message_id}"}}',
                           delay_s=delay_s)


async def receive(transport: Transport, now: float, max_messages: int = 10,
                  queue: str = "email") -> list[Received]:
    return await transport.receive(queue, max_messages=max_messages, visibility_s=VIS, now=now)


async def test_receive_takes_visible_messages_oldest_first_and_hides_them(
    transport: Transport,
) -> None:
    await transport.publish("email", [msg("a"), msg("b")], now=T0)
    await transport.publish("email", [msg("c")], now=T0 + 1)
    await transport.publish("sms", [msg("s")], now=T0)

    first = await receive(transport, T0 + 2, max_messages=2)
    second = await receive(transport, T0 + 2)

    assert [(r.message_id, r.body, r.receive_count, r.queue) for r in first] == [
        ("a", '{"key":"a"}', 1, "email"), ("b", '{"key":"b"}', 1, "email")]
    assert [r.enqueued_at for r in first] == [T0, T0]
    assert [r.message_id for r in second] == ["c"]
    assert await receive(transport, T0 + 3) == []


async def test_an_unacked_message_comes_back_after_the_visibility_timeout(
    transport: Transport,
) -> None:
    await transport.publish("email", [msg("a")], now=T0)
    [first] = await receive(transport, T0)

    assert await receive(transport, T0 + VIS - 1) == []
    [again] = await receive(transport, T0 + VIS)

    assert (again.message_id, again.receive_count) == ("a", 2)
    assert again.receipt != first.receipt


async def test_ack_removes_for_good_and_acking_again_is_a_no_op(transport: Transport) -> None:
    await transport.publish("email", [msg("a"), msg("b")], now=T0)
    received = await receive(transport, T0)

    await transport.ack("email", [r.receipt for r in received])
    await transport.ack("email", [r.receipt for r in received])
    await transport.ack("email", [])

    assert await receive(transport, T0 + VIS + 1) == []
    assert await transport.contains("email", ["a", "b"]) == set()


async def test_publishing_one_message_id_twice_makes_two_deliveries(
    transport: Transport,
) -> None:
    await transport.publish("email", [msg("a"), msg("a")], now=T0)

    received = await receive(transport, T0)

    assert [r.message_id for r in received] == ["a", "a"]
    assert received[0].receipt != received[1].receipt


async def test_a_delayed_publish_becomes_visible_after_its_delay(transport: Transport) -> None:
    await transport.publish("email", [msg("later", delay_s=60), msg("now")], now=T0)

    [now] = await receive(transport, T0)
    await transport.ack("email", [now.receipt])

    assert now.message_id == "now"
    assert await receive(transport, T0 + 59) == []
    assert [r.message_id for r in await receive(transport, T0 + 60)] == ["later"]


async def test_nack_makes_a_message_visible_again_after_its_delay(transport: Transport) -> None:
    await transport.publish("email", [msg("a"), msg("b")], now=T0)
    a, b = await receive(transport, T0)

    await transport.nack("email", [(a.receipt, 10.0), (b.receipt, 0.0)], now=T0 + 1)

    [b2] = await receive(transport, T0 + 1)
    assert (b2.message_id, b2.receive_count) == ("b", 2)
    assert await receive(transport, T0 + 10) == []
    [a2] = await receive(transport, T0 + 11)
    assert (a2.message_id, a2.receive_count) == ("a", 2)


async def test_a_failed_nack_counts_a_failure_apart_from_receives(transport: Transport) -> None:
    # given a message received, released, received again after its timeout, then failed
    await transport.publish("email", [msg("a"), msg("b")], now=T0)
    a1, b1 = await receive(transport, T0)
    assert (a1.failures, b1.failures) == (0, 0)
    await transport.nack("email", [(a1.receipt, 0.0)], now=T0 + 1)  # released: no failure
    [a2] = await receive(transport, T0 + 1)
    [a3, b2] = await receive(transport, T0 + 1 + VIS)  # the receiver died: no failure
    assert (a2.failures, a3.failures, b2.failures) == (0, 0, 0)

    # when a receive fails on each message itself (a batch in one call)
    await transport.nack("email", [(a3.receipt, 0.0), (b2.receipt, 5.0)],
                         now=T0 + 2 + VIS, failed=True)

    # then each counts one failure, its receive count every receive, and the delay holds
    [a4] = await receive(transport, T0 + 2 + VIS)
    assert (a4.message_id, a4.receive_count, a4.failures) == ("a", 4, 1)
    await transport.nack("email", [(a4.receipt, 0.0)], now=T0 + 3 + VIS, failed=True)
    a5, b3 = await receive(transport, T0 + 7 + VIS)
    assert [(r.message_id, r.receive_count, r.failures) for r in (a5, b3)] == [
        ("a", 5, 2), ("b", 3, 1)]


async def test_a_failed_nack_under_a_stale_receipt_counts_nothing(transport: Transport) -> None:
    await transport.publish("email", [msg("a")], now=T0)
    [old] = await receive(transport, T0)
    [current] = await receive(transport, T0 + VIS)

    await transport.nack("email", [(old.receipt, 0.0)], now=T0 + VIS + 1, failed=True)
    await transport.nack("email", [(current.receipt, 0.0)], now=T0 + VIS + 1)

    [back] = await receive(transport, T0 + VIS + 1)
    assert (back.receive_count, back.failures) == (3, 0)


async def test_a_redriven_dead_letter_starts_with_no_failures(transport: Transport) -> None:
    await transport.publish("email", [msg("a")], now=T0)
    [a] = await receive(transport, T0)
    await transport.nack("email", [(a.receipt, 0.0)], now=T0, failed=True)
    [again] = await receive(transport, T0)
    await transport.dead_letter("email", [(again.receipt, "poison")], now=T0)
    [dead] = await transport.dead_letters("email")

    assert await transport.redrive("email", [dead.id], now=T0 + 1) == 1

    [fresh] = await receive(transport, T0 + 1)
    assert (fresh.receive_count, fresh.failures) == (1, 0)


async def test_extend_pushes_the_visibility_timeout(transport: Transport) -> None:
    await transport.publish("email", [msg("a")], now=T0)
    [a] = await receive(transport, T0)

    await transport.extend("email", [a.receipt], visibility_s=100, now=T0 + 20)

    assert await receive(transport, T0 + VIS + 1) == []
    [again] = await receive(transport, T0 + 120)
    assert again.receive_count == 2


async def test_a_stale_receipt_cannot_touch_a_message_someone_else_holds(
    transport: Transport,
) -> None:
    await transport.publish("email", [msg("a")], now=T0)
    [old] = await receive(transport, T0)
    [current] = await receive(transport, T0 + VIS)  # the first consumer's lease ran out

    await transport.nack("email", [(old.receipt, 0.0)], now=T0 + VIS + 1)
    await transport.extend("email", [old.receipt], visibility_s=1000, now=T0 + VIS + 1)
    await transport.dead_letter("email", [(old.receipt, "stale")], now=T0 + VIS + 1)

    assert await receive(transport, T0 + VIS + 2) == []  # still hidden: nack was ignored
    assert await transport.dead_letters("email") == []
    [back] = await receive(transport, T0 + 2 * VIS)  # extend was ignored too
    assert (back.message_id, back.receive_count) == ("a", 3)
    assert current.receive_count == 2


async def test_dead_letter_then_redrive(transport: Transport) -> None:
    await transport.publish("email", [msg("poison"), msg("fine")], now=T0)
    poison, _fine = await receive(transport, T0)

    await transport.dead_letter("email", [(poison.receipt, "body is not JSON")], now=T0 + 1)

    [dead] = await transport.dead_letters("email")
    assert (dead.queue, dead.message_id, dead.body, dead.reason, dead.receive_count,
            dead.dead_at) == ("email", "poison", '{"key":"poison"}', "body is not JSON", 1,
                              T0 + 1)
    assert await transport.contains("email", ["poison", "fine"]) == {"fine"}
    [fine] = await receive(transport, T0 + VIS + 1)
    assert fine.message_id == "fine"
    await transport.ack("email", [fine.receipt])

    moved = await transport.redrive("email", [dead.id], now=T0 + 100)

    assert moved == 1
    assert await transport.dead_letters("email") == []
    [back] = await receive(transport, T0 + 100)
    assert (back.message_id, back.body) == ("poison", '{"key":"poison"}')
    assert await transport.redrive("email", [dead.id], now=T0 + 101) == 0


async def test_depth_counts_ready_delayed_in_flight_and_dead(transport: Transport) -> None:
    assert await transport.depth("email", now=T0) == QueueDepth(
        ready=0, delayed=0, in_flight=0, dead=0, oldest_age_s=0.0)
    await transport.publish("email", [msg("held"), msg("dead"), msg("nacked")], now=T0)
    await transport.publish("email", [msg("ready"), msg("delayed", delay_s=300)], now=T0 + 5)
    await transport.publish("sms", [msg("other")], now=T0 - 100)
    held, dead, nacked = await receive(transport, T0 + 1, max_messages=3)
    await transport.dead_letter("email", [(dead.receipt, "poison")], now=T0 + 2)
    await transport.nack("email", [(nacked.receipt, 60.0)], now=T0 + 2)

    depth = await transport.depth("email", now=T0 + 10)

    assert replace(depth, lanes=()) == QueueDepth(ready=1, delayed=2, in_flight=1, dead=1,
                                                  oldest_age_s=10.0)
    # The same messages lane by lane (all in lane 0 here: published without one).
    assert depth.lanes == (LaneDepth(lane=0, ready=1, total=4, oldest_age_s=10.0),)
    # Once the visibility timeout passes, the held message counts as ready again.
    later = await transport.depth("email", now=T0 + 1 + VIS)
    assert (later.ready, later.in_flight) == (2, 0)
    assert held.message_id == "held"


async def test_contains_tells_which_messages_are_on_the_queue(transport: Transport) -> None:
    await transport.publish("email", [msg("a"), msg("b", delay_s=50)], now=T0)
    await transport.publish("sms", [msg("c")], now=T0)
    await receive(transport, T0)  # in flight still counts

    assert await transport.contains("email", ["a", "b", "c", "zz"]) == {"a", "b"}
    assert await transport.contains("email", []) == set()


# ---------------------------------------------------------------- idle consumers

GUARD_S = 30.0  # only against a hang: these tests never wait that long when they pass


async def test_wait_returns_at_once_when_a_message_is_ready(transport: Transport) -> None:
    await transport.publish("email", [msg("a")], now=T0)

    await asyncio.wait_for(transport.wait("email", timeout_s=3600, now=T0), GUARD_S)


async def test_wait_returns_when_a_delayed_message_falls_due(transport: Transport) -> None:
    await transport.publish("email", [msg("later", delay_s=60)], now=T0)

    # Due at T0 + 60: a consumer whose clock says so does not wait for a publish.
    await asyncio.wait_for(transport.wait("email", timeout_s=3600, now=T0 + 60), GUARD_S)


async def test_wait_on_an_empty_queue_returns_after_its_timeout(transport: Transport) -> None:
    await asyncio.wait_for(transport.wait("email", timeout_s=0.01, now=T0), GUARD_S)
    assert await receive(transport, T0) == []


async def test_a_publish_wakes_a_waiting_consumer(
        transport: Transport, another_transport: Transport) -> None:
    # Where the adapter signals publishes from anywhere, publish from another instance
    # (another process, as far as the adapter can tell); else from this one.
    publisher = another_transport if transport.notifies else transport
    waiter = asyncio.create_task(transport.wait("email", timeout_s=3600, now=T0))
    await asyncio.sleep(0)  # the waiter registers before the publish
    await publisher.publish("email", [msg("a")], now=T0)

    await asyncio.wait_for(waiter, GUARD_S)
    assert [r.message_id for r in await receive(transport, T0)] == ["a"]


async def test_a_redrive_and_a_nack_wake_a_waiting_consumer(transport: Transport) -> None:
    await transport.publish("email", [msg("a")], now=T0)
    [held] = await receive(transport, T0)
    await transport.dead_letter("email", [(held.receipt, "poison")], now=T0)
    [dead] = await transport.dead_letters("email")

    waiter = asyncio.create_task(transport.wait("email", timeout_s=3600, now=T0))
    await asyncio.sleep(0)
    assert await transport.redrive("email", [dead.id], now=T0) == 1
    await asyncio.wait_for(waiter, GUARD_S)

    [again] = await receive(transport, T0)
    waiter = asyncio.create_task(transport.wait("email", timeout_s=3600, now=T0))
    await asyncio.sleep(0)
    await transport.nack("email", [(again.receipt, 0.0)], now=T0)
    await asyncio.wait_for(waiter, GUARD_S)


async def test_a_gone_receivers_messages_come_back_at_once_and_its_receipts_are_fenced(
    transport: Transport,
) -> None:
    if not isinstance(transport, RecordsReceiver):
        # Optional: a broker sees its consumer die and puts its messages back itself.
        return
    await transport.publish("email", [msg("a"), msg("b"), msg("c"), msg("d")], now=T0)
    await transport.publish("sms", [msg("s")], now=T0)
    transport.receive_as("w-gone")
    gone = await receive(transport, T0, max_messages=2)
    [gone_sms] = await receive(transport, T0, queue="sms")
    transport.receive_as("w-live")
    live = await receive(transport, T0, max_messages=1)
    transport.receive_as(None)
    [nobody] = await receive(transport, T0)
    # One the gone worker nacked with a delay stays delayed: it holds it no more.
    await transport.nack("email", [(gone[1].receipt, 100.0)], now=T0)

    assert await transport.release_receiver("w-gone", now=T0 + 1) == 2  # a and s
    again = await receive(transport, T0 + 1)
    [sms_again] = await receive(transport, T0 + 1, queue="sms")

    assert [r.message_id for r in again] == [gone[0].message_id]
    assert (sms_again.message_id, sms_again.receive_count) == (gone_sms.message_id, 2)
    # The gone worker's receipts are fenced: its extend and nack change nothing.
    await transport.extend("email", [gone[0].receipt], visibility_s=VIS, now=T0 + 2)
    await transport.nack("email", [(gone[0].receipt, 0.0)], now=T0 + 2)
    assert await receive(transport, T0 + 2) == []
    assert {live[0].message_id, nobody.message_id} == {"c", "d"}
    assert await transport.release_receiver("w-live", now=T0 + 3) == 1
    assert await transport.release_receiver("w-gone", now=T0 + 3) == 0
