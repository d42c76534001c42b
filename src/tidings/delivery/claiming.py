"""Claiming: a received batch is claimed, and each intent to be sent gets its send.

Its messages are decoded and their intents claimed; what a delivery hold covers is
parked; what needs no send (a duplicate, a busy or not-due intent, a poison message, a
cancellation, an expiry) is settled here; the rest is composed and sent. Leases are
renewed while the sends are in flight.

On a paced channel the claims held cover no more than this worker's pacer share sends
within ``claim_ahead_s`` (see ``WorkerConfig``), so a crash expires only what was about
to be sent.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from tidings.core.errors import MessageDecodeError, StoreError
from tidings.core.model import Intent, Message, Received, SendRequest
from tidings.core.states import State, before_send
from tidings.core.surrogate import surrogate
from tidings.core.throttle import DEFERRED_EVENT
from tidings.delivery.compose import Composed, Deferred, Ready
from tidings.delivery.sending import Sending
from tidings.stores.base import Change, Claim, ClaimKind

# Every step of the worker logs as the worker.
log = logging.getLogger("tidings.worker")


def request_for(intent: Intent) -> SendRequest:
    """The send of an intent on a channel with no composer: identifiers only."""
    return SendRequest(key=intent.key, channel=intent.channel, to=intent.address,
                       template=intent.template, data_json=intent.data,
                       recipient_id=intent.recipient_id)


class Claiming(Sending):
    """Claim a received batch and start what is to be sent; keep the leases alive."""

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
            # The last depth stands: the pacer state is read again at the next look. A
            # worker that never read it (just restarted, while a killed peer's store
            # recovers) starts where a worker alone would: a quarter of the whole rate,
            # never max_held, which a crash would expire whole.
            log.warning("pacer state unreadable; claim depth unchanged", exc_info=True,
                        extra={"channel": self.channel, "worker": self.worker_id})
            interval = self.pacer.limits.interval_s
            if self._claim_depth is None and interval > 0:
                self._claim_depth = self._first_depth(self._depth_target(1.0 / interval))
            return
        if share is None:
            self._claim_depth = None
            return
        target = self._depth_target(share)
        if self._claim_depth is None:
            self._claim_depth = self._first_depth(target)
        else:
            self._claim_depth = min(target, 2 * self._claim_depth)

    def _depth_target(self, share: float) -> int:
        """The claims a share of ``share`` starts per second sends within the look ahead."""
        ahead = min(self.config.claim_ahead_s, self.config.lease_s)
        return max(1, min(self.config.max_held, math.ceil(share * ahead)))

    @staticmethod
    def _first_depth(target: int) -> int:
        """Just started: peers that started with it may not be in the pacer state yet,
        so the first look can see this worker alone and overrate its share. It starts at
        a quarter of it and at most doubles per look (falling at once)."""
        return max(1, math.ceil(target / 4))

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
        try:
            claims = await self.store.intent_claim_many(
                keys, owner=self.worker_id, lease_s=self.config.lease_s, now=now,
                message_ids=[r.message_id for r in decoded],
                started=self.marks_at_claim) if keys else []
        except StoreError:
            # Nothing of the batch was claimed: its messages go back at once (no failure
            # of theirs), to be taken again when the store answers (``Worker.run``).
            self._nacks.extend((item.receipt, 0.0) for item in decoded)
            self._wake.set()
            raise
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
            await self._throttle_and_send(
                [(received, intent, token, request_for(intent))
                 for received, intent, token in ready], now)
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
        sendable: list[tuple[Received, Intent, int, SendRequest]] = []
        for (received, intent, token), result in zip(ready, composed, strict=True):
            if isinstance(result, Ready):
                sendable.append((received, intent, token, result.request))
                continue
            if isinstance(result, Exception):
                self._fault_of_message(received)
                self._queue_decision(
                    self._raised(result, intent, may_have_left=False), intent, token, received)
                continue
            if result.to_state is State.REJECTED:
                self.stats.rejected += 1  # a template or address no send can use
            elif result.to_state is State.SUPPRESSED:
                self.stats.suppressed += 1  # on the suppression list: no failure
            else:
                self.stats.skipped += 1  # opted out, or deferred to quiet hours' end
            change = Change(
                key=intent.key, from_state=State.CLAIMED, to_state=result.to_state,
                event=result.event, lease_token=token, reason=result.reason,
                next_attempt_at=result.until if isinstance(result, Deferred) else None,
                worker=self.worker_id, message_id=received.message_id,
                detail=surrogate(intent.recipient_id))
            self._queue_outcome(change, received, intent)
        await self._throttle_and_send(sendable, now)

    async def _throttle_and_send(self, sendable: list[tuple[Received, Intent, int, SendRequest]],
                                 now: float) -> None:
        """Start each send its throttle lets through; settle the rest by the rule."""
        if self.throttle is None or not sendable:
            for received, intent, token, request in sendable:
                self._start_send(intent, token, received, request)
            return
        try:
            answers = await self.throttle.reserve([intent for _, intent, _, _ in sendable],
                                                  now=now)
        except (StoreError, OSError) as exc:
            # The counts could not be read: hand the batch back for a later try.
            log.warning("reserving %d sends failed, released: %s", len(sendable), exc)
            for received, intent, token, _ in sendable:
                self._outcomes.append((self._released(intent, token, received, now), received))
            return
        for (received, intent, token, request), refused in zip(sendable, answers, strict=True):
            if refused is None:
                if self.throttle.counts(intent):
                    self._reserved.add(intent.key)
                self._start_send(intent, token, received, request)
                continue
            self.stats.throttled += 1  # over the recipient's limit: no failure
            # A deferral's event says the rule and when the send comes back (a retryable
            # intent keeps no reason); a terminal one's reason is kept on the intent.
            who = surrogate(intent.recipient_id)
            self._queue_outcome(Change(
                key=intent.key, from_state=State.CLAIMED, to_state=refused.to_state,
                event=refused.event, lease_token=token, reason=refused.reason,
                next_attempt_at=refused.until, worker=self.worker_id,
                message_id=received.message_id,
                detail=f"{refused.reason}; recipient {who}"
                if refused.event == DEFERRED_EVENT else who),
                received, intent)

    async def _compose_one(self, intent: Intent, now: float) -> Composed | Exception:
        """One intent composed alone: its result, or what composing it raised."""
        assert self.composer is not None
        try:
            (result,) = await self.composer.compose([intent], now=now)
        except Exception as exc:
            return exc
        return result

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
