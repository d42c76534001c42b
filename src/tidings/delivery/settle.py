"""Settling: an outcome becomes a Change; outcomes are committed in batches, then acked.

Every outcome and its audit event are committed before the message is acked (on the
store's own queue, in the same transaction as the ack). A batch the store keeps
refusing is committed one outcome at a time (``_record_apart``), so one outcome the
store refuses holds back no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

from tidings.core.addresses import normalize_address
from tidings.core.errors import StoreError
from tidings.core.model import Event, Intent, Received, evolve
from tidings.core.states import Decision, State
from tidings.core.suppression import Suppression, from_refusal
from tidings.core.surrogate import surrogate
from tidings.core.throttle import releases
from tidings.delivery.outage import pause_after
from tidings.delivery.raised import describe_raised
from tidings.delivery.worker_state import WorkerState
from tidings.stores.base import Change, QueueAcks

# Every step of the worker logs as the worker.
log = logging.getLogger("tidings.worker")

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


class Settling(WorkerState):
    """Queue outcomes, commit them, then ack, nack or dead-letter their messages."""

    def _released(self, intent: Intent, token: int, received: Received, now: float) -> Change:
        self.stats.released += 1
        return Change(
            key=intent.key, from_state=State.CLAIMED, to_state=State.RETRYABLE,
            event="released", lease_token=token, next_attempt_at=now,
            worker=self.worker_id, message_id=received.message_id,
            reason="released unsent (shutdown, or the lease ran out before the send)")

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
        reason = from_refusal(decision.code)
        if reason is not None:
            # The recipient asked for no more (a STOP reply): no later send may try.
            kind = self.address_kind
            self._suppress[intent.key] = Suppression(
                address=normalize_address(kind, intent.address), kind=kind, reason=reason,
                source=f"intent:{intent.key}", created_at=self.clock.now(), key=intent.key,
                detail=decision.reason)
        self._queue_outcome(change, received, intent)

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
                    await self.clock.sleep(pause_after(failures))
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
                await self.clock.sleep(pause_after(failures))

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

    async def _add_suppressions(self, committed: list[str]) -> None:
        """Suppress the addresses committed outcomes call for (a STOP reply), after the
        commit: an outcome is never held back by its suppression. One that fails is
        logged; the provider refuses the next send the same way, and it is added then."""
        found = [entry for key in committed if (entry := self._suppress.pop(key, None))]
        if not found:
            return
        try:
            await self.store.suppression_add_many(found, now=self.clock.now())
        except Exception:
            log.warning("suppression not recorded; the next refusal records it",
                        exc_info=True, extra={"channel": self.channel,
                                              "worker": self.worker_id,
                                              "key": found[0].key})

    async def _release_throttles(self, outcomes: list[tuple[Change, Received]],
                                 applied: set[str]) -> None:
        """Hand back the throttle reservations of sends that surely did not happen, once
        their outcome is committed under this worker's lease (so no other worker holds
        the intent). An uncertain send keeps its reservation: it may have gone. One that
        fails is logged; the reservation stands (the recipient's count errs high)."""
        if not self._reserved or self.throttle is None:
            return
        back: list[str] = []
        for change, _ in outcomes:
            if change.key not in self._reserved:
                continue
            self._reserved.discard(change.key)
            if change.key in applied and releases(change.to_state):
                back.append(change.key)
        try:
            await self.throttle.release(back)
        except Exception:
            log.warning("throttle reservations not handed back", exc_info=True,
                        extra={"channel": self.channel, "worker": self.worker_id})

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
        await self._add_suppressions([c.key for c, _ in outcomes if c.key in applied])
        await self._release_throttles(outcomes, applied)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("commit", extra={
                "channel": self.channel, "outcomes": len(outcomes), "applied": len(applied),
                "lease_lost": len(lost), "worker": self.worker_id})


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
