"""The outbox relay: publishes selected intents to their channel queues.

With the store's own queue, admission writes intents and their messages in one
transaction and the relay only picks up what was left ``selected``: future-dated
intents whose window opened, intents of a paused channel once it resumes. With a
broker transport the outbox is real: admission writes intents ``selected`` and returns
without waiting for the broker, and the relay (``relay_loop``, run by the scheduler
service; every reconciler pass too) leases a page of them and publishes it by chunks,
extending the lease of the page's rest while it is still publishing, and marks what
was confirmed ``enqueued`` (``publish_page``). The message id is always the
intent key, so a second publication (a publish whose answer was lost, a relay that died
between publishing and marking) is a harmless duplicate: the worker's ledger check
turns it into ``duplicate_observed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from tidings.core.clock import Clock
from tidings.core.model import OutgoingMessage, message_body
from tidings.stores.base import Ledger, PublishItem
from tidings.transports.base import Transport

log = logging.getLogger("tidings.relay")


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    horizon_s: float = 60.0
    lease_s: float = 30.0
    page: int = 5000
    idle_s: float = 0.05
    """The relay loop's first wait when it found nothing; doubled up to ``max_idle_s``."""
    max_idle_s: float = 0.5
    pages_in_flight: int = 1
    """Relay loops side by side (a server store hands each a page of its own)."""
    chunk: int = 500
    """Messages a page is published by (one ``transport.publish`` call a channel each):
    between chunks, once half the lease has passed (or less is left than two of the
    slowest chunk so far), the chunks confirmed so far are marked ``enqueued`` and the
    lease of the page's rest is extended."""


#: What ``publish`` takes: ``(key, channel, due_at, lane)``, or with the intent's group.
Publishable = tuple[str, str, float, int] | tuple[str, str, float, int, str]


async def publish(transport: Transport, items: Iterable[Publishable], *, now: float) -> int:
    """Publish ``(key, channel, due_at, lane[, group])`` items, delayed until due, each
    in its intent's lane and group (a broker keeps those it is given; no group when
    none is given); return the count."""
    by_channel: dict[str, list[OutgoingMessage]] = defaultdict(list)
    for key, channel, due_at, lane, *group in items:
        by_channel[channel].append(OutgoingMessage(
            message_id=key, body=message_body(key), delay_s=max(0.0, due_at - now),
            lane=lane, group=group[0] if group else ""))
    for channel, messages in by_channel.items():
        await transport.publish(channel, messages, now=now)
    return sum(len(m) for m in by_channel.values())


#: Attempts at publishing a leased page, and the pause before each retry after the first.
PUBLISH_ATTEMPTS = 3
RETRY_PAUSE_S = 0.2


async def publish_leased(transport: Transport, items: Sequence[PublishItem], *,
                         now: float) -> None:
    """Publish a leased page; while an attempt fails, publish it again under the same
    keys (at once, then after a pause), ``PUBLISH_ATTEMPTS`` times in all: an attempt
    whose answer was lost may have landed, and the duplicate is harmless. The last
    failure is raised: the page stays ``selected``, its lease lapses, and a later pass
    publishes it."""
    for attempt in range(1, PUBLISH_ATTEMPTS + 1):
        try:
            await publish(transport, ((i.key, i.channel, i.due_at, i.lane, i.group)
                                      for i in items), now=now)
            return
        except Exception as exc:
            if attempt == PUBLISH_ATTEMPTS:
                raise
            log.warning("publish failed; publishing the page again", extra={
                "count": len(items), "attempt": attempt,
                "error": str(exc) or type(exc).__name__})
        if attempt > 1:
            await asyncio.sleep(RETRY_PAUSE_S)


def _clock_from(now: float, clock: Clock | None, *, read_at: float | None = None
                ) -> Callable[[], float]:
    """``now`` moved on by the time ``clock`` measures from ``read_at`` (its reading at
    ``now``; default: its reading at this call); without a clock, always ``now``."""
    if clock is None:
        return lambda: now
    started = read_at if read_at is not None else clock.now()
    return lambda: now + (clock.now() - started)


