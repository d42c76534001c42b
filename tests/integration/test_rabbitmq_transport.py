"""What the RabbitMQ transport does beyond the Transport conformance suite, judged by the
broker: a dead connection's deliveries come back (counted), receipts of a lost
connection never touch a message of the next one, delays run on the broker's timers
for a receiver that never saw the publish, the broker's own delivery limit dead-letters
with its reason, ``contains`` is conservative where the instance cannot account for
every message, and a foreign publisher's headers that are no numbers read as absent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aio_pika
import pytest

from tidings.core.model import OutgoingMessage
from tidings.transports.rabbitmq import DELIVERY_LIMIT, RabbitTransport

VIS = 30.0
GUARD_S = 30.0


def msg(message_id: str, delay_s: float = 0.0) -> OutgoingMessage:
    return OutgoingMessage(message_id=message_id, body=f'{{"key":"{message_id}"}}',
                           delay_s=delay_s)


@pytest.fixture
async def transports(amqp_url: str) -> AsyncIterator[list[RabbitTransport]]:
    opened: list[RabbitTransport] = []
    yield opened
    for transport in opened:
        await transport.close()


async def open_one(url: str, into: list[RabbitTransport]) -> RabbitTransport:
    transport = await RabbitTransport.open(url)
    into.append(transport)
    return transport


async def test_a_dead_connections_deliveries_come_back_counted(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    publisher = await open_one(amqp_url, transports)
    doomed = await open_one(amqp_url, transports)
    survivor = await open_one(amqp_url, transports)
    now = time.time()
    await publisher.publish("email", [msg("a"), msg("b")], now=now)
    held = await doomed.receive("email", max_messages=10, visibility_s=VIS, now=now)
    assert [r.message_id for r in held] == ["a", "b"]
    assert await survivor.receive("email", max_messages=10, visibility_s=VIS, now=now) == []

    await doomed.close()  # as a process that died: the broker sees its connection go

    back = await survivor.receive("email", max_messages=10, visibility_s=VIS, now=now)
    assert sorted((r.message_id, r.receive_count) for r in back) == [("a", 2), ("b", 2)]


async def test_a_receipt_of_a_lost_connection_never_acks_a_message_of_the_next(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    transport = await open_one(amqp_url, transports)
    now = time.time()
    await transport.publish("email", [msg("first"), msg("second")], now=now)
    [old] = await transport.receive("email", max_messages=1, visibility_s=VIS, now=now)
    assert transport._channel is not None
    await transport._channel.close()  # the channel dies under the held delivery

    # the next receive is on a new channel whose delivery tags start at 1 again
    fresh = await transport.receive("email", max_messages=10, visibility_s=VIS, now=now)
    assert sorted(r.message_id for r in fresh) == ["first", "second"]
    await transport.ack("email", [old.receipt])  # the same tag number, another channel

    depth = await transport.depth("email", now=now)
    assert depth.in_flight == 2 and old.receipt not in {r.receipt for r in fresh}


async def test_a_delay_runs_on_the_brokers_timer_for_a_receiver_that_never_saw_it(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    publisher = await open_one(amqp_url, transports)
    receiver = await open_one(amqp_url, transports)
    await publisher.publish("email", [msg("soon", delay_s=0.6)], now=time.time())
    assert await receiver.receive("email", max_messages=1, visibility_s=VIS,
                                  now=time.time()) == []

    loop = asyncio.get_running_loop()
    deadline = loop.time() + GUARD_S
    got = []
    while not got and loop.time() < deadline:
        await asyncio.sleep(0.1)
        got = await receiver.receive("email", max_messages=1, visibility_s=VIS,
                                     now=time.time())
    assert [r.message_id for r in got] == ["soon"]
    assert (await receiver.depth("email", now=time.time())).delayed == 0


async def test_the_brokers_delivery_limit_dead_letters_with_its_reason(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    # given a message returned more often than the limit (a consumer that dies each time)
    transport = await open_one(amqp_url, transports)
    now = time.time()
    await transport.publish("email", [msg("crash-loop")], now=now)
    name = f"{transport.prefix}.email"
    connection = await aio_pika.connect(transport.url)
    try:
        channel = await connection.channel()
        queue = await channel.get_queue(name, ensure=False)
        for _ in range(DELIVERY_LIMIT + 1):
            delivery = await queue.get(no_ack=False, fail=False)
            assert delivery is not None
            await delivery.nack(requeue=True)
        assert await queue.get(no_ack=False, fail=False) is None
    finally:
        await connection.close()

    # then it is on the dead letters, with the broker's reason, and can be redriven
    # (at-least-once dead-lettering moves it a moment later, by the broker's own worker)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GUARD_S
    letters = await transport.dead_letters("email")
    while not letters and loop.time() < deadline:
        await asyncio.sleep(0.1)
        letters = await transport.dead_letters("email")
    [dead] = letters
    assert (dead.message_id, dead.reason) == ("crash-loop", "broker: delivery_limit")
    assert await transport.redrive("email", [dead.id], now=now) == 1
    [back] = await transport.receive("email", max_messages=1, visibility_s=VIS, now=now)
    assert (back.message_id, back.receive_count, back.failures) == ("crash-loop", 1, 0)


async def test_contains_is_conservative_where_another_instance_published(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    publisher = await open_one(amqp_url, transports)
    asker = await open_one(amqp_url, transports)
    await publisher.publish("email", [msg("theirs")], now=time.time())

    assert await publisher.contains("email", ["theirs", "never"]) == {"theirs"}
    # the asker cannot account for the message on the queue: it may be any of them
    assert await asker.contains("email", ["theirs", "never"]) == {"theirs", "never"}

    [got] = await asker.receive("email", max_messages=1, visibility_s=VIS, now=time.time())
    await asker.ack("email", [got.receipt])
    assert await asker.contains("email", ["theirs", "never"]) == set()  # an empty queue


async def test_a_status_from_other_processes_spends_none_of_a_messages_deliveries(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    # given a message on a queue, and fresh processes asking its depth (tidings status
    # in a loop): giving the head back would count a return against its delivery limit
    publisher = await open_one(amqp_url, transports)
    await publisher.publish("email", [msg("head")], now=time.time())
    for _ in range(5):
        asker = await open_one(amqp_url, transports)
        depth = await asker.depth("email", now=time.time())
        assert depth.ready == 1
        await asker.close()
        transports.remove(asker)

    # then the consumer's first receive is the message's first delivery
    consumer = await open_one(amqp_url, transports)
    [got] = await consumer.receive("email", max_messages=1, visibility_s=VIS, now=time.time())
    assert (got.message_id, got.receive_count) == ("head", 1)


async def test_drop_all_deletes_the_queues_it_used(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    transport = await open_one(amqp_url, transports)
    now = time.time()
    await transport.publish("email", [msg("a"), msg("later", delay_s=100)], now=now)
    await transport.publish("sms", [msg("b")], now=now)

    # each lane's queue, the dead letters and one delay queue of email; each lane's
    # queue and the dead letters of sms
    assert await transport.drop_all() == 11

    other = await open_one(amqp_url, transports)
    assert await other.receive("email", max_messages=10, visibility_s=VIS, now=now) == []
    assert (await other.depth("sms", now=now)).ready == 0


async def test_headers_another_publisher_wrote_are_read_as_no_header(
    amqp_url: str, transports: list[RabbitTransport]
) -> None:
    # given tidings' message behind ones a foreign publisher put straight on the queue,
    # with headers that are no numbers a count or a time can be
    transport = await open_one(amqp_url, transports)
    now = time.time()
    await transport.publish("email", [msg("ours")], now=now)
    hostile = [{"x-tidings-receives": "nan", "x-tidings-enqueued-at": "inf"},
               {"x-tidings-failures": "1e999", "x-delivery-count": "-5"},
               {"x-tidings-receives": 2**62, "x-tidings-visible-at": "nan"},
               {"x-tidings-failures": [1, 2], "x-tidings-order": 5}]
    connection = await aio_pika.connect(transport.url)
    try:
        channel = await connection.channel()
        for n, headers in enumerate(hostile):
            await channel.default_exchange.publish(
                aio_pika.Message(f"hostile-{n}".encode(), headers=headers),  # type: ignore[arg-type]
                routing_key=f"{transport.prefix}.email")
    finally:
        await connection.close()

    # then a receive hands them all out, with counts and times a worker can use
    got = await transport.receive("email", max_messages=10, visibility_s=VIS, now=now)
    assert sorted(r.body for r in got) == sorted(["{\"key\":\"ours\"}", *(
        f"hostile-{n}" for n in range(len(hostile)))])
    for r in got:
        assert 1 <= r.receive_count <= 2**31 and 0 <= r.failures < 2**31, r
        assert r.enqueued_at == r.enqueued_at and abs(r.enqueued_at) < float("inf"), r
    # and dead-lettered (as the worker does with a body it cannot decode), they list
    foreign = [r for r in got if r.body != "{\"key\":\"ours\"}"]
    await transport.dead_letter("email", [(r.receipt, "undecodable") for r in foreign],
                                now=now)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GUARD_S
    letters = await transport.dead_letters("email")
    while len(letters) < len(foreign) and loop.time() < deadline:
        await asyncio.sleep(0.1)
        letters = await transport.dead_letters("email")
    assert sorted(d.body for d in letters) == sorted(str(r.body) for r in foreign)
    assert {d.reason for d in letters} == {"undecodable"}
