"""A digest item joins its window, and a window whose time is up becomes one intent per
channel (``notify(..., digest=...)``; ``tidings.core.digest`` says what a window is).

``add_item`` validates the call as ``notify`` does and writes the item
(``Digests.digest_add``); ``close_due`` is run by the scheduler's and every worker's
reconcile loop: page by page, in one store transaction a page, it seals due windows,
builds each digest from the items still in its window (``build_page``), admits them
under the windows' keys, and marks the windows done. Closers at once close disjoint
pages, so each does its share; a closer killed mid-page leaves the page as it was, to
the next. ``close_page(window_id=...)`` does the same for the one window a ``notify``
just filled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tidings.admission.intake import (
    NotifyRequest,
    Sendable,
    asked_of,
    recipient_of,
)
from tidings.config.queues import QueueDigestSettings
from tidings.core.clock import Clock
from tidings.core.digest import (
    ITEMS_BUDGET,
    Digest,
    WindowState,
    digest_data,
    digest_intent_key,
    digest_of,
    intent_key_room,
)
from tidings.core.errors import InvalidInput
from tidings.core.lanes import DEFAULT_LANES, NO_LANES, ChannelLanes, lane_number
from tidings.core.model import IntentDraft, encode_data
from tidings.stores.base import (
    DigestItem,
    DigestItemDraft,
    DigestPage,
    Digests,
    DigestWindow,
)

log = logging.getLogger("tidings.digests")

#: Windows one close pass reads at a time.
CLOSE_PAGE = 200


@dataclass(frozen=True, kw_only=True)
class Digested:
    """What ``notify(..., digest=...)`` did: the item's window (``window_id``), whether
    the item is new (False: the same item was added before and stays where it is),
    the window's items so far, when it closes, and whether it is closed to items
    already (``sealed``: at its item cap, or closing)."""

    digest_key: str
    item_key: str
    window_id: str
    created: bool
    items: int
    closes_at: float
    sealed: bool

    def intent_keys(self, channels: list[str]) -> list[str]:
        """The keys the window's digest gets on ``channels`` once it closes."""
        return [digest_intent_key(self.window_id, channel) for channel in channels]


@dataclass(frozen=True, kw_only=True)
class ClosedDigests:
    """What a close pass did: windows closed, digest intents admitted now, windows
    closed with every item cancelled (sent nothing)."""

    windows: int = 0
    admitted: int = 0
    empty: int = 0


def item_draft(request: NotifyRequest, digest: Digest | Mapping[str, Any], *,
               known_channels: Mapping[str, str], now: float,
               sendable: Sendable | None = None) -> DigestItemDraft:
    """Validate a digest item as ``notify`` validates a request (errors name the
    field), and make what the store adds. The send-time checks run on the digest as
    its template will see it: this item's data as its only item."""
    digest = digest_of(digest)
    if request.due_at is not None:
        raise InvalidInput("due_at", "a digest item is sent when its window closes; "
                                     "leave due_at out")
    if request.expires_at is not None:
        raise InvalidInput("expires_at", "a digest item is sent when its window closes; "
                                         "leave expires_at out")
    if request.data is not None and not isinstance(request.data, Mapping):
        raise InvalidInput("data", "must be a mapping of names to values (a JSON "
                                   f"object), not {type(request.data).__name__}")
    item = dict(request.data or {})
    shaped = NotifyRequest(key=request.key, recipient=request.recipient,
                           channels=request.channels, template=request.template,
                           data=digest_data(digest_key=digest.key, items=[item], base={}))
    asked = asked_of(shaped, known_channels=known_channels, now=now, sendable=sendable)
    for draft in asked.drafts:
        room = intent_key_room(draft.channel)
        if len(digest.key) > room:
            raise InvalidInput("digest.key", f"is {len(digest.key)} characters; with its "
                                             f"window and ':{draft.channel}' the limit is "
                                             f"{room}")
    who = recipient_of(request.recipient)
    data = encode_data(item)
    if len(data.encode()) > ITEMS_BUDGET:
        raise InvalidInput("data", f"is {len(data.encode())} bytes; a digest item may "
                                   f"carry at most {ITEMS_BUDGET}")
    sent_as = {"recipient_id": who.id, "template": request.template,
               "addresses": {d.channel: d.address for d in asked.drafts},
               "channels": [d.channel for d in asked.drafts], "base": dict(who.data)}
    return DigestItemDraft(digest_key=digest.key, item_key=request.key, data=data,
                           request=json.dumps(sent_as, sort_keys=True),
                           window_s=digest.window_s, wait_s=digest.wait_s,
                           sliding=digest.sliding, max_items=digest.max_items)


def queue_digest(spec: QueueDigestSettings, *, queue: str, customer_id: str,
                 channel: str) -> Digest:
    """The digest a publish to a digest queue (``[api.queues.<name>.digest]``) joins."""
    key = spec.key.format(queue=queue, customer_id=customer_id, channel=channel)
    return Digest(key=key, window_s=spec.window_s, max_items=spec.max_items,
                  sliding=spec.sliding, max_wait_s=spec.max_wait_s)


def shaped_draft(draft: IntentDraft, digest_key: str) -> IntentDraft:
    """``draft`` with the data a digest of it alone gives its template, for the
    send-time checks of a draft that will be a digest's item."""
    return replace(draft, data=encode_data(digest_data(
        digest_key=digest_key, items=[json.loads(draft.data)], base={})))


