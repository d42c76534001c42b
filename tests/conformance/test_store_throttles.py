"""Store conformance: per-recipient throttle counts (``Throttles``).

A reservation is granted while fewer than its limit are counted in the (rule,
recipient, window), once per intent key and window; a refused one counts nothing; a
release hands back what the key held; three processes reserving for few recipients at
once never count past the limit. Runs unchanged on every store backend (see
conftest.py).
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from tidings.core.throttle import Ask
from tidings.stores.base import Store

W0 = 1_000_020.0
RULE = "channel:sms"


def asked(key: str, recipient: str = "r1", *, limit: int = 2, start: float = W0,
          rule: str = RULE) -> Ask:
    return Ask(key=key, rule=rule, recipient=recipient, window_start=start,
               window_end=start + 60.0, limit=limit)


async def test_reservations_are_granted_up_to_the_limit(store: Store) -> None:
    granted = await store.throttle_reserve([asked("a"), asked("b"), asked("c")])
    assert granted == [True, True, False]
    assert await store.throttle_sends(RULE, "r1", W0) == 2
    # other recipients, windows and rules count apart
    assert await store.throttle_reserve([asked("d", "r2"), asked("e", start=W0 + 60),
                                         asked("f", rule="campaign:promo/sms")]) == [
        True, True, True]
    assert await store.throttle_sends(RULE, "r1", W0) == 2
    assert await store.throttle_sends(RULE, "nobody", W0) == 0


async def test_the_same_key_is_counted_once_per_window(store: Store) -> None:
    assert await store.throttle_reserve([asked("a")]) == [True]
    # the same intent claimed again (after a crash, say) in the same window
    assert await store.throttle_reserve([asked("a"), asked("a")]) == [True, True]
    assert await store.throttle_sends(RULE, "r1", W0) == 1


async def test_a_release_hands_back_what_the_key_held(store: Store) -> None:
    await store.throttle_reserve([asked("a"), asked("b"), asked("c")])

    assert await store.throttle_release(["a", "c", "never-held"]) == 1

    assert await store.throttle_sends(RULE, "r1", W0) == 1
    assert await store.throttle_reserve([asked("c")]) == [True]
    assert await store.throttle_release([]) == 0


async def test_purge_drops_the_windows_that_ended(store: Store) -> None:
    await store.throttle_reserve([asked("a"), asked("b", start=W0 + 60)])

    assert await store.throttle_purge(before=W0 + 60) == 1

    assert await store.throttle_sends(RULE, "r1", W0) == 0
    assert await store.throttle_sends(RULE, "r1", W0 + 60) == 1
    assert await store.throttle_release(["a"]) == 0  # its hold went with its window


def _reserve_everything(opener: Callable[[str], Awaitable[Store]], url: str, owner: str,
                        start: Any, results: Any) -> None:
    """Child process: reserve 200 sends for 5 recipients, 20 a batch; report the grants."""

    async def run() -> list[str]:
        store = await opener(url)
        try:
            asks = [asked(f"{owner}-{n}", f"r{n % 5}", limit=7) for n in range(200)]
            won: list[str] = []
            start.wait()
            for i in range(0, len(asks), 20):
                batch = asks[i:i + 20]
                granted = await store.throttle_reserve(batch)
                won += [a.recipient for a, ok in zip(batch, granted, strict=True) if ok]
            return won
        finally:
            await store.close()

    results.put((owner, asyncio.run(run())))


async def test_three_processes_never_count_past_the_limit(
        store: Store, store_backend: Any, store_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_reserve_everything,
                         args=(store_backend.open, store_url, f"w{n}", start, results))
             for n in range(3)]
    for p in procs:
        p.start()
    won = dict(await asyncio.to_thread(lambda: [results.get(timeout=120) for _ in procs]))
    for p in procs:
        p.join(timeout=30)

    assert [p.exitcode for p in procs] == [0, 0, 0]
    per_recipient = Counter(r for rs in won.values() for r in rs)
    assert per_recipient == {f"r{n}": 7 for n in range(5)}
    for n in range(5):
        assert await store.throttle_sends(RULE, f"r{n}", W0) == 7
