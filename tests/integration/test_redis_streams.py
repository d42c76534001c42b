"""Redis Streams beyond the conformance suite: receipts across connections, a server
restart in the middle of the work, the adapter judged against the embedded queue, and
entries a foreign publisher wrote into the stream.

The restart tests run a Redis server of their own (``support.redis_server``: a free
port, an append-only file fsynced on every write) and stop and start THAT one; the
shared server is only ever used under a key prefix of one test.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.redis_server import RedisServer
from tidings.core.errors import TransportError
from tidings.core.fair import FairShare
from tidings.core.model import OutgoingMessage, Received
from tidings.stores.sqlite_db import SqliteDatabase
from tidings.transports.base import Transport
from tidings.transports.redis_streams import MAX_BLOCK_S, RedisStreamsTransport
from tidings.transports.sqlite import SqliteTransport

T0 = 1_000_000.0
VIS = 30.0


def msg(message_id: str, delay_s: float = 0.0) -> OutgoingMessage:
    return OutgoingMessage(message_id=message_id, body=f'{{"key":"{message_id}"}}',
                           delay_s=delay_s)


@pytest.fixture
async def redis_transport(redis_url: str) -> AsyncIterator[RedisStreamsTransport]:
    transport = await RedisStreamsTransport.open(redis_url)
    yield transport
    await transport.close()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    try:
        server = RedisServer(tmp_path / "redis")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def test_receipts_work_from_another_connection(
    redis_transport: RedisStreamsTransport, redis_url: str
) -> None:
    # given three messages received through one connection, which then goes away
    await redis_transport.publish("email", [msg("a"), msg("b"), msg("c")], now=T0)
    a, b, c = await redis_transport.receive("email", max_messages=3, visibility_s=VIS, now=T0)
    await redis_transport.close()

    # when another connection (another process, after a reconnect) acts on the receipts
    other = await RedisStreamsTransport.open(redis_url)
    try:
        await other.ack("email", [a.receipt])
        await other.extend("email", [b.receipt], visibility_s=100, now=T0 + 10)
        await other.nack("email", [(c.receipt, 0.0)], now=T0 + 10, failed=True)

        # then each took effect: a gone, b hidden past its first timeout, c back failed once
        [again] = await other.receive("email", max_messages=10, visibility_s=VIS,
                                      now=T0 + VIS + 1)
        assert (again.message_id, again.receive_count, again.failures) == ("c", 2, 1)
        assert await other.contains("email", ["a", "b", "c"]) == {"b", "c"}
        await other.ack("email", [again.receipt])
        [late] = await other.receive("email", max_messages=10, visibility_s=VIS, now=T0 + 111)
        assert (late.message_id, late.receive_count) == ("b", 2)
    finally:
        await other.close()


async def test_a_wait_never_outlasts_the_socket_timeout(
    redis_transport: RedisStreamsTransport,
) -> None:
    # redis-py gives up on a reply after socket_timeout (5 s by default): a wait that
    # blocked longer would read as a lost connection.
    kwargs = redis_transport.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] > MAX_BLOCK_S


async def test_a_restart_keeps_messages_receipts_and_counts(own_server: RedisServer) -> None:
    # given messages published, received, failed and dead-lettered on a server that
    # keeps an append-only file
    transport = await RedisStreamsTransport.open(f"{own_server.url}?prefix=t")
    try:
        await transport.publish("email", [msg("a"), msg("b"), msg("c"), msg("d", 60)], now=T0)
        a, b, c = await transport.receive("email", max_messages=3, visibility_s=VIS, now=T0)
        await transport.nack("email", [(b.receipt, 0.0)], now=T0, failed=True)
        await transport.dead_letter("email", [(c.receipt, "poison")], now=T0)

        # when the server stops and starts again
        own_server.stop()
        own_server.start()

        # then the same client carries on: a's receipt still acks, b comes back with
        # its counts, c is a dead letter, d is still delayed
        await transport.ack("email", [a.receipt])
        [b2] = await transport.receive("email", max_messages=10, visibility_s=VIS, now=T0 + 1)
        assert (b2.message_id, b2.receive_count, b2.failures) == ("b", 2, 1)
        [dead] = await transport.dead_letters("email")
        assert (dead.message_id, dead.reason) == ("c", "poison")
        depth = await transport.depth("email", now=T0 + 1)
        assert (depth.ready, depth.delayed, depth.in_flight, depth.dead) == (0, 1, 1, 1)
        assert await transport.contains("email", ["a", "b", "c", "d"]) == {"b", "d"}
    finally:
        await transport.close()


async def test_a_call_during_the_outage_waits_for_the_server(
        own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    # given a server that is down
    transport = await RedisStreamsTransport.open(f"{own_server.url}?prefix=t")
    try:
        own_server.stop()

        # when a publish is made while it is down and the server comes back meanwhile
        publishing = asyncio.create_task(transport.publish("email", [msg("a")], now=T0))
        await asyncio.sleep(0.5)
        assert not publishing.done()
        await asyncio.to_thread(own_server.start)
        await asyncio.wait_for(publishing, 30)

        # then the outage's end is said, with the restart (a server without data would
        # have lost its messages), and the publish landed once
        said = [r for r in caplog.records if r.getMessage().startswith("broker reachable")]
        assert said and getattr(said[-1], "restarted", None) is True
        [a] = await transport.receive("email", max_messages=10, visibility_s=VIS, now=T0)
        assert a.message_id == "a"
        assert await transport.receive("email", max_messages=10, visibility_s=VIS,
                                       now=T0) == []
    finally:
        await transport.close()


async def test_a_server_that_stays_down_is_a_transport_error_naming_no_password(
    own_server: RedisServer,
) -> None:
    transport = await RedisStreamsTransport.open(
        f"redis://:hunter2@127.0.0.1:{own_server.port}/0", reconnect_s=0.5)
    try:
        own_server.stop()
        with pytest.raises(TransportError) as caught:
            await transport.depth("email", now=T0)
        assert "hunter2" not in str(caught.value) and "***" in str(caught.value)
    finally:
        with contextlib.suppress(Exception):
            await transport.close()


async def test_a_refused_password_is_refused_at_once_however_patient(
    own_server: RedisServer,
) -> None:
    import redis.asyncio as aioredis

    admin = aioredis.Redis.from_url(own_server.url)
    await admin.config_set("requirepass", "right-one")
    await admin.aclose()
    # a service's patience is unbounded for outages: a wrong password is none
    with pytest.raises(TransportError) as caught:
        await asyncio.wait_for(RedisStreamsTransport.open(
            f"redis://:wrong-one@127.0.0.1:{own_server.port}/0", reconnect_s=math.inf),
            timeout=60)
    assert "not reachable" not in str(caught.value) and "wrong-one" not in str(caught.value)


# ------------------------------------------------------------- against the embedded queue

OPS = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(0, 5), st.sampled_from([0.0, 0.0, 5.0, 40.0])),
    st.tuples(st.just("receive"), st.just(100), st.just(0.0)),
    st.tuples(st.just("ack"), st.integers(0, 9), st.just(0.0)),
    st.tuples(st.just("nack"), st.integers(0, 9), st.sampled_from([0.0, 7.0])),
    st.tuples(st.just("fail"), st.integers(0, 9), st.sampled_from([0.0, 7.0])),
    st.tuples(st.just("extend"), st.integers(0, 9), st.sampled_from([10.0, 50.0])),
    st.tuples(st.just("dead"), st.integers(0, 9), st.just(0.0)),
    st.tuples(st.just("redrive"), st.just(0), st.just(0.0)),
    st.tuples(st.just("tick"), st.integers(1, 45), st.just(0.0)),
), max_size=30)


def seen(received: list[Received]) -> list[tuple[str, int, int, float]]:
    """What a receive handed out, in a canonical order: a message nacked back to a
    Redis stream joins its tail (as a broker's requeue does), where the embedded queue
    keeps its first place, so the order of one batch is not compared (the conformance
    suite checks oldest-first where both agree: fresh publishes)."""
    return sorted((r.message_id, r.receive_count, r.failures, r.enqueued_at)
                  for r in received)


async def _run(ops: list[tuple[str, int, float]], transports: list[Transport]) -> None:
    """Apply ``ops`` to every transport and require the same observable answers."""
    now = T0
    held: list[list[Received]] = [[] for _ in transports]  # receipts, in the same order
    for op, n, x in ops:
        if op == "publish":
            for t in transports:
                await t.publish("q", [msg(f"m{n}", x)], now=now)
        elif op == "receive":
            got = [await t.receive("q", max_messages=n, visibility_s=VIS, now=now)
                   for t in transports]
            assert all(seen(g) == seen(got[0]) for g in got), (op, now, [seen(g) for g in got])
            for h, g in zip(held, got, strict=True):
                h.extend(sorted(g, key=lambda r: (r.message_id, r.receive_count, r.failures,
                                                  r.enqueued_at)))
        elif op == "tick":
            now += n
        elif op == "redrive":
            counts = []
            for t in transports:
                ids = [d.id for d in await t.dead_letters("q")]
                counts.append(await t.redrive("q", ids[:1], now=now))
            assert len(set(counts)) == 1
        elif held[0]:
            index = n % len(held[0])
            for t, h in zip(transports, held, strict=True):
                receipt = h[index].receipt
                if op == "ack":
                    await t.ack("q", [receipt])
                elif op in ("nack", "fail"):
                    await t.nack("q", [(receipt, x)], now=now, failed=op == "fail")
                elif op == "extend":
                    await t.extend("q", [receipt], visibility_s=x, now=now)
                else:
                    await t.dead_letter("q", [(receipt, "poison")], now=now)
                if op != "extend":
                    # A receipt is spent once acted on (what a second use of it does
                    # is not the port's to say); a receipt outlived by a redelivery
                    # stays, stale.
                    del h[index]
        depths = [await t.depth("q", now=now) for t in transports]
        assert all(d == depths[0] for d in depths), (op, now, depths)
        ids = [f"m{i}" for i in range(6)]
        found = [await t.contains("q", ids) for t in transports]
        assert all(f == found[0] for f in found)
    letters = [[(d.message_id, d.reason, d.receive_count, d.dead_at)
                for d in await t.dead_letters("q")] for t in transports]
    assert all(lt == letters[0] for lt in letters)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_redis_streams_answers_as_the_embedded_queue_does(
    ops: list[tuple[str, int, float]], redis_server_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # Every sequence of operations (publish, receive, ack, nack, failed nack, extend,
    # dead-letter, redrive, time passing) gives the same receives, counts, depths,
    # contains and dead letters on Redis as on the SQLite queue, the reference.
    async def main() -> None:
        folder = tmp_path_factory.mktemp("model")
        db = SqliteDatabase.from_url(f"sqlite:///{folder / 'q.db'}")
        await db.migrate(now=T0)
        reference = SqliteTransport(db)
        head = os.environ.get("TIDINGS_TEST_REDIS_PREFIX", "tidings-test")
        url = f"{redis_server_url}?prefix={head}-model-{folder.name}"
        redis_side = await RedisStreamsTransport.open(url)
        try:
            await _run(ops, [reference, redis_side])
        finally:
            await redis_side.drop_all()
            await redis_side.close()
            await reference.close()

    asyncio.run(main())


async def test_entries_another_publisher_wrote_into_the_stream_are_dead_letters_at_once(
    redis_transport: RedisStreamsTransport,
) -> None:
    # given tidings' messages around entries a foreign XADD wrote into the same stream
    # (missing fields, numbers that are none, bytes that are not UTF-8)
    t = redis_transport
    await t.publish("email", [msg("before")], now=T0)
    stream = t.keys("email")[0]
    foreign: list[dict[str, str | bytes]] = [
        {"hello": "world"},
        {"id": "x", "body": "y"},
        {"id": "z", "body": b"\xff\xfe", "enq": "soon", "uid": "7", "rc": "0"},
        {"id": "n", "body": "b", "enq": "nan", "uid": "8", "rc": "0"},
        {"id": "u", "body": "b", "enq": "5", "uid": "-1", "rc": "0"},
        {"id": "r", "body": "b", "enq": "5", "uid": "9", "rc": "1e999"},
        {"id": "h", "body": "b", "enq": "0x10", "uid": "10", "rc": "0"},  # Lua reads 16
        {"id": "g", "body": "b", "enq": "5", "uid": "11", "rc": "99999999999999999999"},
    ]
    for fields in foreign:
        await t.client.xadd(stream, fields)  # type: ignore[arg-type]
    await t.publish("email", [msg("after")], now=T0)

    # then depth still answers, and a receive hands out tidings' messages only
    depth = await t.depth("email", now=T0)
    assert depth.ready == 2 + len(foreign)
    got = await t.receive("email", max_messages=10, visibility_s=VIS, now=T0 + 1)
    assert [r.message_id for r in got] == ["before", "after"]
    # and each foreign entry is a dead letter with what is wrong with it, received once
    letters = await t.dead_letters("email", limit=20)
    assert len(letters) == len(foreign)
    assert all(d.reason.startswith("not a tidings message: ") for d in letters)
    assert [d.reason.removeprefix("not a tidings message: ") for d in letters] == [
        "no field id", "no field enq", "field enq is not a time", "field enq is not a time",
        "field uid is not a whole number", "field rc is not a whole number",
        "field enq is not a time", "field rc is not a whole number"]
    assert {d.receive_count for d in letters} == {1}
    await t.ack("email", [r.receipt for r in got])
    after = await t.depth("email", now=T0 + 2)
    assert (after.ready, after.in_flight, after.dead) == (0, 0, len(foreign))
    # and a foreign entry written straight into the dead stream is listed, not a failure
    await t.client.xadd(t.keys("email")[7], {"hello": "world"})  # type: ignore[arg-type]
    listed = await t.dead_letters("email", limit=20)
    assert listed[-1].reason == "not a tidings dead letter" and len(listed) == len(foreign) + 1


async def test_groups_are_kept_while_they_hold_messages_under_concurrent_work(
    redis_transport: RedisStreamsTransport,
) -> None:
    # given groups named with what a key or a receipt might trip on, published from
    # several tasks while others receive with fair share, nack some, and ack the rest
    groups = ["a", "b/c", "d@1", "e#f", "g h", "ünï"]
    published = [f"{g}|{n}" for g in groups for n in range(40)]

    async def publish(group: str) -> None:
        for n in range(0, 40, 5):
            await redis_transport.publish("email", [
                OutgoingMessage(message_id=f"{group}|{k}", body="{}", lane=1, group=group)
                for k in range(n, n + 5)], now=T0)
            await asyncio.sleep(0)

    done: list[str] = []

    async def work(worker: int) -> None:
        share = FairShare()
        idle = 0
        while idle < 20:
            got = await redis_transport.receive("email", max_messages=7, visibility_s=VIS,
                                                now=T0, fair=share)
            idle = 0 if got else idle + 1
            nacked = [m for m in got if m.receive_count == 1 and hash(m.message_id) % 3 == 0]
            await redis_transport.nack("email", [(m.receipt, 0.0) for m in nacked], now=T0)
            await redis_transport.ack("email", [m.receipt for m in got if m not in nacked])
            done.extend(m.message_id for m in got if m not in nacked)
            await asyncio.sleep(0)

    await asyncio.gather(*(publish(g) for g in groups), *(work(w) for w in range(3)))

    # then every message was received and acked once, and no group's keys are left
    assert sorted(done) == sorted(published)
    depth = await redis_transport.depth("email", now=T0)
    assert (depth.ready, depth.in_flight, depth.delayed) == (0, 0, 0)
    client = redis_transport.client
    left = [k async for k in client.scan_iter(match=f"{redis_transport.prefix}:{{email}}:g*")]
    assert left == []


async def test_a_publish_into_a_group_wakes_a_waiting_consumer(
    redis_transport: RedisStreamsTransport, redis_url: str,
) -> None:
    other = await RedisStreamsTransport.open(redis_url)
    try:
        waiting = asyncio.create_task(redis_transport.wait("email", timeout_s=4.0, now=T0))
        await asyncio.sleep(0.2)
        await other.publish("email", [OutgoingMessage(message_id="x", body="{}",
                                                      group="tenant")], now=T0)
        await asyncio.wait_for(waiting, 2.0)
        [got] = await redis_transport.receive("email", max_messages=5, visibility_s=VIS,
                                              now=T0)
        assert (got.message_id, got.lane) == ("x", 0)
    finally:
        await other.close()
