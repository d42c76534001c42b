"""The values that cross the Store port: what its roles take and answer (the claim
types are the core's, ``tidings.core.claims``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from tidings.core.model import IntentDraft
from tidings.core.states import State

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class QueueAcks:
    """The acks a batch of outcomes commits with (``Ledger.intent_apply_many``): on the
    store's own queue ``queue``, ``receipts[i]`` is the receipt of the message of
    ``changes[i]``, acked in the same transaction if that change applies (None: that
    message is not acked)."""

    queue: str
    receipts: Sequence[str | None]


@dataclass(frozen=True, kw_only=True)
class JoinTarget:
    """The database a store writes to, as a join of a caller's transaction checks the
    caller's connection against it: the server (its system identifier) and database,
    and where the store's tables are found (the schemas of its search_path, and that
    path written out)."""

    database: str
    system_id: str
    schemas: tuple[str, ...]
    search_path: str


class PublishItem(NamedTuple):
    """An intent claimed for publishing by the outbox relay (a named tuple: a relay page
    is thousands of them, and a frozen dataclass took 2 us a row to build)."""

    key: str
    channel: str
    due_at: float
    state: State
    lane: int = 0
    """The intent's lane: the relay publishes its message there."""
    group: str = ""
    """The intent's group in its lane (``tidings.core.fair``), published with it."""


@dataclass(frozen=True, kw_only=True)
class OccurrenceProgress:
    """Advances an occurrence in the same transaction as the intents of a page.

    ``after`` is the high-water mark the page started from: the mark and the page's
    counts move only if it is still current (another scheduler may have admitted the
    same page first); ``admitted`` always grows by the intents really inserted.
    """

    occurrence: str
    high_water: str
    after: str | None = None
    members: int
    skipped: int = 0
    suppressed: int = 0
    """Members of the page not admitted on a channel because their address is on the
    suppression list (counted apart from ``skipped``)."""


@dataclass(frozen=True, kw_only=True)
class Occurrence:
    """One logical date of a campaign. ``status``: admitting | done | skipped."""

    id: str
    campaign: str
    logical_at: float
    logical_date: str
    kind: str
    status: str
    high_water: str | None
    members: int
    admitted: int
    skipped: int
    passes: int
    created_at: float
    finished_at: float | None
    reason: str | None
    suppressed: int = 0
    """Recipients not admitted on a channel because their address is suppressed."""


@dataclass(frozen=True, kw_only=True)
class Switch:
    """An admission switch; ``scope`` is ``campaign`` or ``channel``."""

    scope: str
    name: str
    paused: bool
    changed_at: float
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class Hold:
    """A delivery hold (``tidings.operate.holds``); ``scope`` is channel, campaign or occurrence;
    ``held_by`` says who held it (an API token, an OS user)."""

    scope: str
    name: str
    held_at: float
    held_by: str
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which intents a bulk action, a release or a sweep reads; a None filter is off.
    ``due_before`` keeps intents due before then (their age), ``expires_by`` those whose
    freshness deadline is at or before then, ``updated_after`` those changed at or after
    then; the ``not_*`` lists leave out intents of those channels, campaigns and
    occurrences."""

    states: tuple[State, ...]
    campaign: str | None = None
    occurrence: str | None = None
    channel: str | None = None
    due_before: float | None = None
    expires_by: float | None = None
    updated_after: float | None = None
    not_channels: tuple[str, ...] = ()
    not_campaigns: tuple[str, ...] = ()
    not_occurrences: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ApiToken:
    """An API token as stored: its id, scopes and the sha256 of its secret (never the
    secret). Revoked once ``revoked_at`` is set; refused from ``expires_at`` on, if set."""

    id: str
    name: str
    scopes: tuple[str, ...]
    secret_hash: str
    created_at: float
    revoked_at: float | None = None
    expires_at: float | None = None


@dataclass(frozen=True, kw_only=True)
class IdempotentResponse:
    """The first answer to an idempotency key, and the hash of the request it answered.
    ``status`` 0 is a reservation: that request is being processed."""

    key: str
    request_hash: str
    status: int
    body: str
    created_at: float


@dataclass(frozen=True, kw_only=True)
class PublishWrite:
    """One publish request's writes, made in one transaction with other requests'
    (``Store.api_publish_many``): its idempotency reservation, its intents and its
    answer."""

    key: str
    """The request's Idempotency-Key."""
    request_hash: str
    later: Sequence[IntentDraft]
    """Intents due beyond the relay's horizon: written ``selected``."""
    soon: Sequence[IntentDraft]
    """Intents due within it: born enqueued on the store's own queue, else written
    under a publish lease for the caller to publish once committed."""
    answer: Callable[[Sequence[str]], str]
    """The answer's body, given the keys of this request created now (the core formats
    it; the store only keeps it)."""
    status: int = 202
    created_at: float


