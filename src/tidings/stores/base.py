"""The Store port: intents, the ledger, events, occurrences, switches, pacer state.

Naming follows noun-first operations (``intent_admit``, ``intent_claim_many``). Every
method takes ``now`` from the caller; a store never reads the clock. Batch methods
run in one transaction each. Business rules stay in the core: the store applies
changes the core decided, guarded by compare-and-set on state and lease token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from tidings.model import Event, Intent, IntentDraft
from tidings.states import State

T = TypeVar("T")


class ClaimKind(StrEnum):
    CLAIMED = "claimed"
    """The caller now holds the lease (``intent`` and ``token`` are set)."""
    DONE = "done"
    """The intent is terminal: the message is a duplicate; ack it. A
    ``duplicate_observed`` event has been recorded (``discarded`` for a cancelled
    or expired intent, whose message is not a duplicate but moot)."""
    HELD = "held"
    """Uncertain: the reconciler owns it; ack the message."""
    BUSY = "busy"
    """Another worker's lease is live; retry after ``retry_at``."""
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
    disposition=to_state, reason; retryable -> next_attempt_at.
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


@dataclass(frozen=True, kw_only=True)
class PublishItem:
    """An intent claimed for publishing by the outbox relay."""

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


class Store(Protocol):
    """Durable state of tidings. Adapters: ``sqlite`` (embedded), later ``postgres``."""

    url: str

    # ---- lifecycle
    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied now."""
        ...

    async def schema_version(self) -> int: ...

    async def check_schema(self) -> None:
        """Raise SchemaOutOfDate when migrations are pending."""
        ...

    async def close(self) -> None: ...

    # ---- intents: admission and the outbox relay
    async def intent_admit(
        self,
        drafts: Sequence[IntentDraft],
        *,
        now: float,
        publish_lease_until: float | None = None,
        progress: OccurrenceProgress | None = None,
        enqueue: bool = False,
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
        """
        ...

    async def intent_claim_publish(
        self, *, now: float, horizon_s: float, lease_s: float, limit: int
    ) -> list[PublishItem]:
        """Claim ``selected`` intents due by ``now + horizon_s`` whose publish lease is
        absent or expired, for ``lease_s`` seconds. Oldest due first."""
        ...

    async def intent_mark_enqueued(self, keys: Sequence[str], *, now: float) -> int:
        """``selected``/``retryable`` -> ``enqueued`` with an ``enqueued`` event;
        clears the publish lease. Keys in other states are skipped. Returns the count."""
        ...

    # ---- intents: the worker's hot path
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

    async def intent_apply_many(self, changes: Sequence[Change], *, now: float) -> list[str]:
        """Apply guarded changes in one transaction; return the keys applied.

        Raises InvalidTransition (before writing anything) for a change not in the
        table. A change whose guard fails is skipped and its event not written.
        """
        ...

    async def intent_request_cancel(self, key: str, *, now: float, reason: str) -> State | None:
        """Cancel: terminal at once unless claimed, where the worker sees the request
        before its send. Returns the state after, or None for an unknown key."""
        ...

    # ---- intents: reads and sweeps
    async def intent_get(self, key: str) -> Intent | None: ...

    async def intent_find(
        self,
        *,
        states: Sequence[State],
        channel: str | None = None,
        updated_before: float | None = None,
        lease_expired_at: float | None = None,
        limit: int = 1000,
    ) -> list[Intent]:
        """Intents in ``states``; ``lease_expired_at`` keeps claimed ones whose lease
        expired by then; ``updated_before`` keeps ones untouched since then."""
        ...

    async def intent_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {state: count}}`` over every intent."""
        ...

    async def intent_latencies(self, channel: str) -> list[float]:
        """Seconds from due to acceptance for every accepted intent of ``channel``."""
        ...

    # ---- events
    async def event_append_many(self, events: Sequence[Event]) -> None: ...

    async def events_for(self, key: str) -> list[Event]: ...

    async def event_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {event type: count}}``."""
        ...

    # ---- occurrences
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

    async def occurrence_list(self, campaign: str | None = None) -> list[Occurrence]: ...

    # ---- admission switches
    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> Switch: ...

    async def switch_all(self) -> list[Switch]: ...

    # ---- pacer state
    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Atomically read the channel's pacer state (None if new), apply ``fn``
        (pure), write its new state, return its result. Shared by every process."""
        ...

    async def pacer_read(self, channel: str) -> dict[str, Any] | None: ...
