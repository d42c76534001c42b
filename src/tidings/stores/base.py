"""The Store port, the union of small roles, and the values that cross it.

Its roles, each typed against by the consumers that use it (``Store`` is their union):

- ``Lifecycle``: url, migrations, close (``runtime``, the CLI);
- ``Ledger``: intents and their events, admit, claim, outcome, sweeps (worker, relay,
  intake, reconciler, webhook evidence);
- ``Occurrences``: occurrences and admission switches (scheduler, guardrails, rollout);
- ``Selections``: delivery holds and bulk selections (``holds``, ``bulk``);
- ``PreferenceRecords``: recipient preferences (``compose``);
- ``PacerBackend`` (``tidings.pacing``): pacer state, 429 pauses (the pacer, the API's
  rate limit);
- ``Readings``: counts and lookups for the operator surface, guardrail counts;
- ``ApiRecords``: tokens, signatures, triggers, idempotency (``api/``);
- ``WebhookRecords``: provider events (``webhooks/``);
- ``RetentionQueries``: what retention prunes and counts (``retention``).

Naming follows noun-first operations (``intent_admit``, ``intent_claim_many``). Every
method takes ``now`` from the caller; a store never reads the clock. Batch methods
run in one transaction each. Business rules stay in the core: the store applies
changes the core decided, guarded by compare-and-set on state and lease token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from tidings.model import Event, Intent, IntentDraft
from tidings.pacing.pacer import PacerBackend
from tidings.preferences import Preference
from tidings.states import State

if TYPE_CHECKING:
    from tidings.retention import Partition, PruneCounts


class ClaimKind(StrEnum):
    CLAIMED = "claimed"
    """The caller now holds the lease (``intent`` and ``token`` are set)."""
    DONE = "done"
    """The intent is terminal: the message is a duplicate; ack it. A
    ``duplicate_observed`` event has been recorded (``discarded`` for a cancelled
    or expired intent, whose message is not a duplicate but moot)."""
    HELD = "held"
    """Uncertain (the reconciler owns it) or parked (a hold's release republishes it):
    ack the message."""
    BUSY = "busy"
    """The intent is claimed under a lease, live or expired; or it is this batch's own
    second copy of a key; or another transaction is writing its row right now. An
    expired lease is not a claimer's to take over: the reconciler ends it, and the
    intent becomes uncertain (the holder may have sent), settled by its channel's
    policy. Retry after ``retry_at``: the lease's expiry (already past for an expired
    lease, so the message comes back at once until the reconciler has moved the
    intent, and then claims HELD), or shortly for a row being written."""
    NOT_DUE = "not_due"
    """Retryable but its ``next_attempt_at`` is in the future; retry after ``retry_at``."""
    MISSING = "missing"
    """No intent has this key: the message is poison."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    key: str
    kind: ClaimKind
    intent: Intent | None = None
    token: int | None = None
    retry_at: float | None = None
    state: State | None = None


@dataclass(frozen=True, kw_only=True)
class Change:
    """A guarded state change: applied only if the intent is in ``from_state``
    (and holds ``lease_token`` when given, and its lease expired by
    ``lease_expired_by`` when given: a lease renewed meanwhile is left alone).
    One audit event is appended with it.

    Field effects by target state, applied by every store alike:
    enqueued -> enqueued_at=now; accepted -> accepted_at=now, receipt;
    leaving claimed -> lease cleared; a terminal state -> finished_at=now,
    disposition=to_state, reason; retryable -> next_attempt_at (when it may be tried
    again); uncertain -> next_attempt_at (when it may be settled: None at once).
    """

    key: str
    from_state: State
    to_state: State
    event: str
    lease_token: int | None = None
    lease_expired_by: float | None = None
    reason: str | None = None
    next_attempt_at: float | None = None
    receipt: str | None = None
    provider_request_id: str | None = None
    count_attempt: bool = False
    count_failure: bool = False
    reset_failures: bool = False
    worker: str | None = None
    message_id: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class QueueAcks:
    """The acks a batch of outcomes commits with (``Ledger.intent_apply_many``): on the
    store's own queue ``queue``, ``receipts[i]`` is the receipt of the message of
    ``changes[i]``, acked in the same transaction if that change applies (None: that
    message is not acked)."""

    queue: str
    receipts: Sequence[str | None]


