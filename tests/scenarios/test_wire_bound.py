"""A send is marked started only once the provider has a connection for it: given, when, then.

A provider with a pool of connections (SMTP's ``max_connections``) declares it in
``max_concurrent_sends``. A worker then starts no more sends than that at once: the
rest wait before their pacer slot and their start mark, not inside the provider's
pool, so a crash leaves uncertain (held, on SMTP) only what was on the wire, never the
whole in-flight budget of the channel. Judged by the ledger's own rows (the start
marks, read from the SQLite file) against what the pooled provider had taken onto a
connection, and by the sandbox's counts.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING

from tidings.core.model import SendRequest
from tidings.core.outcomes import Outcome

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

CONNECTIONS = 2
INTENTS = 30
#: Each request takes 200 ms of fake time: long enough for every claim to queue up.
SETTINGS = {"channels": {"email": {"max_in_flight": 64}}}
SANDBOX = {"latency": {"email": 200}}


def pool(h: Harness, connections: int, *, declared: bool) -> set[str]:
    """Give the harness's provider a pool of ``connections`` (as SMTP's is), declared in
    ``max_concurrent_sends`` or not; the keys that got a connection, as they get it."""
    on_the_wire: set[str] = set()
    slots = asyncio.Semaphore(connections)
    send = h.provider.send

    async def pooled(request: SendRequest) -> Outcome:
        async with slots:
            on_the_wire.add(request.key)
            return await send(request)

    h.provider.send = pooled  # type: ignore[method-assign]
    if declared:
        h.provider.max_concurrent_sends = connections  # type: ignore[attr-defined]
    return on_the_wire


def marked_started(h: Harness) -> set[str]:
    """The keys the ledger has a start mark for, under their current lease."""
    path = h.rt.settings.store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT key FROM intents WHERE state = 'claimed' "
                          "AND send_started_token = lease_token").fetchall()
    return {key for (key,) in rows}


async def serve_all(h: Harness, keys: list[str], on_the_wire: set[str]) -> int:
    """Run one worker until every key is accepted; the most keys marked started in the
    ledger at once that had no connection yet."""
    w = h.worker()
    most = 0

    def observe() -> None:
        nonlocal most
        most = max(most, len(marked_started(h) - on_the_wire))

    running = asyncio.create_task(w.run())
    try:
        # Until every send has come back too: the sandbox counts a key before its latency.
        await h.run_until(lambda: w.held == 0 and all(h.accepted_by_sandbox(k) for k in keys),
                          observe=observe)
    finally:
        w.stop()
        await h.guard(running)
    return most


async def test_sends_beyond_the_providers_connections_wait_unmarked(
        make_harness: HarnessFactory) -> None:
    # given a provider with two connections, declared, and thirty intents on a channel
    # whose in-flight budget is sixty-four
    h: Harness = await make_harness(settings=SETTINGS, sandbox=SANDBOX)
    on_the_wire = pool(h, CONNECTIONS, declared=True)
    keys = [await h.notify(f"weekly:w{i:02d}") for i in range(INTENTS)]

    # when one worker serves them
    most = await serve_all(h, keys, on_the_wire)

    # then no more sends were marked started without a connection than the provider has
    # connections (a mark precedes its request by a few awaits), and each went once
    assert most <= CONNECTIONS, most
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (INTENTS, 0)


async def test_an_undeclared_pool_lets_marks_run_ahead_of_the_wire(
        make_harness: HarnessFactory) -> None:
    # given the same pool, not declared by the provider
    h: Harness = await make_harness(settings=SETTINGS, sandbox=SANDBOX)
    on_the_wire = pool(h, CONNECTIONS, declared=False)
    keys = [await h.notify(f"weekly:u{i:02d}") for i in range(INTENTS)]

    # when one worker serves them
    most = await serve_all(h, keys, on_the_wire)

    # then sends were marked started while they waited for a connection (what the
    # declaration prevents: a crash then would hold them all), each still sent once
    assert most > CONNECTIONS, most
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (INTENTS, 0)
