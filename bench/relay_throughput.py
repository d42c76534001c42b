"""Relay throughput: N ``selected`` intents to ``enqueued`` on PostgreSQL + Redis.

Set-up (not timed): a freshly created PostgreSQL database ``<db>_relay`` holding N
one-off intents admitted ``selected`` (as admission leaves them with a broker), and a
Redis Streams transport under a key prefix of this run's own.

Measured: ``relay_pass`` (lease a page, publish it chunk by chunk, mark the confirmed
chunks ``enqueued`` while the next go out, lease the next page meanwhile) until nothing
is left; ``rate_per_s`` = N / elapsed.

Floors, each measured once before and once after the relay (the mean of the two, so a
shared machine's noise falls on both sides):

- **XADD**: the same N message ids and bodies added to a stream by plain ``XADD``
  commands, pipelined in chunks of ``RelayConfig.chunk`` on one connection, encoded by
  hand (redis-py's pipeline costs more client CPU than the server spends): what the
  broker itself takes, with none of the transport's bookkeeping.
- **COPY**: a plain ``COPY`` (psycopg) of the same N intent rows, in their final
  ``enqueued`` state, into the ``intents`` table of a fresh database made by the same
  migrations, one transaction: what writing N rows costs the store at its cheapest
  (the relay must rewrite N rows, which costs more than inserting them).
- **floor** = N / (XADD time + COPY time): both kinds of work done one after the other
  by the cheapest means. ``ratio`` = floor rate / relay rate.

Correctness: every intent ends ``enqueued`` and the stream holds exactly N messages.

    .venv/bin/python bench/relay_throughput.py \
        --store postgresql://postgres@127.0.0.1/tidings_bench \
        --redis redis://127.0.0.1:6379 -n 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pglib import migrate, sibling_pg
from tidings.admission.relay import RelayConfig, relay_pass
from tidings.core.clock import SystemClock
from tidings.core.model import IntentDraft, message_body
from tidings.runtime import open_store
from tidings.transports.open import open_transport

CHANNEL = "email"
SEED_BATCH = 10_000


def key(i: int) -> str:
    return f"k{i:07d}"


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def xadd_commands(stream: str, first: int, stop: int) -> bytes:
    """``XADD <stream> * id <key> body <body>`` for keys ``first..stop-1``, as RESP."""
    head = b"*7\r\n" + _bulk(b"XADD") + _bulk(stream.encode()) + _bulk(b"*") + _bulk(b"id")
    body = _bulk(b"body")
    return b"".join(head + _bulk(key(i).encode()) + body + _bulk(message_body(key(i)).encode())
                    for i in range(first, stop))


async def read_replies(reader: asyncio.StreamReader, count: int) -> None:
    """Read ``count`` XADD replies (bulk strings); an error reply stops the run."""
    for _ in range(count):
        line = await reader.readline()
        if line.startswith(b"-"):
            raise SystemExit(f"XADD floor: {line.decode().strip()}")
        if line.startswith(b"$"):
            await reader.readexactly(int(line[1:]) + 2)


async def xadd_floor(redis: str, n: int, chunk: int, *, prefix: str = "bench-relay") -> float:
    """Seconds for N plain XADDs, pipelined a chunk at a time on one connection."""
    parts = urlsplit(redis)
    reader, writer = await asyncio.open_connection(parts.hostname or "127.0.0.1",
                                                   parts.port or 6379)
    stream = f"{prefix}-floor-{uuid.uuid4().hex}"
    try:
        if parts.path.strip("/"):
            writer.write(b"*2\r\n" + _bulk(b"SELECT") + _bulk(parts.path.strip("/").encode()))
            await reader.readline()
        start = time.perf_counter()
        for first in range(0, n, chunk):
            stop = min(n, first + chunk)
            writer.write(xadd_commands(stream, first, stop))
            await writer.drain()
            await read_replies(reader, stop - first)
        elapsed = time.perf_counter() - start
        writer.write(b"*2\r\n" + _bulk(b"XLEN") + _bulk(stream.encode()))
        length = int((await reader.readline())[1:])
        writer.write(b"*2\r\n" + _bulk(b"UNLINK") + _bulk(stream.encode()))
        await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()
    if length != n:
        raise SystemExit(f"XADD floor: {length} entries on the stream, expected {n}")
    return elapsed


_COPY = ("COPY intents (key, channel, recipient_id, address, template, data, state, due_at, "
         "created_at, updated_at, selected_at, enqueued_at) FROM STDIN")


def copy_floor(url: str, n: int) -> float:
    """Seconds for a plain COPY of the N intents, enqueued, into a fresh database."""
    import psycopg

    migrate(url)
    now = time.time()
    rows = [(key(i), CHANNEL, f"r{i}", f"r{i}@example.com", "receipt", "{}", "enqueued",
             now - 1, now, now, now, now) for i in range(n)]
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(_COPY) as copy:
            for row in rows:
                copy.write_row(row)
        elapsed = time.perf_counter() - start
        counted = conn.execute("SELECT count(*) FROM intents").fetchone()
    if not counted or counted[0] != n:
        raise SystemExit(f"COPY floor: {counted} rows, expected {n}")
    return elapsed


async def relay_seconds(store_url: str, redis: str, n: int, config: RelayConfig, *,
                        prefix: str = "bench-relay") -> float:
    clock = SystemClock()
    store, own = await open_store(store_url)
    await own.close()
    await store.migrate(now=clock.now())
    now = clock.now()
    for first in range(0, n, SEED_BATCH):
        await store.intent_admit([IntentDraft(
            key=key(i), channel=CHANNEL, recipient_id=f"r{i}",
            address=f"r{i}@example.com", template="receipt", data="{}", due_at=now - 1)
            for i in range(first, min(n, first + SEED_BATCH))], now=now)
    transport = await open_transport(f"{redis}?prefix={prefix}-{uuid.uuid4().hex}")
    start = time.perf_counter()
    moved = 0
    while moved < n:
        count = await relay_pass(store, transport, now=clock.now(), config=config, clock=clock,
                                 max_pages=1_000_000)
        if not count:
            break
        moved += count
    elapsed = time.perf_counter() - start
    counts = await store.intent_counts()
    depth = await transport.depth(CHANNEL, now=clock.now())
    drop = getattr(transport, "drop_all", None)
    if drop is not None:
        await drop()
    await transport.close()
    await store.close()
    if counts != {CHANNEL: {"enqueued": n}} or depth.ready != n:
        raise SystemExit(f"relay: ledger {counts}, stream {depth.ready}; expected {n}")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/tidings_bench")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--prefix", default="bench-relay",
                        help="Redis key prefix (a run's own suffix is added)")
    args = parser.parse_args(argv)
    config = RelayConfig()
    n = args.n
    floor_url = sibling_pg(args.store, "relay_floor")
    xadd = [asyncio.run(xadd_floor(args.redis, n, config.chunk, prefix=args.prefix))]
    copy = [copy_floor(floor_url, n)]
    elapsed = asyncio.run(relay_seconds(sibling_pg(args.store, "relay"), args.redis, n, config,
                                      prefix=args.prefix))
    xadd.append(asyncio.run(xadd_floor(args.redis, n, config.chunk, prefix=args.prefix)))
    copy.append(copy_floor(sibling_pg(args.store, "relay_floor"), n))
    xadd_s, copy_s = sum(xadd) / 2, sum(copy) / 2
    rate, floor = n / elapsed, n / (xadd_s + copy_s)
    print(f"relay of {n:,} selected intents to enqueued, page {config.page:,}, "
          f"chunk {config.chunk:,}")
    print(f"  relay : {rate:>10,.0f} intents/s ({elapsed:.2f} s)")
    print(f"  XADD  : {n / xadd_s:>10,.0f} messages/s (plain XADD pipelined; "
          f"{' and '.join(f'{s:.2f}' for s in xadd)} s before and after)")
    print(f"  COPY  : {n / copy_s:>10,.0f} rows/s (plain COPY of the enqueued intents; "
          f"{' and '.join(f'{s:.2f}' for s in copy)} s)")
    print(f"  floor : {floor:>10,.0f} intents/s (XADD then COPY, one after the other)")
    print(f"  ratio : {floor / rate:.2f} (floor / relay); relay / XADD "
          f"{rate * xadd_s / n:.2f}, relay / COPY {rate * copy_s / n:.2f}")


if __name__ == "__main__":
    main()
