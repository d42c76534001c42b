"""Sending: wait for the pacer's slot, check once more, call the provider within its deadline.

Whatever the pacer, the last checks, the provider or the mapping of its answer raises
becomes the intent's outcome (``states.decide_raised``): before the request could have
left, a transient failure; once it may have left, uncertain, for the reconciler to settle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from tidings.core.errors import ProviderCancelled, SendDeadlineExceeded
from tidings.core.model import Intent, Received, SendRequest
from tidings.core.outcomes import Outcome, RateLimited
from tidings.core.states import Decision, State, before_send, decide, decide_raised
from tidings.core.surrogate import surrogate
from tidings.delivery.raised import describe_raised
from tidings.delivery.settle import Settling

# Every step of the worker logs as the worker.
log = logging.getLogger("tidings.worker")

#: Seconds before its pacer slot's start that a send is handed its slot: the last checks
#: (a store read after a long wait) run before the start, so they delay no start; the
#: pacer gives up a start they outlast (``Pacer.start``) rather than make it late.
CHECKS_LEAD_S = 0.02


class Sending(Settling):
    """Pace and send claimed intents, each in a task of its own; queue their outcomes."""

    def _start_send(self, intent: Intent, token: int, received: Received,
                    request: SendRequest) -> None:
        task = asyncio.create_task(self._send(intent, token, received, request))
        self._sends.add(task)
        task.add_done_callback(partial(self._sent, intent.key))

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

    async def _send(self, intent: Intent, token: int, received: Received,
                    request: SendRequest) -> None:
        """Pace and send one claimed intent, then queue its outcome for the commit."""
        try:
            decision = await self._paced_send(intent, request, received.lane)
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

    async def _paced_send(self, intent: Intent, request: SendRequest,
                          lane: int = 0) -> Decision | None:
        """None when the send must not happen: stopping, or the lease is no longer ours.

        Whatever the pacer, the last checks, the provider or ``decide`` raise is the
        decision (``_raised``); the pacer's slot is handed back whatever happens."""
        if self._stopping.is_set():
            return None
        waited_from = self.clock.now()
        if self._wire is None:
            return await self._paced_send_on_the_wire(intent, request, waited_from, lane)
        async with self._wire:
            return await self._paced_send_on_the_wire(intent, request, waited_from, lane)

    async def _paced_send_on_the_wire(self, intent: Intent, request: SendRequest,
                                      waited_from: float, lane: int) -> Decision | None:
        """``_paced_send`` once the provider has a connection for it (if it counts them)."""
        if self._stopping.is_set():
            return None
        try:
            start = await self._acquire(lane)
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

    async def _acquire(self, lane: int = 0) -> float | None:
        """Wait for the pacer's slot, up to ``CHECKS_LEAD_S`` before its start (returned);
        None if ``stop()`` came first. Raises what the pacer raises (then no slot is held).
        Where the worker keeps turns (a paced channel with lanes), the sends waiting for
        a slot ask for it one at a time, lowest ``lane`` first (``pacing.turns``).

        The wait runs in the send's own task (no second task and no race of two
        futures per send): ``stop()`` cancels the sends still waiting here, and such a
        cancellation reads as None; any other is passed on."""
        task = asyncio.current_task()
        if self._stopping.is_set() or task is None:
            return None
        self._acquiring.add(task)
        try:
            if self.turns is None:
                return await self.pacer.slot(early_s=CHECKS_LEAD_S)
            await self.turns.take(lane)
            try:
                return await self.pacer.slot(early_s=CHECKS_LEAD_S, behind=self.turns.waiting)
            finally:
                self.turns.give()
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
            if not await self._started(intent.key):
                return None  # the lease is no longer this worker's: it must not send
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

    async def _started(self, key: str) -> bool:
        """Mark the send of ``key`` started in the ledger, with the starts that come
        together (one write for all of them), before its request can leave; False when
        the lease is no longer this worker's. What raises is raised before any request
        left, so it is a transient failure, never uncertain."""
        held = self._held.get(key)
        if held is None:
            return False
        if self.marks_at_claim:
            return True  # marked by its claim (the lease is checked right before the send)
        return await self._starts.submit((key, held[0]))

    async def _send_within_deadline(self, request: SendRequest) -> Outcome:
        """The provider's answer, or SendDeadlineExceeded once ``send_deadline_s`` has
        passed: the call is cancelled, which closes (resets) its connection, so the
        request cannot reach the provider any later."""
        deadline = asyncio.timeout(self.config.send_deadline_s)
        try:
            async with deadline:
                if self.batcher is not None:
                    return await self.batcher.send(request)
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