@dataclass(frozen=True, kw_only=True)
class PublishWritten:
    """What ``api_publish_many`` did for one request: its reservation was new and its
    intents written (``created``: the keys created now, ``body`` its answer), or the key
    had an answer already (``stored``, whatever its request)."""

    created: list[str] | None = None
    body: str | None = None
    stored: IdempotentResponse | None = None


def publish_owners(writes: Sequence[PublishWrite],
                   inserted: Sequence[tuple[str, str]]) -> list[bool]:
    """Which writes own the reservations a group insert made (``(key, request_hash)``
    rows): for each inserted row the first write with that key and hash."""
    left = {(key, digest) for key, digest in inserted}
    owners = []
    for write in writes:
        pair = (write.key, write.request_hash)
        owners.append(pair in left)
        left.discard(pair)
    return owners


def publish_created(writes: Sequence[PublishWrite], owners: Sequence[bool],
                    created: set[str]) -> list[list[str] | None]:
    """Each owning write's keys among ``created`` (a key drafted by two writes counts for
    the first); None for the writes that own nothing."""
    claimed: set[str] = set()
    result: list[list[str] | None] = []
    for write, owner in zip(writes, owners, strict=True):
        if not owner:
            result.append(None)
            continue
        mine = []
        for draft in (*write.later, *write.soon):
            if draft.key in created and draft.key not in claimed:
                claimed.add(draft.key)
                mine.append(draft.key)
        result.append(mine)
    return result


@dataclass(frozen=True, kw_only=True)
class IntentSummary:
    """Counts over the intents of one (campaign, channel); ``campaign`` is None for
    one-off intents. ``backlog``: live and due; ``scheduled``: live, due later;
    ``overdue``: live past its expiry; ``accepted_recent``: accepted since the window
    start the caller gave."""

    campaign: str | None
    channel: str
    total: int
    backlog: int
    scheduled: int
    claimed: int
    retryable: int
    uncertain: int
    accepted: int
    accepted_in_time: int
    accepted_recent: int
    expired: int
    dead: int
    rejected: int
    cancelled: int
    overdue: int
    oldest_due_at: float | None
    earliest_expiry: float | None
    suppressed: int = 0
    """Ended unsent because their address is on the suppression list: neither a
    failure nor eligible for the SLI."""
    throttled: int = 0
    """Ended unsent by a per-recipient throttle (``tidings.core.throttle``): neither a
    failure nor eligible for the SLI."""


@dataclass(frozen=True, kw_only=True)
class LatencyHistogram:
    """Seconds from due to acceptance on one channel: ``counts[i]`` per bucket
    ``<= bounds[i]`` (not cumulative), the last one beyond every bound."""

    channel: str
    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float
    count: int


class ProviderEventType(StrEnum):
    """What a provider reported after accepting a message (its webhooks)."""

    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class ProviderEvent:
    """One provider report, normalized. ``message_id`` is the provider's id of the
    message, the receipt its intent stored when accepted; ``at`` is when the provider
    says it happened (when it was received, if the provider gives no time)."""

    provider: str
    message_id: str
    type: ProviderEventType
    at: float
    detail: str | None = None
    bounce: str | None = None
    """How the provider classed a bounce: ``hard``, ``soft`` or ``other``
    (``tidings.core.suppression.Bounce``); None for other reports, or a bounce it did
    not class (taken as hard)."""

    @property
    def timeline_type(self) -> str:
        """The event type on the intent's timeline: ``provider_delivered``, …"""
        return f"provider_{self.type.value}"

    @property
    def timeline_detail(self) -> str:
        """The timeline event's detail: the provider, then what it said."""
        return f"{self.provider}: {self.detail}" if self.detail else self.provider