class PublishItem(NamedTuple):
    """An intent claimed for publishing by the outbox relay (a named tuple: a relay page
    is thousands of them, and a frozen dataclass took 2 us a row to build)."""

    key: str
    channel: str
    due_at: float
    state: State


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
    """A delivery hold (``tidings.holds``); ``scope`` is channel, campaign or occurrence;
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
    timeline, ``orphaned`` were kept without one, ``duplicates`` were seen before."""

    recorded: int = 0
    duplicates: int = 0
    orphaned: int = 0


@dataclass(frozen=True, kw_only=True)
class ProviderEventCount:
    """Provider events stored per (provider, type); ``orphaned`` of them have no intent."""

    provider: str
    type: str
    total: int
    orphaned: int


@dataclass(frozen=True, kw_only=True)
class OutcomeCount:
    """Outcome events of one type, channel and campaign in one time bucket (the
    guardrails' reading); ``bucket`` is ``floor(at / bucket_s)``."""

    channel: str
    campaign: str | None
    type: str
    bucket: int
    count: int


class Lifecycle(Protocol):
    """Open, migrate and close a store: what the composition root and the CLI do with
    it before and after everything else."""

    url: str

    async def migrate(self, *, now: float, new_only: bool = False) -> list[int]:
        """Apply pending migrations, recorded as applied at ``now``; return the versions
        applied by this call. ``new_only``: the whole schema in one transaction, and
        only into a database that has none (else nothing is applied)."""
        ...

    async def schema_version(self) -> int: ...

    async def check_schema(self) -> None:
        """Raise SchemaOutOfDate when migrations are pending."""
        ...

    async def close(self) -> None: ...


