"""Relay throughput: N ``selected`` intents to ``enqueued`` on PostgreSQL + Redis.

Set-up (not timed): a freshly created PostgreSQL database ``<db>_relay`` holding N
one-off intents admitted ``selected`` (as admission leaves them with a broker), and a
Redis Streams transport under a key prefix of this run's own.

Measured: ``relay_pass`` (lease a page, publish it chunk by chunk, mark each chunk
``enqueued``) until nothing is left; ``rate_per_s`` = N / elapsed.

Floor ("broker-only"): the same N messages published through the bare transport in
calls of ``RelayConfig.chunk`` under another prefix, with no store work at all, once
before and once after the relay (the floor is the mean). ``ratio`` = floor rate /
relay rate: the cost of the store (lease, mark, events) and of the relay itself.

Correctness: every intent ends ``enqueued`` and the stream holds exactly N messages.

    .venv/bin/python bench/relay_throughput.py \
        --store postgresql://postgres@127.0.0.1/tidings_bench \
        --redis redis://127.0.0.1:6379 -n 20000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pglib import sibling_pg
from tidings.clock import SystemClock
from tidings.model import IntentDraft, OutgoingMessage, message_body
from tidings.relay import RelayConfig, relay_pass
from tidings.runtime import open_store
from tidings.transports.open import open_transport

CHANNEL = "email"
SEED_BATCH = 5000


async def broker_floor(redis: str, n: int, chunk: int) -> float:
    transport = await open_transport(f"{redis}?prefix=bench-relay-floor-{uuid.uuid4().hex}")
    now = SystemClock().now()
    messages = [OutgoingMessage(message_id=f"k{i:07d}", body=message_body(f"k{i:07d}"),
                                delay_s=0.0) for i in range(n)]
    start = time.perf_counter()
    for first in range(0, n, chunk):
        await transport.publish(CHANNEL, messages[first:first + chunk], now=now)
    elapsed = time.perf_counter() - start
    depth = await transport.depth(CHANNEL, now=now)
    drop = getattr(transport, "drop_all", None)
    if drop is not None:
        await drop()
    await transport.close()
    if depth.ready != n:
        raise SystemExit(f"floor: {depth.ready} messages on the stream, expected {n}")
    return n / elapsed


async def relay_rate(store_url: str, redis: str, n: int) -> float:
    clock = SystemClock()
    store, own = await open_store(store_url)
    await own.close()
    await store.migrate(now=clock.now())
    now = clock.now()
    for first in range(0, n, SEED_BATCH):
        await store.intent_admit([IntentDraft(
            key=f"k{i:07d}", channel=CHANNEL, recipient_id=f"r{i}",
            address=f"r{i}@example.com", template="receipt", data="{}", due_at=now - 1)
            for i in range(first, min(n, first + SEED_BATCH))], now=now)
    transport = await open_transport(f"{redis}?prefix=bench-relay-{uuid.uuid4().hex}")
    config = RelayConfig()
    # An older relay_pass (one publish and one mark a page) takes no clock.
    clocked = {"clock": clock} if hasattr(config, "chunk") else {}
    start = time.perf_counter()
    moved = 0
    while moved < n:
        count = await relay_pass(store, transport, now=clock.now(), config=config, **clocked)
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
    return n / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/tidings_bench")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("-n", type=int, default=20_000)
    args = parser.parse_args(argv)
    chunk = getattr(RelayConfig(), "chunk", 500)
    url = sibling_pg(args.store, "relay")
    floors = [asyncio.run(broker_floor(args.redis, args.n, chunk))]
    rate = asyncio.run(relay_rate(url, args.redis, args.n))
    floors.append(asyncio.run(broker_floor(args.redis, args.n, chunk)))
    floor = sum(floors) / len(floors)
    print(f"relay   : {rate:>10,.0f} intents/s to enqueued (N={args.n:,})")
    print(f"floor   : {floor:>10,.0f} messages/s broker-only "
          f"({' and '.join(f'{f:,.0f}' for f in floors)})")
    print(f"ratio   : {floor / rate:.2f} (floor / relay)")


if __name__ == "__main__":
    main()
