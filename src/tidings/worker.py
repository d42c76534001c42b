"""The channel worker: receive -> claim -> check -> pace -> send -> record -> ack.

One worker serves one channel. Messages stream through: new batches are received
while earlier sends are in flight, and outcomes are committed in batches as they
arrive, so one slow request never holds up the rest. Every outcome and its audit
event are committed before the message is acked (on the store's own queue, in the same
transaction as the ack), so a crash at any point leads to a redelivery that the ledger
turns into a duplicate acked with no provider call, or,
until the reconciler has ended the crashed worker's lease, a busy claim retried later
(an expired lease too is busy: no claimer takes it over). The reconciler makes the
intent uncertain and its channel's policy settles it: a lookup by key (retryable only
when the provider does not find the send), held for evidence and an operator where
there is no lookup, or resent under the same key only where the policy is ``resend``;
so a send that happened is never repeated blindly.

No exception strands a delivery: whatever the composer, the pacer, the last checks,
the provider or the mapping of its answer raises becomes the intent's outcome
(``states.decide_raised``): before the request could have left, a transient failure;
once it may have left, uncertain, for the reconciler to settle. The worker goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from tidings.clock import Clock
from tidings.compose import Composed, Composer, Deferred, Ready
from tidings.errors import (
    MessageDecodeError,
    ProviderCancelled,
    SendDeadlineExceeded,
    StoreError,
)
from tidings.holds import HoldGate
from tidings.liveness import Fence
from tidings.model import Event, Intent, Message, Received, SendRequest, evolve
from tidings.outcomes import Outcome, RateLimited
from tidings.pacing.pacer import Pacer
from tidings.policy import RetryPolicy
from tidings.providers.base import Provider
from tidings.raised import describe_raised
from tidings.states import Decision, State, before_send, decide, decide_raised
from tidings.stores.base import Change, Claim, ClaimKind, Ledger, QueueAcks
from tidings.surrogate import surrogate
from tidings.transports.base import Transport

log = logging.getLogger("tidings.worker")

#: Seconds before its pacer slot's start that a send is handed its slot: the last checks
#: (a store read after a long wait) run before the start, so they delay no start; the
#: pacer gives up a start they outlast (``Pacer.start``) rather than make it late.
CHECKS_LEAD_S = 0.02


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker takes work from its queue.

    ``max_held`` bounds the messages a worker holds at once (claimed, waiting for
    the pacer, in flight, or waiting for their commit).

    On a paced channel a worker also claims no further ahead than it can send: the
    claims it holds cover at most what its share of the pacer starts in
    ``claim_ahead_s`` (never more than the lease), so a crash expires only what was
    about to be sent. Its share is the pacer's rate over the channel's live workers
    (``Pacer.share_per_s``: those heard from by the shared pacer state within a lease;
    one that died a moment ago still counts, which errs on the small side), looked at
    again every ``claim_depth_every_s``. Beyond that depth it receives no more. An
    unpaced channel is bounded by ``max_held`` alone.

    ``max_receives`` is the poison limit: how many receives may fail on the message
    itself (``Received.failures``) before it is dead-lettered. Redeliveries after a
    receiver died, its visibility ran out or it released the message are the weather,
    not the message: they grow ``receive_count`` and never dead-letter on their own.
    """

    batch_size: int = 200
    max_held: int = 400
    commit_batch: int = 100
    commit_linger_s: float = 0.01
    visibility_s: float = 60.0
    lease_s: float = 30.0
    max_receives: int = 50
    recheck_after_s: float = 1.0
    idle_poll_s: float = 0.05
    max_idle_poll_s: float = 0.5
    max_idle_wait_s: float = 5.0
    """The longest idle wait on a transport that wakes consumers when a publish commits."""
    claim_ahead_s: float = 1.0
    """Seconds of this worker's pacer share its claims cover: enough to keep the pacer
    fed while the next batch is received and claimed, little enough that a crash
    expires only what was about to go."""
    claim_depth_every_s: float = 1.0
    send_deadline_s: float = 15.0
    """The longest one provider call may take, waiting for a connection included; a
    call still running then is cut off (uncertain). Together with the fence it bounds
    when a gone worker's last send can still reach the provider, which the reconciler
    waits out before it looks that send up (``liveness.sends_land_by``). Loop seconds,
    not the injected clock's: it bounds a socket."""


def request_for(intent: Intent) -> SendRequest:
    """The send of an intent on a channel with no composer: identifiers only."""
    return SendRequest(key=intent.key, channel=intent.channel, to=intent.address,
                       template=intent.template, data=intent.data,
                       recipient_id=intent.recipient_id)


@dataclass(kw_only=True)
class WorkerStats:
    """What one worker process did (its own view; the provider's counts are the witness)."""

    received: int = 0
    sent: int = 0
    accepted: int = 0
    rate_limited: int = 0
    transient: int = 0
    rejected: int = 0
    dead: int = 0
    uncertain: int = 0
    duplicates: int = 0
    skipped: int = 0
    poison: int = 0
    lease_lost: int = 0
    released: int = 0
    raised: int = 0
    """Sends that raised instead of answering (also counted by their outcome)."""
    commits: int = 0
    unrecorded: int = 0
    """Outcomes the store refused even alone and plain: left to the reconciler."""
    by_kind: dict[str, int] = field(default_factory=dict)


