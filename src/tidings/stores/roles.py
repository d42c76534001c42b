"""The Store port as role protocols, grouped by who calls them; ``Store`` is their union.

Its roles, each typed against by the consumers that use it (``Store`` is their union):

- ``Lifecycle``: url, migrations, close (``runtime``, the CLI);
- ``Ledger``: intents and their events, admit, claim, outcome, sweeps (worker, relay,
  intake, reconciler, webhook evidence);
- ``Occurrences``: occurrences and admission switches (scheduler, guardrails, rollout);
- ``Selections``: delivery holds and bulk selections (``holds``, ``bulk``);
- ``PreferenceRecords``: recipient preferences (``compose``);
- ``Suppressions``: the suppression list (``compose``, admission, the operator's
  commands, the worker on a STOP);
- ``Throttles``: per-recipient throttle counts (the worker);
- ``Digests``: digest windows and their items (``admission/digests.py``);
- ``PacerBackend``: pacer state, 429 pauses (the pacer, the API's
  rate limit);
- ``Readings``: counts and lookups for the operator surface, guardrail counts;
- ``ApiRecords``: tokens, signatures, triggers, idempotency (``api/``);
- ``WebhookRecords``: provider events (``webhooks/``);
- ``RetentionQueries``: what retention prunes and counts (``retention``).

Naming follows noun-first operations (``intent_admit``, ``intent_claim_many``). Every
method takes ``now`` from the caller; a store never reads the clock. Batch methods
run in one transaction each. Business rules stay in the core: the store applies
changes the core decided, guarded by compare-and-set on state and lease token.

It is one module because a store adapter implements every role: its author reads the
whole port, and the conformance suite checks it, in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from tidings.core.claims import Change, Claim
from tidings.core.model import Event, Intent, IntentDraft
from tidings.core.preferences import Preference
from tidings.core.repeats import AdmitGuard
from tidings.core.states import State
from tidings.core.suppression import Suppression, SuppressionRules
from tidings.core.throttle import Ask

if TYPE_CHECKING:
    from tidings.core.retention import Partition, PruneCounts

from tidings.stores.records import (
    ApiToken,
    CampaignReports,
    DigestAdded,
    DigestBuild,
    DigestItem,
    DigestItemDraft,
    DigestPending,
    DigestsClosed,
    DigestWindow,
    Hold,
    IdempotentResponse,
    IntentSummary,
    LatencyHistogram,
    Occurrence,
    OccurrenceProgress,
    OutcomeCount,
    ProviderEvent,
    ProviderEventCount,
    PublishItem,
    PublishWrite,
    PublishWritten,
    QueueAcks,
    RecordResult,
    Selection,
    StoredProviderEvent,
    Switch,
)

T = TypeVar("T")


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

    async def reference_time(self) -> float:
        """The clock every process of this store keeps (``core.clock.ReferenceClock``),
        in epoch seconds: the PostgreSQL server's, or the kernel's of the host that holds
        a SQLite file. Processes on hosts whose clocks disagree agree on this one."""
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

    async def intent_admit_groups(
        self,
        groups: Sequence[tuple[Sequence[IntentDraft], bool]],
        *,
        now: float,
        guard: AdmitGuard | None = None,
    ) -> list[str]:
        """``intent_admit`` of each group of drafts (with its ``enqueue``) in one
        transaction; the keys created. With ``guard`` (``tidings.core.repeats``), the
        rows under ``guard.keys`` that this transaction did not create are read back in
        it, after the inserts, and handed to ``guard.check``: what it raises rolls the
        whole transaction back and is raised."""
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
        started: bool = False,
    ) -> list[Claim]:
        """Claim each key with a lease, atomically per key; one Claim per key, in order.

        Claimable: selected, enqueued, or retryable with next_attempt_at <= now; the
        lease token grows by one and ``attempts`` by one, with a ``claimed`` event.
        A terminal key records a ``duplicate_observed`` event (DONE). A key listed
        twice is claimed once; the second copy reads BUSY.

        ``started``: each new lease is marked started at once, as
        ``intent_mark_started`` would mark it (a worker whose sends all start as soon
        as they are claimed saves that write per burst of starts).
        """
        ...

    async def intent_renew_leases(
        self, leases: Sequence[tuple[str, int]], *, owner: str, lease_s: float, now: float
    ) -> list[str]:
        """Extend live leases held by ``owner``; return the keys whose lease was lost."""
        ...

    async def intent_mark_started(self, leases: Sequence[tuple[str, int]], *, owner: str,
                                  now: float) -> set[str]:
        """Record that the sends of these (key, lease token) claims are about to leave,
        in one write; return the keys marked. A key is marked only while it is claimed
        under that token by ``owner`` with its lease not run out at ``now``; a send
        whose key is not returned must not start.

        What it is for: a lease that ends with no send started under it (a crash, a
        stall past the lease) is released (``Change.unstarted``), not made uncertain;
        only a send that may have left goes through lookup, evidence or hold."""
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
        due_before: float | None = None,
    ) -> list[Intent]:
        """Intents in ``states``; ``lease_expired_at`` keeps claimed ones whose lease
        expired by then; ``updated_before`` keeps ones untouched since then;
        ``lease_owner`` keeps those whose lease (held or last held) names that worker;
        ``due_before`` keeps those due by then (scheduled later ones are not read)."""
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
    (``tidings.operate.holds``, ``tidings.operate.bulk``)."""

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
    gate (``tidings.delivery.compose``)."""

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


class Suppressions(Protocol):
    """The suppression list (``tidings.core.suppression``): addresses, normalised, per
    channel kind, that no send may go to."""

    async def suppression_add_many(self, entries: Sequence[Suppression], *, now: float
                                   ) -> list[Suppression]:
        """Suppress each entry's (address, kind) unless it is already: the first
        suppression stands. Returns the entries added now; each of them that names an
        intent (``key``) leaves an ``address_suppressed`` event on its timeline, at
        ``now``, in the same transaction."""
        ...

    async def suppression_remove(self, address: str, kind: str) -> Suppression | None:
        """Take (address, kind) off the list; the suppression removed, None if none."""
        ...

    async def suppressions_for(self, pairs: Sequence[tuple[str, str]]
                               ) -> dict[tuple[str, str], Suppression]:
        """The suppressions of many (address, kind) pairs in one read; pairs not
        suppressed are absent from the answer."""
        ...

    async def suppression_list(self, *, kind: str | None = None, reason: str | None = None,
                               after: tuple[str, str] | None = None,
                               limit: int = 100) -> list[Suppression]:
        """A page of the list in (address, kind) order, after the pair ``after``."""
        ...

    async def suppression_counts(self) -> dict[tuple[str, str], int]:
        """Suppressed addresses per (kind, reason)."""
        ...


class Throttles(Protocol):
    """Per-recipient throttle counts (``tidings.core.throttle``): how many sends each
    rule counted per recipient and fixed window, shared by every worker process."""

    async def throttle_reserve(self, asks: Sequence[Ask]) -> list[bool]:
        """Reserve a send for each ask, in one transaction: granted (True) when the
        ask's key holds a reservation in its rule's window already (counted once), or
        when fewer than ``limit`` sends are counted in the window (then one more is,
        and the key holds it); refused (False) otherwise. Atomic against every other
        reservation on the store: the count never passes ``limit``."""
        ...

    async def throttle_release(self, keys: Sequence[str]) -> int:
        """Hand back every reservation the keys hold (their sends surely did not
        happen), one count each, in one transaction; the number handed back."""
        ...

    async def throttle_sends(self, rule: str, recipient: str, window_start: float) -> int:
        """The sends counted for ``recipient`` in ``rule``'s window starting at
        ``window_start`` (0: none)."""
        ...

    async def throttle_purge(self, *, before: float) -> int:
        """Delete the counts and reservations of windows ended at or before ``before``;
        the number of counts deleted."""
        ...


class Digests(Protocol):
    """Digest windows and their items (``tidings.core.digest``): adding, sealing,
    finishing, cancelling an item, and what is pending."""

    async def digest_add(self, item: DigestItemDraft, *, now: float) -> DigestAdded:
        """Add ``item`` to its key's open window in one transaction: opening one (at
        ``now``, a microsecond after the key's last window at the earliest) when none
        is open, when the open one's time is up, or when the item would carry it over
        the payload budget (those are sealed first); sliding its close; sealing it at
        ``max_items``. An item added before (same digest and item key) is answered
        where it is, ``created`` False, and changes nothing. Atomic against every
        other add, seal and cancel on the store: one open window per key."""
        ...

    async def digest_due(self, *, now: float, limit: int) -> list[DigestWindow]:
        """Up to ``limit`` windows to close: sealed ones, and open ones whose
        ``closes_at`` is at or before ``now``, the earliest first."""
        ...

    async def digest_seal(self, window_id: str) -> bool:
        """Close the window to items (what joins its key next opens a new one); True
        if it is sealed now, False when it was finished already or is unknown."""
        ...

    async def digest_close(self, *, now: float, limit: int, build: DigestBuild,
                           enqueue: bool, window_id: str | None = None) -> DigestsClosed:
        """Close a page of up to ``limit`` windows ``digest_due`` would answer (or the
        window ``window_id`` alone, if it is due) in one transaction: seal them, hand
        them with their items not cancelled to ``build``, admit the drafts it makes
        (``intent_admit``: born enqueued with ``enqueue``, else selected), and mark each
        window done with its keys (``empty`` for none). Closers at once close disjoint
        pages (a window another closer's transaction holds is passed over), and a closer
        that dies leaves its page as it found it, to the next. What ``build`` raises
        rolls the transaction back and is raised."""
        ...

    async def digest_window(self, window_id: str) -> DigestWindow | None:
        """One window, or None."""
        ...

    async def digest_items(self, window_id: str) -> list[DigestItem]:
        """The window's items not cancelled, in the order they were added."""
        ...

    async def digest_finish(self, window_id: str, *, intent_keys: Sequence[str],
                            now: float) -> bool:
        """Mark a sealed window done: ``closed`` with the keys of its digest, or
        ``empty`` when ``intent_keys`` is empty. False when it was not sealed."""
        ...

    async def digest_cancel_item(self, digest_key: str, item_key: str, *,
                                 now: float) -> str | None:
        """Take an item out of its window while the window is open; answers the
        window's state when the item was found (``open``: cancelled now), else None.
        A cancelled item stays known: adding it again changes nothing."""
        ...

    async def digest_pending(self) -> DigestPending:
        """Windows not yet admitted and the items they hold."""
        ...

    async def digest_purge(self, *, before: float) -> int:
        """Delete windows finished at or before ``before`` and their items; the number
        of windows deleted."""
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
        """Outcome events (see ``tidings.operate.guardrails``) at or after ``since``, counted per
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

    async def intent_suppressed_counts(self) -> dict[tuple[str, str], int]:
        """Intents ended ``suppressed``, per (channel, the list's reason)."""
        ...

    async def intent_throttled_counts(self) -> dict[tuple[str, str], int]:
        """Intents ended ``throttled``, per (channel, the rule that stopped them)."""
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
                                     now: float, rules: SuppressionRules | None = None
                                     ) -> RecordResult:
        """Record provider events in one transaction, once per (provider, message id,
        type): a new one whose message id is an intent's receipt gets an event
        (``ProviderEvent.timeline_type``) on that intent's timeline, beside
        ``accepted``, and moves the intent as ``states.report_move`` says (accepted ->
        delivered -> bounced or complained; an intent outside the accepted family, or a
        move the table does not allow, stays as it is); a new one with no such intent
        is kept as orphaned; one seen before (even in the same batch) is a duplicate
        and changes nothing. In the same transaction, the new ones' hard bounces and
        complaints suppress their intent's address, and soft bounces count toward
        ``rules``' threshold (``tidings.core.suppression``; default rules when None)."""
        ...

    async def provider_events_orphaned(self, *, limit: int = 100) -> list[StoredProviderEvent]:
        """Orphaned provider events, oldest received first."""
        ...

    async def provider_events_adopt(self, *, since: float, limit: int = 1000,
                                    now: float | None = None,
                                    rules: SuppressionRules | None = None) -> int:
        """Attach orphaned events received since ``since`` whose message id has become an
        intent's receipt meanwhile (a webhook that beat the worker's commit), each with
        its timeline event, its move and its suppression (as ``provider_events_record``,
        at ``now``), in
        one transaction; return how many were attached. The
        window keeps a sweep from rereading old orphans that will never match (events
        of messages another system sent through the same provider account)."""
        ...

    async def provider_event_counts(self) -> list[ProviderEventCount]:
        """Provider events per (provider, type), ordered by both."""
        ...

    async def campaign_report_counts(self) -> list[CampaignReports]:
        """Hard (and unclassified) bounces and complaints reported against the intents
        the ledger holds, per (campaign, channel), ordered by both (one-off intents,
        campaign None, first); a pair without any is left out."""
        ...


class RetentionQueries(Protocol):
    """The queries of retention; the rule (what may go, when) is
    ``tidings.recovery.retention``'s."""

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


class PacerBackend(Protocol):
    """Atomic read-modify-write of a channel's pacer state, shared by processes: the
    pacer's role of the store (every ``Store`` is one), or ``MemoryPacerBackend``."""

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Atomically read the channel's pacer state (None if new), apply ``fn``
        (pure), write its new state, return its result. Shared by every process."""
        ...

    async def pacer_read(self, channel: str) -> dict[str, Any] | None: ...

    async def pacer_pause(self, channel: str, until: float) -> None:
        """Pause the channel until ``until`` (never shortening a pause) in one write
        that does not wait for ``pacer_transact``: what a 429 must reach at once."""
        ...

    async def pacer_paused_until(self, channel: str) -> float:
        """Until when ``pacer_pause`` paused the channel (0.0 if never)."""
        ...


class Store(Lifecycle, Ledger, Occurrences, Selections, PreferenceRecords, Suppressions,
            Throttles, Digests, PacerBackend, Readings, ApiRecords, WebhookRecords,
            RetentionQueries, Protocol):
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