@dataclass(frozen=True, kw_only=True)
class StoredProviderEvent:
    """A provider event as stored; ``key`` is None while it is orphaned (no intent has
    its message id as receipt)."""

    provider: str
    message_id: str
    type: ProviderEventType
    at: float
    detail: str | None
    key: str | None
    received_at: float


@dataclass(frozen=True, kw_only=True)
class RecordResult:
    """What recording a batch of provider events did: ``recorded`` joined an intent's
    timeline, ``orphaned`` were kept without one, ``duplicates`` were seen before;
    ``moved`` of the recorded moved their intent's state on (accepted -> delivered ->
    bounced or complained)."""

    recorded: int = 0
    duplicates: int = 0
    orphaned: int = 0
    moved: int = 0
    suppressed: int = 0
    """Addresses the recorded reports suppressed (``tidings.core.suppression``)."""


@dataclass(frozen=True, kw_only=True)
class ProviderEventCount:
    """Provider events stored per (provider, type); ``orphaned`` of them have no intent."""

    provider: str
    type: str
    total: int
    orphaned: int


@dataclass(frozen=True, kw_only=True)
class CampaignReports:
    """The providers' reports against the intents of one (campaign, channel) the ledger
    holds: hard (and unclassified) bounces and complaints; ``campaign`` is None for
    one-off intents."""

    campaign: str | None
    channel: str
    bounced: int
    complained: int


@dataclass(frozen=True, kw_only=True)
class OutcomeCount:
    """Outcome events of one type, channel and campaign in one time bucket (the
    guardrails' reading); ``bucket`` is ``floor(at / bucket_s)``. The providers'
    reports count in too, by when they were received: ``bounced`` (hard or
    unclassified bounces) and ``complained``."""

    channel: str
    campaign: str | None
    type: str
    bucket: int
    count: int


@dataclass(frozen=True, kw_only=True)
class DigestItemDraft:
    """One item for a digest window (``Digests.digest_add``): the digest's key and
    window rules, the item's key and data (JSON), and what the digest will be sent as
    (``request``, JSON: recipient, addresses, template, channels), as of this item."""

    digest_key: str
    item_key: str
    data: str
    request: str
    window_s: float
    wait_s: float
    sliding: bool
    max_items: int


@dataclass(frozen=True, kw_only=True)
class DigestAdded:
    """What an add did: the item's window, whether the item is new (False: the same
    item was added before, and stays where it is), the window's state and item count,
    and when it closes."""

    window_id: str
    created: bool
    state: str
    items: int
    closes_at: float


@dataclass(frozen=True, kw_only=True)
class DigestWindow:
    """A window as the closer reads it."""

    window_id: str
    digest_key: str
    state: str
    opened_at: float
    closes_at: float
    items: int
    request: str


@dataclass(frozen=True, kw_only=True)
class DigestItem:
    """One item of a window, as its digest is built from it (in ``seq`` order)."""

    item_key: str
    seq: int
    added_at: float
    data: str


@dataclass(frozen=True, kw_only=True)
class DigestPage:
    """What a page of windows becomes (``Digests.digest_close``): the digests' intents,
    and each window's intent keys (none: it ends ``empty``)."""

    drafts: list[IntentDraft]
    finished: dict[str, list[str]]


#: Makes a page's digests from its windows and their items not cancelled (by window, in
#: order); the business rules' side of ``Digests.digest_close``, pure.
DigestBuild = Callable[[Sequence[DigestWindow], dict[str, list[DigestItem]]], DigestPage]


@dataclass(frozen=True, kw_only=True)
class DigestsClosed:
    """What ``Digests.digest_close`` did: the windows it finished, the intents it
    created (a key there already is left as it is)."""

    windows: list[str]
    created: list[str]


@dataclass(frozen=True, kw_only=True)
class DigestPending:
    """Windows not yet admitted, the items they hold, and when the oldest opened."""

    windows: int
    items: int
    oldest_opened_at: float | None