async def publish_page(
    store: Ledger, transport: Transport, items: Sequence[PublishItem], *, now: float,
    config: RelayConfig, clock: Clock | None = None, leased_on: float | None = None,
    defer: Callable[[asyncio.Task[None]], None] | None = None,
) -> int:
    """Publish a page leased at ``now`` chunk by chunk and keep the lease of the rest
    from lapsing while the page is being published: between chunks, once more than half
    of the lease has passed, or less of it is left than two of the slowest chunk so far
    (a chunk just under half the lease would otherwise end at the lease's last
    instant), the chunks confirmed so far are marked ``enqueued`` and the
    lease of the rest is extended for another ``lease_s``. So a slow broker never lets a
    second relay pass take the page's rest and publish it again; a row whose lease did
    lapse (a chunk slower than the whole lease) and that another relay took meanwhile is
    left to it.

    Confirmed chunks are marked while the next ones are published: one marking
    statement at a time, for everything confirmed since the last one began (so the
    store's marking and the broker's publishing overlap, and a slower store marks in
    larger statements); the page's end marks what is left. ``clock`` measures the time
    spent (without one the pass is taken as instant); time is counted from ``now``, the
    time the page was leased at, which ``clock`` read as ``leased_on`` (default: now,
    for a page leased just before the call). Returns how many were published.

    The page's end (the last marking and the lease's release) is handed to ``defer`` as
    a task, when given and the page was published without failure, so the caller may
    publish its next page meanwhile (and must await the task); otherwise it is awaited
    here."""
    at = _clock_from(now, clock, read_at=leased_on)

    # What the store's intent_claim_publish set: now + lease_s.
    held_until = now + config.lease_s
    leased_at = now
    rest = list(items)
    # The keys under this relay's lease (the page, then what each extension kept).
    held = [i.key for i in items]
    # Confirmed but not yet marked, and the marking statement in flight (if any).
    confirmed: list[str] = []
    marking: asyncio.Task[int] | None = None

    async def settle() -> None:
        """Wait for the marking in flight; its failure is raised."""
        nonlocal marking
        if marking is not None:
            task, marking = marking, None
            await task

    async def finish() -> None:
        """What the transport confirmed is marked even when a later chunk failed (and
        when the marking in flight failed: its keys are lost to this pass only, the rows
        stay selected and a later pass publishes them again). Then the page's lease ends
        (a store with a lease per page frees its row)."""
        try:
            await settle()
        finally:
            try:
                await store.intent_mark_enqueued(confirmed, now=at())
            finally:
                await store.intent_release_publish(held, held_until=held_until)

    published = 0
    slowest = 0.0  # the longest a chunk took so far
    try:
        while rest:
            t = at()
            # Past half the lease, or with less of it left than two of the slowest chunk
            # so far: a chunk as slow as one just under half the lease still lands
            # inside the lease, with room to spare (not at its very last instant).
            if t - leased_at > config.lease_s / 2 or held_until - t < 2 * slowest:
                await settle()
                await store.intent_mark_enqueued(confirmed, now=t)
                confirmed = []
                still = set(await store.intent_extend_publish(
                    [i.key for i in rest], held_until=held_until,
                    lease_until=t + config.lease_s))
                if len(still) < len(rest):
                    log.info("publish lease lapsed; leaving the rows another pass took",
                             extra={"count": len(rest) - len(still)})
                    rest = [i for i in rest if i.key in still]
                held_until, leased_at = t + config.lease_s, t
                held = [i.key for i in rest]
                if not rest:
                    break
            chunk, rest = rest[:config.chunk], rest[config.chunk:]
            await publish_leased(transport, chunk, now=t)
            slowest = max(slowest, at() - t)
            confirmed.extend(i.key for i in chunk)
            published += len(chunk)
            if rest and (marking is None or marking.done()):
                await settle()
                marking = asyncio.create_task(
                    store.intent_mark_enqueued(confirmed, now=at()))
                confirmed = []
    except BaseException:
        await finish()
        raise
    if defer is not None:
        defer(asyncio.create_task(finish()))
    else:
        await finish()
    return published


async def relay_pass(
    store: Ledger, transport: Transport, *, now: float, config: RelayConfig,
    paused_channels: Sequence[str] = (), max_pages: int = 20, clock: Clock | None = None,
) -> int:
    """Publish due ``selected`` intents, page by page (see ``publish_page``; ``clock``
    keeps a slow page's lease from lapsing); return how many were published."""
    total = 0
    at = _clock_from(now, clock)

    async def claim() -> tuple[float, float | None, list[PublishItem]]:
        leased_at, read = at(), clock.now() if clock is not None else None
        return leased_at, read, await store.intent_claim_publish(
            now=leased_at, horizon_s=config.horizon_s, lease_s=config.lease_s,
            limit=config.page)

    # The next page is leased while this one is being published (a full page says
    # there may be more), so the store's lease statement overlaps the broker too; its
    # time is counted from its own lease (``leased_on``), so a long wait behind this
    # page extends its lease before its first chunk.
    following: asyncio.Task[tuple[float, float | None, list[PublishItem]]] | None = None
    # The ends of published pages (their last marking and their lease's release): one
    # page's end runs while the next page is being published, so the broker does not
    # wait for the store between pages.
    ends: list[asyncio.Task[None]] = []
    try:
        page_now, leased_on, claimed = await claim()
        for page_number in range(1, max_pages + 1):
            if len(claimed) == config.page and page_number < max_pages:
                following = asyncio.create_task(claim())
            # A paused channel keeps its intents selected; their lease lapses and a later
            # pass takes them once the channel is resumed.
            ready = [i for i in claimed if i.channel not in paused_channels]
            if ready:
                total += await publish_page(store, transport, ready, now=page_now,
                                            config=config, clock=clock, leased_on=leased_on,
                                            defer=ends.append)
            while len(ends) > 1:
                await ends.pop(0)
            if following is None:
                break
            task, following = following, None
            page_now, leased_on, claimed = await task
    finally:
        if following is not None:
            # A page leased but not published (this pass failed): its lease lapses and a
            # later pass publishes it.
            following.cancel()
            with contextlib.suppress(BaseException):
                await following
        # Every page's end is awaited; the first that failed is raised.
        failed: BaseException | None = None
        for end in ends:
            try:
                await end
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
    return total


async def relay_loop(store: Ledger, transport: Transport, config: RelayConfig, *, clock: Clock,
                     stopping: asyncio.Event,
                     paused_channels: Callable[[], Awaitable[Sequence[str]]],
                     published: Callable[[int], None] | None = None) -> None:
    """Relay passes until ``stopping``: at once again while there is work, then waits
    that double from ``idle_s`` to ``max_idle_s``. A failed pass (the broker or the
    store down) is logged and tried again: the intents stay ``selected``, never lost."""

    async def one_loop() -> None:
        idle = config.idle_s
        while not stopping.is_set():
            count = 0
            try:
                count = await relay_pass(store, transport, now=clock.now(), config=config,
                                         paused_channels=await paused_channels(),
                                         clock=clock)
            except Exception:
                log.exception("relay pass failed")
                idle = config.max_idle_s
            if count:
                if published is not None:
                    published(count)
                idle = config.idle_s
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=idle)
            idle = min(idle * 2, config.max_idle_s)

    await asyncio.gather(*(one_loop() for _ in range(max(1, config.pages_in_flight))))