#: Commits of a batch that fail in a row before its outcomes are committed one by one,
#: so that one outcome the store refuses holds back no other (see ``_record_apart``).
COMMIT_APART_AFTER = 3
#: The reason an outcome is recorded with when the store refused it as it was.
PLAIN_REASON = "outcome recorded without its text: the store refused it as it was"

_COUNTER = {State.ACCEPTED: "accepted", State.RETRYABLE: "transient", State.REJECTED: "rejected",
            State.DEAD: "dead", State.UNCERTAIN: "uncertain"}
# How loudly a settled intent is logged (event "send"); every other outcome (accepted,
# a transient failure with budget left, cancelled, expired, deferred) at debug.
_LOUD = {"rate_limited": logging.INFO, "rejected": logging.INFO, "uncertain": logging.INFO,
         "released": logging.INFO, "dead": logging.WARNING}


class Worker:
    """Delivers one channel's messages; several may run per channel, in any process."""

    def __init__(
        self,
        *,
        channel: str,
        store: Ledger,
        transport: Transport,
        provider: Provider,
        pacer: Pacer,
        clock: Clock,
        policy: RetryPolicy,
        worker_id: str,
        config: WorkerConfig | None = None,
        rng: random.Random | None = None,
        composer: Composer | None = None,
        holds: HoldGate | None = None,
    ) -> None:
        self.channel = channel
        self.store = store
        self.transport = transport
        self.provider = provider
        self.pacer = pacer
        self.clock = clock
        self.policy = policy
        self.worker_id = worker_id
        self.config = config or WorkerConfig()
        self.rng = rng or random.Random()
        # The send-time gate: preferences, address checks, rendering. Without one, the
        # provider gets the identifiers alone (the sandbox renders nothing).
        self.composer = composer
        # Delivery holds: what a hold covers is parked right after its claim, unsent.
        self.holds = holds
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        # One future for every in-flight send to race its pacer wait against, instead of
        # a new waiter task per send on the hot path.
        self._stopped: asyncio.Future[None] | None = None
        # Outcomes waiting for their commit, and message operations waiting for theirs.
        self._outcomes: list[tuple[Change, Received]] = []
        self._acks: list[str] = []
        self._nacks: list[tuple[str, float]] = []
        self._dead: list[tuple[str, str]] = []
        # Nacks that count a failure on the message itself (see ``_fault_of_message``),
        # and the receipts whose outcome, once committed, is such a nack.
        self._failed: list[tuple[str, float]] = []
        self._faulted: set[str] = set()
        # Leases held: key -> (token, message, lease expiry as last renewed).
        # key -> (lease token, its message, lease good until, the liveness registration
        # it was claimed under).
        self._held: dict[str, tuple[int, Received, float, int]] = {}
        self._sends: set[asyncio.Task[None]] = set()
        # Sends waiting for a pacer slot, and those of them ``stop()`` cancelled.
        self._acquiring: set[asyncio.Task[object]] = set()
        self._stop_cancelled: set[asyncio.Task[object]] = set()
        # One commit of outcomes at a time; one round of message operations at a time,
        # running beside the next commit.
        self._flush_lock = asyncio.Lock()
        self._ack_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        # Claims this worker may hold on a paced channel (None: unpaced, or not yet
        # known), and when that was last worked out.
        self._claim_depth: int | None = None
        self._depth_at = float("-inf")
        # The process's liveness fence (``tidings.liveness.Marker``): no send starts
        # while it is closed, so a peer that declares this worker gone finds it stopped;
        # nor under a claim made before the worker registered again (``Fence.epoch``):
        # such a lease was ended when the worker was declared gone.
        self.liveness: Fence | None = None
        # Lost leases are told once per run of them (none lost for a lease_s ends a run),
        # not once per intent: a worker back from a partition loses all it held.
        self._lease_lost_at: float | None = None

    def stop(self) -> None:
        """Stop taking messages; work in hand is finished or released."""
        self._stopping.set()
        self._room.set()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
        for task in self._acquiring - self._stop_cancelled:
            # Waiting for a pacer slot: released unsent (see ``_acquire``).
            self._stop_cancelled.add(task)
            task.cancel()

    @property
    def held(self) -> int:
        return len(self._held)

    async def run(self) -> None:
        """Serve the channel until ``stop()``, then finish or release what is held."""
        committer = asyncio.create_task(self._commit_loop())
        renewer = asyncio.create_task(self._renew_loop())
        await self._pacer_call("announce this worker", self.pacer.announce)
        idle = self.config.idle_poll_s
        try:
            while not self._stopping.is_set():
                await self._refresh_claim_depth()
                room = self._room_for_claims()
                limit = self.config.max_held if self._claim_depth is None else self._claim_depth
                if room < max(1, min(self.config.batch_size, limit) // 2):
                    self._room.clear()
                    await self._room.wait()
                    continue
                batch = await self.transport.receive(
                    self.channel, max_messages=min(room, self.config.batch_size),
                    visibility_s=self.config.visibility_s, now=self.clock.now())
                if batch:
                    idle = self.config.idle_poll_s
                    await self._take(batch)
                    continue
                await self.pacer.flush()
                await self._idle(idle)
                idle = min(idle * 2, self.config.max_idle_wait_s if self.transport.notifies
                           else self.config.max_idle_poll_s)
            if self._sends:
                await asyncio.gather(*self._sends, return_exceptions=True)
        finally:
            committer.cancel()
            renewer.cancel()
            for task in (committer, renewer):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.flush()
            await self.pacer.flush()

    @property
    def claim_depth(self) -> int | None:
        """The claims this worker holds at most on a paced channel (None: unpaced)."""
        return self._claim_depth

    def _room_for_claims(self) -> int:
        """How many more messages to receive (and claim) now."""
        room = self.config.max_held - len(self._held) - len(self._sends)
        if self._claim_depth is None:
            return room
        return min(room, self._claim_depth - len(self._held))

    async def _refresh_claim_depth(self) -> None:
        """Work out again, now and then, how many claims this worker's pacer share
        sends within ``claim_ahead_s`` (see ``WorkerConfig``)."""
        now = self.clock.now()
        if now - self._depth_at < self.config.claim_depth_every_s:
            return
        self._depth_at = now
        try:
            share = await self.pacer.share_per_s(heard_within_s=self.config.lease_s)
        except Exception:
            # The last depth stands (at first, max_held alone): the pacer state is read
            # again at the next look.
            log.warning("pacer state unreadable; claim depth unchanged", exc_info=True,
                        extra={"channel": self.channel, "worker": self.worker_id})
            return
        if share is None:
            self._claim_depth = None
            return
        ahead = min(self.config.claim_ahead_s, self.config.lease_s)
        target = max(1, min(self.config.max_held, math.ceil(share * ahead)))
        if self._claim_depth is None:
            # Just started: peers that started with it may not be in the pacer state
            # yet, so the first look can see this worker alone and overrate its share.
            # Start at a quarter of it and at most double per look (falling at once).
            self._claim_depth = max(1, math.ceil(target / 4))
        else:
            self._claim_depth = min(target, 2 * self._claim_depth)

    async def _idle(self, timeout_s: float) -> None:
        """Wait for the queue (see ``Transport.wait``), or for ``stop()``."""
        waiting = asyncio.ensure_future(self.transport.wait(
            self.channel, timeout_s=timeout_s, now=self.clock.now()))
        done, _ = await asyncio.wait({waiting, self._stop_future()},
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        else:
            waiting.result()  # a transport error surfaces here, as from receive

    def _stop_future(self) -> asyncio.Future[None]:
        """One future, done at ``stop()``, that every wait races against."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
            if self._stopping.is_set():
                self._stopped.set_result(None)
        return self._stopped

    async def run_once(self) -> int:
        """Receive one batch and handle it completely; return how many messages it held."""
        batch = await self.transport.receive(
            self.channel, max_messages=self.config.batch_size,
            visibility_s=self.config.visibility_s, now=self.clock.now())
        if batch:
            await self.handle(batch)
        return len(batch)

    async def handle(self, batch: Sequence[Received]) -> None:
        """Take a batch, wait for its sends, commit and ack (tests cut into this)."""
        await self._take(batch)
        while self._sends:
            await asyncio.gather(*list(self._sends), return_exceptions=True)
        await self.flush()
        await self.pacer.flush()  # hand finished slots back for other processes now

    # ------------------------------------------------------------------ intake

    async def _take(self, batch: Sequence[Received]) -> None:
        """Decode and claim a batch, settle what needs no send, start the sends."""
        self.stats.received += len(batch)
        now = self.clock.now()
        keys: list[str] = []
        decoded: list[Received] = []
        for item in batch:
            try:
                keys.append(Message.decode(item.body).key)
                decoded.append(item)
            except MessageDecodeError as exc:  # whatever the body, this is all decode raises
                self.stats.poison += 1
                self._dead_letter(item, f"undecodable message: {exc}", "undecodable message")
        # Taken before the claim: a claim answered after the worker registered again
        # (it hung through a partition) was made under the ended registration.
        epoch = self.liveness.epoch if self.liveness is not None else 0
        claims = await self.store.intent_claim_many(
            keys, owner=self.worker_id, lease_s=self.config.lease_s, now=now,
            message_ids=[r.message_id for r in decoded]) if keys else []
        if self.holds is not None and claims:
            decoded, claims, parked = await self.holds.park(decoded, claims,
                                                            worker=self.worker_id, now=now)
            self._acks.extend(parked)
        ready: list[tuple[Received, Intent, int]] = []
        for received, claim in zip(decoded, claims, strict=True):
            self.stats.by_kind[claim.kind] = self.stats.by_kind.get(claim.kind, 0) + 1
            sendable = self._route(received, claim, now, epoch)
            if sendable is not None:
                ready.append(sendable)
        await self._compose_and_send(ready, now)
        self._wake.set()

    async def _compose_and_send(self, ready: list[tuple[Received, Intent, int]],
                                now: float) -> None:
        """Start a send for each claimed intent the composer lets through; settle the rest."""
        if self.composer is None:
            for received, intent, token in ready:
                self._start_send(intent, token, received, request_for(intent))
            return
        try:
            composed: Sequence[Composed | Exception] = await self.composer.compose(
                [intent for _, intent, _ in ready], now=now)
        except (StoreError, OSError) as exc:
            # Preferences could not be read: hand the batch back for a later try.
            log.warning("composing %d sends failed, released: %s", len(ready), exc)
            for received, intent, token in ready:
                self._outcomes.append((self._released(intent, token, received, now), received))
            return
        except Exception:
            # A fault of the composer's: find out which intents it is about, one by one,
            # so one bad intent spends only its own retry budget.
            composed = [await self._compose_one(intent, now) for _, intent, _ in ready]
        for (received, intent, token), result in zip(ready, composed, strict=True):
            if isinstance(result, Ready):
                self._start_send(intent, token, received, result.request)
                continue
            if isinstance(result, Exception):
                self._fault_of_message(received)
                self._queue_decision(
                    self._raised(result, intent, may_have_left=False), intent, token, received)
                continue
            if result.to_state is State.REJECTED:
                self.stats.rejected += 1  # a template or address no send can use
            else:
                self.stats.skipped += 1  # opted out, or deferred to quiet hours' end
            change = Change(
                key=intent.key, from_state=State.CLAIMED, to_state=result.to_state,
                event=result.event, lease_token=token, reason=result.reason,
                next_attempt_at=result.until if isinstance(result, Deferred) else None,
                worker=self.worker_id, message_id=received.message_id,
                detail=surrogate(intent.recipient_id))
            self._queue_outcome(change, received, intent)

    async def _compose_one(self, intent: Intent, now: float) -> Composed | Exception:
        """One intent composed alone: its result, or what composing it raised."""
        assert self.composer is not None
        try:
            (result,) = await self.composer.compose([intent], now=now)
        except Exception as exc:
            return exc
        return result

    def _start_send(self, intent: Intent, token: int, received: Received,
                    request: SendRequest) -> None:
        task = asyncio.create_task(self._send(intent, token, received, request))
        self._sends.add(task)
        task.add_done_callback(partial(self._sent, intent.key))

    def _route(self, received: Received, claim: Claim, now: float,
               epoch: int) -> tuple[Received, Intent, int] | None:
        """Settle what needs no send; return what does, for the composer."""
        kind = claim.kind
        if kind in (ClaimKind.DONE, ClaimKind.HELD):
            # Finished (or the reconciler's to resolve): a duplicate, acked with no send.
            self.stats.duplicates += kind == ClaimKind.DONE
            self._acks.append(received.receipt)
        elif kind in (ClaimKind.BUSY, ClaimKind.NOT_DUE):
            # A lease (live, or expired and awaiting the reconciler), or a retry not yet
            # due: the ledger moves it on (the lease runs out and the reconciler ends it,
            # the retry falls due), so this is no failure of the message however often
            # it happens.
            self._nacks.append((received.receipt, max(0.0, (claim.retry_at or now) - now)))
        elif kind == ClaimKind.MISSING:
            self.stats.poison += 1
            self._dead_letter(received, f"unknown intent key {claim.key!r}",
                              "unknown intent key", key=claim.key)
        else:
            intent, token = claim.intent, claim.token
            assert intent is not None and token is not None
            self._held[intent.key] = (token, received, intent.lease_expires_at or now, epoch)
            instead = self._instead_of_send(received, intent, token, now)
            if instead is not None:
                self._queue_outcome(instead, received, intent)
                return None
            return received, intent, token
        return None

    def _instead_of_send(self, received: Received, intent: Intent, token: int,
                         now: float) -> Change | None:
        """A poison message, a cancellation or an expiry settles the intent unsent."""
        if received.failures >= self.config.max_receives:
            self.stats.poison += 1
            to_state, event = State.DEAD, "dead"
            reason = (f"poison: failed {received.failures} times on the message itself "
                      f"(received {received.receive_count} times)")
        elif self.policy.spent(intent.failures):
            # Back from uncertain (a send that raised, settled as not accepted) with the
            # budget spent: it is not sent again.
            self.stats.dead += 1
            to_state, event = State.DEAD, "dead"
            reason = f"retry budget spent after {intent.failures} failures; not sent again"
        else:
            instead = before_send(cancel_requested=intent.cancel_requested,
                                  expires_at=intent.expires_at, now=now)
            if instead is None:
                return None
            self.stats.skipped += 1
            to_state, event = instead, instead.value
            reason = "cancel requested" if instead == State.CANCELLED else "expired before send"
        return Change(key=intent.key, from_state=State.CLAIMED, to_state=to_state, event=event,
                      lease_token=token, worker=self.worker_id, message_id=received.message_id,
                      reason=reason)

    # ------------------------------------------------------------------ sending

    def _sent(self, key: str, task: asyncio.Task[None]) -> None:
        self._sends.discard(task)
        if task.cancelled() or task.exception() is not None:
            # Its outcome was never queued (``_send`` turns every Exception into one, so
            # this is a cancellation or worse): stop renewing the lease, so it runs out
            # and the reconciler settles the intent, and free the slot.
            self._held.pop(key, None)
            self._room.set()
            log.error("send task ended without an outcome; its lease is left to run out",
                      extra={"key": key, "channel": self.channel, "worker": self.worker_id},
                      exc_info=None if task.cancelled() else task.exception())

    def _released(self, intent: Intent, token: int, received: Received, now: float) -> Change:
        self.stats.released += 1
        return Change(
            key=intent.key, from_state=State.CLAIMED, to_state=State.RETRYABLE,
            event="released", lease_token=token, next_attempt_at=now,
            worker=self.worker_id, message_id=received.message_id,
            reason="released unsent (shutdown, or the lease ran out before the send)")

    async def _send(self, intent: Intent, token: int, received: Received,
                    request: SendRequest) -> None:
        """Pace and send one claimed intent, then queue its outcome for the commit."""
        try:
            decision = await self._paced_send(intent, request)
        except Exception as exc:
            # ``_paced_send`` maps what it calls raise; this is a fault of its own, and
            # by then the request may have left.
            decision = self._raised(exc, intent, may_have_left=True)
        if decision is None:
            self._queue_outcome(self._released(intent, token, received, self.clock.now()),
                                received, intent)
        else:
            self._queue_decision(decision, intent, token, received)
        self._wake.set()

    def _queue_decision(self, decision: Decision, intent: Intent, token: int,
                        received: Received) -> None:
        """Queue the outcome a decision makes of a claimed intent."""
        if decision.to in _COUNTER and decision.event != "rate_limited":
            name = _COUNTER[decision.to]
            setattr(self.stats, name, getattr(self.stats, name) + 1)
        change = Change(
            key=intent.key, from_state=State.CLAIMED, to_state=decision.to,
            event=decision.event, lease_token=token, reason=decision.reason,
            next_attempt_at=decision.next_attempt_at, receipt=decision.receipt,
            provider_request_id=decision.request_id, count_failure=decision.count_failure,
            worker=self.worker_id, message_id=received.message_id,
            # A raise is told by its event's detail (the reason); other outcomes' events
            # carry the recipient's surrogate, by which the timeline finds them.
            detail=None if decision.raised else surrogate(intent.recipient_id))
        self._queue_outcome(change, received, intent)

    def _raised(self, exc: Exception, intent: Intent, *, may_have_left: bool) -> Decision:
        """The decision for a send that raised ``exc`` (see ``states.decide_raised``)."""
        self.stats.raised += 1
        what = describe_raised(exc, address=intent.address)
        decision = decide_raised(what, may_have_left=may_have_left, failures=intent.failures,
                                 policy=self.policy, now=self.clock.now(), rng=self.rng)
        log.warning("send raised", exc_info=exc, extra={
            "key": intent.key, "channel": self.channel,
            "recipient": surrogate(intent.recipient_id), "outcome": decision.event,
            "reason": decision.reason, "worker": self.worker_id})
        return decision

    def _fault_of_message(self, received: Received) -> None:
        """Count this receive as failed on the message itself, toward the poison limit.

        Which failures are the message's: an undecodable body, an unknown version and an
        unknown intent key (each dead-lettered at its first receive), and a composer
        fault narrowed to this message's intent (composed alone, it raised: its data or
        template cannot be sent, where the rest of its batch could). Everything else is
        the weather and never counts: a store, pacer or provider that raised (it would
        have raised for any message), a release, a lost lease, a busy or not-due intent,
        a receiver that died."""
        self._faulted.add(received.receipt)

    def _dead_letter(self, received: Received, reason: str, summary: str, *,
                     key: str | None = None) -> None:
        """Dead-letter a message with ``reason``; log it with ``summary`` (no message text)."""
        self._dead.append((received.receipt, reason))
        extra = {} if key is None else {"key": key}
        log.warning("dead letter", extra=extra | {
            "channel": self.channel, "message_id": received.message_id, "reason": summary,
            "worker": self.worker_id})

    def _queue_outcome(self, change: Change, received: Received, intent: Intent) -> None:
        """Queue an outcome for the commit, and log one "send" line for it: the routine at
        debug, what an on-call engineer looks for at info or warning (see ``_LOUD``)."""
        self._outcomes.append((change, received))
        level = _LOUD.get(change.event, logging.DEBUG)
        if not log.isEnabledFor(level):
            return
        log.log(level, "send", extra={
            "key": change.key, "channel": self.channel,
            "recipient": change.detail or surrogate(intent.recipient_id),
            "message_id": change.message_id, "provider_request_id": change.provider_request_id,
            "attempt": intent.attempts, "outcome": change.event, "reason": change.reason,
            "retry_at": change.next_attempt_at, "worker": self.worker_id})

    async def _paced_send(self, intent: Intent, request: SendRequest) -> Decision | None:
        """None when the send must not happen: stopping, or the lease is no longer ours.

        Whatever the pacer, the last checks, the provider or ``decide`` raise is the
        decision (``_raised``); the pacer's slot is handed back whatever happens."""
        if self._stopping.is_set():
            return None
        waited_from = self.clock.now()
        try:
            start = await self._acquire()
            if start is None:
                return None
        except Exception as exc:
            return self._raised(exc, intent, may_have_left=False)
        try:
            decision = await self._last_checks_and_send(intent, request, waited_from, start)
            if decision is not None and decision.channel_pause_until is not None:
                # Before anything else, the slot's release included: every process of
                # the channel must stop before its next start.
                self.stats.rate_limited += 1
                await self._pacer_call("pause the channel", self.pacer.pause,
                                       decision.channel_pause_until)
        finally:
            await self._pacer_call("release a slot", self.pacer.release)
        if (decision is not None and decision.channel_pause_until is None
                and decision.to == State.ACCEPTED and self.pacer.streak):
            # Only a streak has anything to end (no call, and no await, per send else).
            await self._pacer_call("end the 429 streak", self.pacer.succeeded)
        return decision

    async def _acquire(self) -> float | None:
        """Wait for the pacer's slot, up to ``CHECKS_LEAD_S`` before its start (returned);
        None if ``stop()`` came first. Raises what the pacer raises (then no slot is held).

        The wait runs in the send's own task (no second task and no race of two
        futures per send): ``stop()`` cancels the sends still waiting here, and such a
        cancellation reads as None; any other is passed on."""
        task = asyncio.current_task()
        if self._stopping.is_set() or task is None:
            return None
        self._acquiring.add(task)
        try:
            return await self.pacer.slot(early_s=CHECKS_LEAD_S)
        except asyncio.CancelledError:
            if task not in self._stop_cancelled:
                raise
            self._stop_cancelled.discard(task)
            task.uncancel()
            return None
        finally:
            self._acquiring.discard(task)

    async def _last_checks_and_send(self, intent: Intent, request: SendRequest,
                                    waited_from: float, start: float) -> Decision | None:
        """Re-check, then send and decide; what raises is the decision, uncertain once
        the request may have left."""
        may_have_left = False
        try:
            late = await self._no_longer_wanted(intent, waited_from)
            if late is not None:
                return late
            await self.pacer.start(start)  # on time, or a later slot if the checks outlast it
            held = self._held.get(intent.key)
            now = self.clock.now()
            if held is None or now >= held[2] or (self.liveness is not None and (
                    not self.liveness.live(now) or self.liveness.epoch != held[3])):
                # Never send under a lease that may already belong to someone else (or
                # that a peer may end any moment, this worker's heartbeat being stale, or
                # ended when this worker was declared gone); checked last, right before
                # the request, after every await.
                return None
            may_have_left = True
            self.stats.sent += 1
            outcome = await self._send_within_deadline(request)
            streak = self.pacer.streak + 1 if isinstance(outcome, RateLimited) else 1
            return decide(outcome, failures=intent.failures, policy=self.policy,
                          now=self.clock.now(), rng=self.rng, consecutive_rate_limits=streak)
        except Exception as exc:
            return self._raised(exc, intent, may_have_left=may_have_left)

    async def _send_within_deadline(self, request: SendRequest) -> Outcome:
        """The provider's answer, or SendDeadlineExceeded once ``send_deadline_s`` has
        passed: the call is cancelled, which closes (resets) its connection, so the
        request cannot reach the provider any later."""
        deadline = asyncio.timeout(self.config.send_deadline_s)
        try:
            async with deadline:
                return await self.provider.send(request)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this send is being cancelled
            # Raised by the provider itself: a fault like any other, not a way out of
            # the outcome (its lease would be left to run out, its slot taken till then).
            raise ProviderCancelled("the provider's send raised CancelledError") from exc
        except TimeoutError as exc:
            if not deadline.expired():
                raise  # the provider's own timeout, told as it is
            raise SendDeadlineExceeded(
                f"no answer within send_deadline_s ({self.config.send_deadline_s:g} s); "
                "the call was cut off") from exc

    async def _pacer_call(self, what: str, call: Callable[..., Awaitable[object]],
                          *args: float) -> None:
        """A pacer call once the decision is made: its failure is logged, and the
        decision stands (what the pacer could not write goes with its next transaction)."""
        try:
            await call(*args)
        except Exception:
            log.warning("pacer could not %s", what, exc_info=True,
                        extra={"channel": self.channel, "worker": self.worker_id})

    async def _no_longer_wanted(self, intent: Intent, waited_from: float) -> Decision | None:
        """Re-check expiry (always) and cancellation (after a long pacer wait, such as a
        429 pause) at the last moment before the send."""
        now = self.clock.now()
        cancel_requested = intent.cancel_requested
        if not cancel_requested and now - waited_from >= self.config.recheck_after_s:
            current = await self.store.intent_get(intent.key)
            cancel_requested = current is not None and current.cancel_requested
        instead = before_send(cancel_requested=cancel_requested, expires_at=intent.expires_at,
                              now=now)
        if instead is None:
            return None
        self.stats.skipped += 1
        reason = ("cancel requested while waiting to send" if instead == State.CANCELLED
                  else "expired while waiting to send")
        return Decision(to=instead, event=instead.value, reason=reason)

    # ------------------------------------------------------------------ committing

    async def _commit_loop(self) -> None:
        failures = 0
        acking: asyncio.Task[None] | None = None
        try:
            while True:
                await self._wake.wait()
                if len(self._outcomes) < self.config.commit_batch:
                    # Gather a few more outcomes: one transaction for many, not one each.
                    await self.clock.sleep(self.config.commit_linger_s)
                self._wake.clear()
                try:
                    # Shielded: a stop cancels this loop, and a commit cut off after it
                    # landed would be committed again by the final flush and read as a
                    # lost lease. The final flush waits for this one (the record lock)
                    # instead, and tries again what it failed to commit.
                    recording = asyncio.ensure_future(
                        self._commit_outcomes(apart=failures >= COMMIT_APART_AFTER))
                    recording.add_done_callback(_retrieve)
                    await asyncio.shield(recording)
                    failures = 0
                except Exception:
                    # The outcomes stay queued (see flush) and are committed on a later
                    # try; meanwhile nothing is acked, so nothing is lost.
                    failures += 1
                    log.exception("commit failed (%d in a row); retrying", failures)
                    self._wake.set()
                    await self.clock.sleep(_pause_after(failures))
                    continue
                # The acks of what just committed go out beside the next commit: the
                # next outcomes are recorded while these messages are acked, never
                # before their own outcomes are durable (only committed outcomes queue
                # message operations).
                if acking is None or acking.done():
                    acking = asyncio.create_task(self._message_ops_loop())
                    acking.add_done_callback(_retrieve)
        finally:
            if acking is not None and not acking.done():
                # Shielded like the commit: the final flush sends what is left.
                with contextlib.suppress(BaseException):
                    await asyncio.shield(acking)

    async def _message_ops_loop(self) -> None:
        """Send queued acks, nacks and dead letters until none are left."""
        failures = 0
        while self._acks or self._nacks or self._failed or self._dead:
            try:
                await self._message_ops()
                failures = 0
            except Exception:
                # Kept queued (see _message_ops); the message stays invisible meanwhile
                # and its redelivery would be a duplicate the ledger acks unsent.
                failures += 1
                log.exception("acking failed (%d in a row); retrying", failures)
                if self._stopping.is_set():
                    return  # the final flush tries once more and says what failed
                await self.clock.sleep(_pause_after(failures))

    async def flush(self) -> None:
        """Commit queued outcomes in one transaction, then ack, nack or dead-letter."""
        await self._commit_outcomes()
        await self._message_ops()

    async def _commit_outcomes(self, *, apart: bool = False) -> None:
        """Commit queued outcomes in one transaction (``apart``: one transaction each);
        queue their message operations."""
        async with self._flush_lock:
            outcomes, self._outcomes = self._outcomes, []
            if not outcomes:
                return
            try:
                await (self._record_apart(outcomes) if apart else self._record(outcomes))
            except BaseException:
                self._outcomes[:0] = outcomes  # kept for the next try
                raise
            # Their slots are free now that the outcomes are durable: receiving goes on
            # while their messages are acked.
            self._room.set()

    async def _record_apart(self, outcomes: list[tuple[Change, Received]]) -> None:
        """Commit each outcome alone, after the batch failed ``COMMIT_APART_AFTER`` times.

        An outcome the store refuses alone is committed again without its text (its
        reason, receipt and request id: what a plug-in provider wrote). One it refuses
        even so, while it takes others in the same pass (so it is reachable), is given
        up: its lease is no longer renewed, and once it expires the reconciler settles
        the intent as it settles a crashed worker's (uncertain, then a lookup by key).
        Outcomes not committed are left in ``outcomes`` and StoreError is raised.
        """
        recorded = 0
        refused: list[tuple[Change, Received, Exception]] = []
        for change, received in outcomes:
            for attempt in (change, _plain(change, now=self.clock.now())):
                try:
                    await self._record([(attempt, received)])
                except Exception as exc:
                    error = exc
                else:
                    recorded += 1
                    break
            else:
                refused.append((change, received, error))
        outcomes[:] = []
        for change, received, error in refused:
            if recorded:
                self._give_up(change, received, error)
            else:
                outcomes.append((change, received))
        if outcomes:
            raise StoreError(f"{len(outcomes)} outcomes not committed, even one by one: "
                             f"{refused[-1][2]}") from refused[-1][2]

    def _give_up(self, change: Change, received: Received, error: Exception) -> None:
        self._held.pop(change.key, None)
        self._faulted.discard(received.receipt)
        self.stats.unrecorded += 1
        log.error("outcome not recorded", extra={
            "key": change.key, "channel": self.channel, "message_id": change.message_id,
            "outcome": change.event, "worker": self.worker_id,
            "reason": f"the store refused it alone, even without its text "
                      f"({describe_raised(error)}); its lease is left to expire and the "
                      "reconciler settles the intent"})

    async def _message_ops(self) -> None:
        """Ack, nack or dead-letter what committed outcomes (or no-send routes) queued."""
        async with self._ack_lock:
            acks, self._acks = self._acks, []
            nacks, self._nacks = self._nacks, []
            failed, self._failed = self._failed, []
            dead, self._dead = self._dead, []
            now = self.clock.now()
            try:
                if acks:
                    await self.transport.ack(self.channel, acks)
                    acks = []
                if nacks:
                    await self.transport.nack(self.channel, nacks, now=now)
                    nacks = []
                if failed:
                    await self.transport.nack(self.channel, failed, now=now, failed=True)
                    failed = []
                if dead:
                    await self.transport.dead_letter(self.channel, dead, now=now)
                    dead = []
            finally:
                # What did not go through is tried again with the next flush.
                self._acks[:0], self._nacks[:0], self._dead[:0] = acks, nacks, dead
                self._failed[:0] = failed

    async def _record(self, outcomes: list[tuple[Change, Received]]) -> None:
        now = self.clock.now()
        # On the store's own queue the acks commit with their outcomes: one transaction
        # instead of two, and no committed outcome whose message is still on the queue.
        acks = QueueAcks(self.channel, [
            received.receipt if _acked_after_commit(change) else None
            for change, received in outcomes
        ]) if self.store.acks_commit_with(self.transport) else None
        applied = set(await self.store.intent_apply_many([c for c, _ in outcomes], now=now,
                                                         acks=acks))
        # A commit can hang for as long as the store is out of reach (a partition): runs
        # of lost leases are timed by when they are found, not by when the commit began.
        found_at = self.clock.now()
        self.stats.commits += 1
        lost: list[Event] = []
        for change, received in outcomes:
            self._held.pop(change.key, None)
            faulted = received.receipt in self._faulted
            self._faulted.discard(received.receipt)
            if change.key not in applied:
                # The lease moved on (it expired and the reconciler took the intent):
                # leave the message to come back rather than ack work we no longer own.
                self.stats.lease_lost += 1
                self._nacks.append((received.receipt, 0.0))
                lost.append(Event(key=change.key, channel=self.channel, type="lease_lost",
                                  at=now, state=change.to_state.value, worker=self.worker_id,
                                  message_id=change.message_id,
                                  provider_request_id=change.provider_request_id,
                                  detail=f"outcome {change.event} not recorded: lease lost"))
                quiet = (self._lease_lost_at is not None
                         and found_at - self._lease_lost_at < self.config.lease_s)
                self._lease_lost_at = found_at
                log.log(logging.DEBUG if quiet else logging.WARNING, "lease lost", extra={
                    "key": change.key, "channel": self.channel, "message_id": change.message_id,
                    "provider_request_id": change.provider_request_id,
                    "outcome": change.event, "reason": "outcome not recorded: the lease "
                    "moved on; the message comes back (more of them within a lease: at "
                    "debug)", "worker": self.worker_id})
            elif change.to_state == State.RETRYABLE:
                delay = max(0.0, (change.next_attempt_at or now) - now)
                (self._failed if faulted else self._nacks).append((received.receipt, delay))
            elif change.to_state == State.DEAD:
                self._dead.append((received.receipt, change.reason or "dead"))
            elif acks is None:
                self._acks.append(received.receipt)
        if lost:
            await self.store.event_append_many(lost)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("commit", extra={
                "channel": self.channel, "outcomes": len(outcomes), "applied": len(applied),
                "lease_lost": len(lost), "worker": self.worker_id})

    # ------------------------------------------------------------------ leases

    async def _renew_loop(self) -> None:
        """Keep leases and message visibility alive while slow sends are in flight."""
        while True:
            await self.clock.sleep(self.config.lease_s / 3)
            try:
                await self.renew()
            except Exception:
                # A missed renewal is survivable: sends check their lease before starting.
                log.exception("lease renewal failed; retrying next round")

    async def renew(self) -> None:
        """Extend every held lease; a lost one reads as expired so its send never starts."""
        if not self._held:
            return
        now = self.clock.now()
        held = list(self._held.items())
        lost = set(await self.store.intent_renew_leases(
            [(key, token) for key, (token, _, _, _) in held], owner=self.worker_id,
            lease_s=self.config.lease_s, now=now))
        for key, (token, received, _, epoch) in held:
            if key in self._held:
                until = 0.0 if key in lost else now + self.config.lease_s
                self._held[key] = (token, received, until, epoch)
        await self.transport.extend(
            self.channel, [received.receipt for _, (_, received, _, _) in held],
            visibility_s=self.config.visibility_s, now=now)


def _pause_after(failures: int) -> float:
    """Seconds before trying a failed commit or ack again: 0.2 s doubling to 5 s. The
    exponent is bounded: an outage of an hour or more fails more than a thousand times,
    and ``2 ** 1024`` is no float."""
    return min(5.0, 0.1 * 2.0 ** min(failures, 6))


def _plain(change: Change, *, now: float) -> Change:
    """``change`` with its transition and counts but none of the text a provider wrote,
    and a retry time a store can hold: what is committed when it was refused as it was."""
    retry_at = change.next_attempt_at
    return evolve(change, reason=PLAIN_REASON, detail=None, receipt=None,
                  provider_request_id=None,
                  next_attempt_at=retry_at if retry_at is None or math.isfinite(retry_at)
                  else now)


def _acked_after_commit(change: Change) -> bool:
    """Whether a committed outcome's message is acked: not when it is to be tried again
    (nacked, with its delay) or is dead (dead-lettered with its reason)."""
    return change.to_state not in (State.RETRYABLE, State.DEAD)


def _retrieve(task: asyncio.Future[None]) -> None:
    """Mark a task's outcome as seen (its error is handled elsewhere)."""
    if not task.cancelled():
        task.exception()