class Ledger(Protocol):
    """The delivery ledger: intents and their audit events, from admission through the
    worker's claim and outcome to the reconciler's sweeps. Every state change is a
    guarded compare-and-set the core decided (``Change``, ``claims.plan_claims``).

    ``intent_admit`` takes ``progress_after``, the one place where the scheduler's page
    order reaches the port. The order itself is the scheduler's (it says which page's
    write each page waits for); the store only offers the point to wait at, inside the
    transaction, after the page's rows are written and before the occurrence's mark
    moves. Only the store can offer that point: a scheduler that awaited the previous
    page before calling ``intent_admit`` would serialize the whole transactions, and
    PostgreSQL admission measured 12 % slower that way (``bench/run.py admission``);
    with the hook the rows of up to ``pages_in_flight`` pages are written side by side
    and only the mark moves in page order (CAS occurrence progress). SQLite, with one
    writer, simply awaits it first.
    """

    concurrent_writers: bool
    """True when writes from one process can run side by side (a pool of server
    connections), False when the store has one writer (SQLite)."""

    async def intent_admit(
        self,
        drafts: Sequence[IntentDraft],
        *,
        now: float,
        publish_lease_until: float | None = None,
        progress: OccurrenceProgress | None = None,
        enqueue: bool = False,
        progress_after: Awaitable[object] | None = None,
    ) -> list[str]:
        """Insert intents as ``selected``; existing keys are left untouched.

        With ``enqueue`` (only when the embedded SQL transport on this same store is the
        transport) the new intents' messages are put on their channel queues in the
        same transaction and the intents are born ``enqueued`` (one ``enqueued`` event
        instead of ``selected`` + ``enqueued``): no window in which an intent exists
        without its message.

        Returns the keys inserted now, in draft order. With ``publish_lease_until``
        the new intents are born claimed for publishing by the caller until then.
        ``progress`` moves the occurrence's high-water mark and counts in the same
        transaction (``admitted`` grows by the number inserted). One ``selected``
        event per inserted intent.

        ``progress_after`` (the previous page's write) is awaited before the progress
        moves, so a store that writes pages side by side still moves the mark in page
        order; if it failed, or is not done within ``PAGE_ORDER_WAIT_S``, this page's
        transaction rolls back and the error is raised.
        """
        ...

    async def intent_claim_publish(
        self, *, now: float, horizon_s: float, lease_s: float, limit: int
    ) -> list[PublishItem]:
        """Claim ``selected`` intents due by ``now + horizon_s`` whose publish lease is
        absent or expired, for ``lease_s`` seconds. Oldest due first."""
        ...

    async def intent_extend_publish(self, keys: Sequence[str], *, held_until: float,
                                    lease_until: float) -> list[str]:
        """Move the publish lease of ``keys`` from ``held_until`` (the lease the caller
        set) to ``lease_until``, for those still ``selected`` and still under that lease;
        return them. A key missing from the answer was taken by another relay after its
        lease lapsed (or left ``selected``): the caller no longer publishes it."""
        ...

    async def intent_release_publish(self, keys: Sequence[str], *, held_until: float) -> None:
        """The caller is done with ``keys`` of the page it leased until ``held_until``:
        their published chunks are marked, or it gave up. What it did not mark may be
        taken by the next pass at once, the page's other keys stay leased; a store may
        instead let the lease of them all lapse."""
        ...

    async def intent_mark_enqueued(self, keys: Sequence[str], *, now: float) -> int:
        """``selected``/``retryable`` -> ``enqueued`` with an ``enqueued`` event;
        clears the publish lease. Keys in other states are skipped. Returns the count."""
        ...

    async def intent_claim_many(
        self,
        keys: Sequence[str],
        *,
        owner: str,
        lease_s: float,
        now: float,
        message_ids: Sequence[str] | None = None,
    ) -> list[Claim]:
        """Claim each key with a lease, atomically per key; one Claim per key, in order.

        Claimable: selected, enqueued, or retryable with next_attempt_at <= now; the
        lease token grows by one and ``attempts`` by one, with a ``claimed`` event.
        A terminal key records a ``duplicate_observed`` event (DONE). A key listed
        twice is claimed once; the second copy reads BUSY.
        """
        ...

    async def intent_renew_leases(
        self, leases: Sequence[tuple[str, int]], *, owner: str, lease_s: float, now: float
    ) -> list[str]:
        """Extend live leases held by ``owner``; return the keys whose lease was lost."""
        ...

    async def intent_apply_many(self, changes: Sequence[Change], *, now: float,
                                acks: QueueAcks | None = None) -> list[str]:
        """Apply guarded changes in one transaction; return the keys applied.

        Raises InvalidTransition (before writing anything) for a change not in the
        table. A change whose guard fails is skipped and its event not written.
        With ``acks`` (only where ``acks_commit_with`` the transport), the message of
        every applied change that has a receipt there is acked in the same transaction;
        the message of a change not applied stays on the queue.
        """
        ...

    def acks_commit_with(self, transport: object) -> bool:
        """True when ``transport`` is this store's own queue, in the same database: a
        batch's outcomes and the acks of their messages can then commit in one
        transaction (``intent_apply_many(acks=...)``), with no window between them."""
        ...

    async def intent_request_cancel(self, key: str, *, now: float, reason: str) -> State | None:
        """Cancel: terminal at once unless claimed, where the worker sees the request
        before its send. Returns the state after, or None for an unknown key."""
        ...

    async def intent_get(self, key: str) -> Intent | None: ...

    async def intent_find(
        self,
        *,
        states: Sequence[State],
        channel: str | None = None,
        updated_before: float | None = None,
        lease_expired_at: float | None = None,
        limit: int = 1000,
        lease_owner: str | None = None,
    ) -> list[Intent]:
        """Intents in ``states``; ``lease_expired_at`` keeps claimed ones whose lease
        expired by then; ``updated_before`` keeps ones untouched since then;
        ``lease_owner`` keeps those whose lease (held or last held) names that worker."""
        ...

    async def event_append_many(self, events: Sequence[Event]) -> None: ...

    async def events_for(self, key: str) -> list[Event]: ...

    async def event_last(self, key: str) -> Event | None:
        """The latest event of ``key`` (None: it has none)."""
        ...