def draft_item(draft: IntentDraft, digest: Digest, *, item_key: str) -> DigestItemDraft:
    """A validated draft of one channel as the item ``item_key`` of ``digest`` (the
    publish route: the request's Idempotency-Key and the channel); the draft's data is
    the item's."""
    sent_as = {"recipient_id": draft.recipient_id, "template": draft.template,
               "addresses": {draft.channel: draft.address}, "channels": [draft.channel],
               "base": {}}
    if len(draft.data.encode()) > ITEMS_BUDGET:
        raise InvalidInput("data", f"is {len(draft.data.encode())} bytes; a digest item may "
                                   f"carry at most {ITEMS_BUDGET}")
    return DigestItemDraft(digest_key=digest.key, item_key=item_key, data=draft.data,
                           request=json.dumps(sent_as, sort_keys=True),
                           window_s=digest.window_s, wait_s=digest.wait_s,
                           sliding=digest.sliding, max_items=digest.max_items)


async def add_item(store: Digests, draft: DigestItemDraft, *, now: float) -> Digested:
    """Add a validated item (``item_draft``) to its window."""
    added = await store.digest_add(draft, now=now)
    return Digested(digest_key=draft.digest_key, item_key=draft.item_key,
                    window_id=added.window_id, created=added.created, items=added.items,
                    closes_at=added.closes_at, sealed=added.state != WindowState.OPEN)


def build_page(windows: Sequence[DigestWindow], items: Mapping[str, Sequence[DigestItem]], *,
               known_channels: Mapping[str, str], now: float,
               lanes: ChannelLanes = NO_LANES) -> DigestPage:
    """The digests of a page of sealed windows: one intent per channel still configured,
    under the window's keys, whose data is the items in order. A window whose items
    were all cancelled, or whose channels are all gone, is finished ``empty``."""
    drafts: list[IntentDraft] = []
    finished: dict[str, list[str]] = {}
    for window in windows:
        kept = items.get(window.window_id, [])
        sent_as = json.loads(window.request)
        channels = [ch for ch in sent_as["channels"] if ch in known_channels]
        if not kept or not channels:
            if kept:
                log.warning("digest not sent: none of its channels is configured any more",
                            extra={"window": window.window_id, "channels": sent_as["channels"]})
            finished[window.window_id] = []
            continue
        data = encode_data(digest_data(digest_key=window.digest_key,
                                       items=[json.loads(item.data) for item in kept],
                                       base=sent_as["base"]))
        made = [IntentDraft(key=digest_intent_key(window.window_id, channel),
                            channel=channel, recipient_id=sent_as["recipient_id"],
                            address=sent_as["addresses"][channel],
                            template=sent_as["template"], data=data, due_at=now,
                            lane=lane_number(lanes.get(channel, DEFAULT_LANES), None,
                                             bulk=True))
                for channel in channels]
        drafts += made
        finished[window.window_id] = [d.key for d in made]
    return DigestPage(drafts=drafts, finished=finished)


async def close_page(store: Digests, *, known_channels: Mapping[str, str], now: float,
                     enqueue_in_store: bool, limit: int = CLOSE_PAGE,
                     window_id: str | None = None, lanes: ChannelLanes = NO_LANES
                     ) -> ClosedDigests:
    """Close one page of due windows (or the window ``window_id`` alone) in one store
    transaction (``Digests.digest_close``): its digests admitted on the store's own
    queue with ``enqueue_in_store``, else written for the outbox relay to publish."""
    pages: list[DigestPage] = []

    def build(windows: Sequence[DigestWindow], items: dict[str, list[DigestItem]]
              ) -> DigestPage:
        pages.append(build_page(windows, items, known_channels=known_channels, now=now,
                                lanes=lanes))
        return pages[-1]

    closed = await store.digest_close(now=now, limit=limit, build=build,
                                      enqueue=enqueue_in_store, window_id=window_id)
    # The build of the transaction that committed (a retried one builds again).
    finished = pages[-1].finished if pages else {}
    return ClosedDigests(windows=len(closed.windows), admitted=len(closed.created),
                         empty=sum(1 for wid in closed.windows if not finished.get(wid)))


async def close_due(store: Digests, *, known_channels: Mapping[str, str], clock: Clock,
                    enqueue_in_store: bool = False, max_windows: int = 10 * CLOSE_PAGE,
                    lanes: ChannelLanes = NO_LANES) -> ClosedDigests:
    """Close due windows a page at a time (at most ``max_windows`` in one call): a page
    another closer holds is its, so closers running at once share the due windows."""
    windows = admitted = empty = 0
    while windows < max_windows:
        closed = await close_page(store, known_channels=known_channels, now=clock.now(),
                                  enqueue_in_store=enqueue_in_store,
                                  limit=min(CLOSE_PAGE, max_windows - windows), lanes=lanes)
        if not closed.windows:
            break
        windows += closed.windows
        admitted += closed.admitted
        empty += closed.empty
    if windows:
        log.info("digests closed", extra={"windows": windows, "admitted": admitted,
                                          "empty": empty})
    return ClosedDigests(windows=windows, admitted=admitted, empty=empty)