class Occurrences(Protocol):
    """Occurrences (a campaign's logical dates and their admission progress) and the
    admission switches that pause them (an operator's, or a guardrail's ``switch_trip``)."""

    async def occurrence_open(
        self, *, id: str, campaign: str, logical_at: float, logical_date: str, kind: str,
        now: float,
    ) -> Occurrence:
        """Return the occurrence, creating it (status admitting) if new. Opening an
        existing one as ``replay`` re-opens it with kind replay unless it is done."""
        ...

    async def occurrence_get(self, id: str) -> Occurrence | None: ...

    async def occurrence_finish(self, id: str, *, now: float, status: str = "done",
                                reason: str | None = None) -> None: ...

    async def occurrence_restart(self, id: str, *, reason: str) -> None:
        """Admit an occurrence again from its first member (unknown ids raise)."""
        ...

    async def occurrence_list(self, campaign: str | None = None) -> list[Occurrence]: ...

    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> Switch: ...

    async def switch_all(self) -> list[Switch]: ...

    async def switch_trip(self, *, scope: str, name: str, now: float, reason: str
                          ) -> Switch | None:
        """Pause unless already paused; the switch if this call paused it, else None."""
        ...

    async def switch_declare(self, *, scope: str, name: str, paused: bool, now: float,
                             reason: str | None = None) -> Switch | None:
        """Create a switch in this state unless it exists; the switch if created now."""
        ...


class Selections(Protocol):
    """Delivery holds and the selections that bulk actions, releases and sweeps read
    (``tidings.holds``, ``tidings.bulk``)."""

    async def hold_insert(self, *, scope: str, name: str, now: float, by: str,
                          reason: str | None = None) -> Hold | None:
        """Hold unless already held; the hold if this call made it, else None."""
        ...

    async def hold_delete(self, *, scope: str, name: str) -> Hold | None:
        """Remove a hold; the hold removed, or None if there was none."""
        ...

    async def hold_all(self) -> list[Hold]: ...

    async def intent_select(self, selection: Selection, *, after: str | None = None,
                            limit: int = 500) -> list[Intent]:
        """A page of the selection in key order, keys after ``after``."""
        ...

    async def intent_select_counts(self, selection: Selection) -> dict[str, int]:
        """``{state: count}`` over the selection."""
        ...


class PreferenceRecords(Protocol):
    """Recipient preferences (opt-out, quiet hours) per channel, read by the send-time
    gate (``tidings.compose``)."""

    async def preference_set(self, preference: Preference, *, now: float) -> None:
        """Insert or replace the preference of (recipient_id, channel), stamped ``now``."""
        ...

    async def preference_delete(self, recipient_id: str, channel: str) -> bool:
        """Forget a preference; False if there was none."""
        ...

    async def preferences_for(
        self, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Preference]:
        """The preferences of many ``(recipient_id, channel)`` pairs in one read; pairs
        without a preference are absent from the answer."""
        ...


class Readings(Protocol):
    """Counts and lookups over the ledger for the operator surface (status, metrics,
    timelines) and the guardrails' outcome counts; nothing here writes."""

    async def intent_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {state: count}}`` over every intent."""
        ...

    async def intent_latencies(self, channel: str) -> list[float]:
        """Seconds from due to acceptance for every accepted intent of ``channel``."""
        ...

    async def event_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {event type: count}}``."""
        ...

    async def outcome_counts(self, *, since: float, bucket_s: float) -> list[OutcomeCount]:
        """Outcome events (see ``tidings.guardrails``) at or after ``since``, counted per
        channel, campaign, type and bucket of ``bucket_s`` seconds."""
        ...

    async def intent_summary(self, *, now: float, since: float) -> list[IntentSummary]:
        """One summary per (campaign, channel), ordered by campaign then channel."""
        ...

    async def intent_latency_histogram(self, bounds: Sequence[float]) -> list[LatencyHistogram]:
        """Due-to-accepted latencies per channel counted into ``bounds`` (ascending)."""
        ...

    async def intent_find_by_recipient(self, recipient_id: str, *,
                                       limit: int = 100) -> list[Intent]:
        """A recipient's intents, latest due first."""
        ...

    async def event_keys_by_detail(self, detail: str, *, limit: int = 100) -> list[str]:
        """Keys with an event whose ``detail`` is exactly ``detail``, latest first."""
        ...


class ApiRecords(Protocol):
    """The operator API's own records: tokens, signed-request replay guard, trigger
    counts and publish idempotency (``tidings.api``)."""

    async def api_token_insert(self, token: ApiToken) -> None:
        """Store a new token; StoreError if its id exists."""
        ...

    async def api_token_get(self, id: str) -> ApiToken | None: ...

    async def api_token_list(self) -> list[ApiToken]: ...

    async def api_token_revoke(self, id: str, *, now: float) -> ApiToken | None:
        """Revoke a token (a second revocation keeps the first time); None if unknown."""
        ...

    async def api_signature_claim(self, signature: str, *, now: float,
                                  expires_at: float) -> bool:
        """Record a signed request's signature until ``expires_at``; False if it is
        already recorded (a replay). Expired records are pruned first."""
        ...

    async def api_trigger_record(self, campaign: str, logical_date: str, *, now: float) -> int:
        """Count one HTTP trigger of an occurrence; return its count so far."""
        ...

    async def api_trigger_counts(self) -> dict[str, int]:
        """HTTP triggers so far, per campaign."""
        ...

    async def api_idempotency_get(self, key: str) -> IdempotentResponse | None: ...

    async def api_idempotency_get_many(self, keys: Sequence[str]
                                       ) -> dict[str, IdempotentResponse]:
        """The records of ``keys`` that exist, by key."""
        ...

    async def api_idempotency_put(self, record: IdempotentResponse, *,
                                  expire_before: float | None = None) -> IdempotentResponse:
        """Keep the first answer to a key: return ``record`` if stored now, else the one
        stored before (whatever its request). Records created before ``expire_before``
        are dropped first."""
        ...

    async def api_idempotency_finish(self, key: str, request_hash: str, *, status: int,
                                     body: str) -> bool:
        """Turn this request's reservation into its answer; False if there is none."""
        ...

    async def api_publish_many(self, writes: Sequence[PublishWrite], *, now: float,
                               expire_before: float | None = None, enqueue: bool = False,
                               publish_lease_until: float | None = None
                               ) -> list[PublishWritten]:
        """Many publishes in one transaction, one answer each, in order: each key is
        reserved as ``api_idempotency_put`` would (a key twice keeps its first); the
        writes whose reservation is new get their intents admitted (``later`` as
        ``selected``, ``soon`` enqueued with ``enqueue``, else under
        ``publish_lease_until``; a key drafted twice is created for the first) and their
        answer stored (``status``, ``answer(created)``); the others get the answer kept
        before. Nothing of any of them is visible until all of it is."""
        ...

    async def api_idempotency_release(self, key: str, request_hash: str) -> bool:
        """Drop this request's reservation (it was refused, so a retry starts afresh)."""
        ...


class WebhookRecords(Protocol):
    """Provider webhook reports after acceptance: delivered / bounced / complained /
    failed, recorded once, orphaned until their intent's receipt is known
    (``tidings.webhooks``)."""

    async def provider_events_record(self, events: Sequence[ProviderEvent], *,
                                     now: float) -> RecordResult:
        """Record provider events in one transaction, once per (provider, message id,
        type): a new one whose message id is an intent's receipt gets an event
        (``ProviderEvent.timeline_type``) on that intent's timeline, beside
        ``accepted``, without changing its state; a new one with no such intent is kept
        as orphaned; one seen before (even in the same batch) is a duplicate."""
        ...

    async def provider_events_orphaned(self, *, limit: int = 100) -> list[StoredProviderEvent]:
        """Orphaned provider events, oldest received first."""
        ...

    async def provider_events_adopt(self, *, since: float, limit: int = 1000) -> int:
        """Attach orphaned events received since ``since`` whose message id has become an
        intent's receipt meanwhile (a webhook that beat the worker's commit), each with
        its timeline event, in one transaction; return how many were attached. The
        window keeps a sweep from rereading old orphans that will never match (events
        of messages another system sent through the same provider account)."""
        ...

    async def provider_event_counts(self) -> list[ProviderEventCount]:
        """Provider events per (provider, type), ordered by both."""
        ...


class RetentionQueries(Protocol):
    """The queries of retention; the rule (what may go, when) is ``tidings.retention``'s."""

    async def retention_prune_batch(self, *, intent_cutoff: float, occurrence_cutoff: float,
                                    limit: int) -> PruneCounts:
        """Delete at most ``limit`` terminal intents finished and last updated before
        ``intent_cutoff`` (oldest first), their events, and at most ``limit``
        occurrences done or skipped before ``occurrence_cutoff``, in one transaction.

        A store with partitioned events (``PartitionedEvents``) deletes here only the
        events of its default partition; those in day partitions go when their
        partition is dropped or swept."""
        ...

    async def retention_count(self, *, intent_cutoff: float, occurrence_cutoff: float
                              ) -> tuple[PruneCounts, float | None]:
        """What ``retention_prune_batch`` would delete with no limit (events counted by
        their intents), and the creation time of the oldest intent it would keep."""
        ...

    async def intent_age_span(self) -> tuple[float, float] | None:
        """The creation times of the oldest and newest intent (None: no intent)."""
        ...


class Store(Lifecycle, Ledger, Occurrences, Selections, PreferenceRecords, PacerBackend,
            Readings, ApiRecords, WebhookRecords, RetentionQueries, Protocol):
    """Durable state of tidings, the union of its roles. Adapters: ``sqlite``
    (embedded) and ``postgres``. A consumer types against the roles it uses (the worker
    a ``Ledger``, the API's auth ``ApiRecords``, the pacer a ``PacerBackend``), so what
    it may touch is what its type says."""


@runtime_checkable
class PartitionedEvents(Protocol):
    """A store whose events table is range-partitioned by time (PostgreSQL). Every
    method is safe beside another process doing the same: partition changes take
    one advisory lock and give up (None / False) rather than wait for it."""

    async def event_partitions(self) -> list[Partition]:
        """The range partitions of the events table (not the default one)."""
        ...

    async def event_partition_create(self, name: str, lower: float, upper: float) -> bool:
        """Create ``[lower, upper)``; False when it exists, the default partition holds
        rows of that range (they stay there), or another process holds the lock."""
        ...

    async def event_partitions_detached(self) -> list[str]:
        """Partitions detached by a drop that did not finish (the next prune does)."""
        ...

    async def event_partition_drop(self, name: str, *, intent_types: Sequence[str]
                                   ) -> int | None:
        """Detach and drop a partition (attached, or left detached by an earlier drop),
        first copying its events of a type not in ``intent_types`` back into the table
        (they land in the default partition); the number of events dropped, None if it
        was not (gone, or another process holds the lock)."""
        ...

    async def event_orphans_delete(self, name: str, *, before: float,
                                   intent_types: Sequence[str], limit: int) -> int:
        """Delete at most ``limit`` events of partition ``name`` before ``before`` whose
        type is in ``intent_types`` and whose intent is no longer in the ledger."""
        ...
