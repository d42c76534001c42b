"""The reconciler: a periodic, idempotent sweep that repairs what crashes leave behind.

0. Workers whose liveness marker is gone (``tidings.core.liveness``) have their leases ended
   at once (as 1 does when a lease expires) and their messages made
   visible again, without waiting for ``lease_s`` or the visibility timeout; a worker
   whose process is gone from this host has its pacer slots freed too (no request of
   it can be in flight), without waiting for the pacer's ``stale_s``.
1. Claimed intents whose lease expired become uncertain when a send had started under
   the lease (``Ledger.intent_mark_started``): the holder may have sent. A claim whose
   send never started is released (retryable) and claimed again: nothing can have left.
2. Selected intents whose publisher died are published again (the relay).
3. Enqueued or retryable intents whose message vanished are published again.
4. Uncertain intents are settled by their channel's policy (``tidings.delivery.uncertain``):
   looked up by key, held for evidence and an operator, or (an explicit choice)
   resent under the same key. Nothing is resent because a provider has no lookup.

Every action leaves an audit event. Running it twice, or in two processes at once,
is safe: every change is a compare-and-set.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, cast

from tidings.admission.relay import RelayConfig, publish, relay_pass
from tidings.core import pacing as algorithm
from tidings.core.clock import Clock
from tidings.core.liveness import LivenessConfig, Registry, WorkerMark, gone, sends_land_by
from tidings.core.model import Event, Intent
from tidings.core.outcomes import Lookup, LookupHint, describe
from tidings.core.policy import RetryPolicy, retry_delay
from tidings.core.states import State
from tidings.core.suppression import SuppressionRules
from tidings.delivery.uncertain import (
    Policy,
    UncertainPolicy,
    Verdict,
    after_lookup,
    awaiting_operator,
    hint_for,
    on_policy,
    policy_for,
)
from tidings.providers.base import Provider
from tidings.recovery.evidence import early_evidence
from tidings.stores.base import Change, Ledger, PacerBackend, WebhookRecords
from tidings.transports.base import RecordsReceiver, Transport
from tidings.webhooks.record import adopt_orphans

log = logging.getLogger("tidings.reconciler")


class ReconcilerStore(Ledger, WebhookRecords, PacerBackend, Protocol):
    """What the sweeps reach: the ledger, the provider events whose orphans they adopt,
    and the pacer state whose slots a gone worker held."""


@dataclass(frozen=True, kw_only=True)
class ReconcilerConfig:
    lost_after_s: float = 60.0
    uncertain_after_s: float = 1.0
    limit: int = 2000
    lease_s: float = 30.0
    """The workers' lease: a send began at most this long before it became uncertain."""
    lookups_in_flight: int = 16
    send_deadlines: Mapping[str, float] = field(default_factory=dict)
    """Each channel's worker send deadline (``WorkerConfig.send_deadline_s``): how long
    a gone worker's send may still be in flight after its fence closed."""
    send_deadline_s: float = 15.0
    """The deadline of a channel not in ``send_deadlines``."""
    relay: RelayConfig = field(default_factory=RelayConfig)
    suppression: SuppressionRules = field(default_factory=SuppressionRules)
    """How adopted provider reports suppress their addresses (as on arrival)."""

    def send_deadline_for(self, channel: str) -> float:
        """``channel``'s send deadline (``send_deadline_s`` where none is given)."""
        return self.send_deadlines.get(channel, self.send_deadline_s)


@dataclass(kw_only=True)
class ReconcileResult:
    leases_ended: int = 0
    """Leases of workers found gone, ended before they expired."""
    messages_released: int = 0
    """Messages those workers held, visible again before their visibility timeout."""
    pacer_slots_freed: int = 0
    """Pacer slots those workers held, free before the pacer's ``stale_s``."""
    leases_expired: int = 0
    leases_released: int = 0
    """Of the leases ended or expired, those with no send started under them: released
    for another claim instead of made uncertain (also counted as ended or expired)."""
    republished_stuck: int = 0
    republished_lost: int = 0
    uncertain_accepted: int = 0
    uncertain_retried: int = 0
    uncertain_failed: int = 0
    uncertain_held: int = 0
    uncertain_waiting: int = 0
    """Left uncertain this pass: a lookup unanswered, or "not found" still too fresh."""
    awaiting_operator: int = 0
    """Held past their channel's ``hold_s``: an operator decides (never resent alone)."""
    orphans_adopted: int = 0

    def total(self) -> int:
        """Actions taken (waiting and awaiting are not actions)."""
        return (self.leases_ended + self.messages_released + self.pacer_slots_freed
                + self.leases_expired + self.republished_stuck + self.republished_lost
                + self.uncertain_accepted + self.uncertain_retried + self.uncertain_failed
                + self.uncertain_held + self.orphans_adopted)


class Reconciler:
    def __init__(self, *, store: ReconcilerStore, transport: Transport,
                 providers: Mapping[str, Provider],
                 config: ReconcilerConfig | None = None, worker_id: str = "reconciler",
                 policies: Mapping[str, UncertainPolicy] | None = None,
                 registry: Registry | None = None, liveness: LivenessConfig | None = None,
                 host: str | None = None, clock: Clock | None = None,
                 retry: RetryPolicy | None = None, rng: random.Random | None = None) -> None:
        self.store = store
        self.transport = transport
        self.providers = providers
        # Measures a relay page's publishing, so its lease is extended while it lasts.
        self.clock = clock
        self.config = config or ReconcilerConfig()
        self.worker_id = worker_id
        # A channel without a given policy takes its provider's default: lookup where
        # the provider can be asked, else hold. Never resend by default.
        self.policies = dict(policies or {})
        for channel, provider in providers.items():
            self.policies.setdefault(channel, policy_for(channel, provider))
        # Worker markers (None: nobody's marker is watched; leases only expire).
        self.registry = registry
        self.liveness = liveness or LivenessConfig()
        self.host = host or socket.gethostname()
        # The backoff of a resend after failures (an uncertain answer is one).
        self.retry = retry or RetryPolicy()
        self.rng = rng or random.Random()

    async def run_pass(self, *, now: float, paused_channels: Sequence[str] = ()
                       ) -> ReconcileResult:
        result = ReconcileResult()
        await self.end_gone_workers(now, result)
        result.leases_expired = await self._expire_leases(now, result)
        result.republished_stuck = await relay_pass(
            self.store, self.transport, now=now, config=self.config.relay,
            paused_channels=paused_channels, clock=self.clock)
        result.republished_lost = await self._republish_lost(now)
        await self._resolve_uncertain(now, result)
        result.awaiting_operator = await self._count_awaiting(now)
        # A provider's webhook can beat the worker's commit of "accepted": attach it now.
        result.orphans_adopted = await adopt_orphans(self.store, now, limit=self.config.limit,
                                                     rules=self.config.suppression)
        for action, count in result.__dict__.items():
            if count:
                log.log(logging.WARNING if action == "awaiting_operator" else logging.INFO,
                        "reconciled", extra={"action": action, "count": count,
                                             "worker": self.worker_id})
        return result

    async def end_gone_workers(self, now: float, result: ReconcileResult | None = None
                               ) -> ReconcileResult:
        """End the leases of every worker whose marker is gone and make its messages
        visible again. A worker is declared gone once (a compare-and-set on its marker);
        its work is then taken back, and its marker settled, by this pass or, if this
        one dies half-way, by the next."""
        result = result or ReconcileResult()
        if self.registry is None:
            return result
        for mark in await self.registry.running():
            if mark.ended_at is None:
                why = gone(mark, now=now, host=self.host, config=self.liveness)
                if why is None or not await self.registry.end(mark, now=now,
                                                              by=self.worker_id):
                    continue
                log.warning("worker gone", extra={
                    "gone_worker": mark.worker_id, "host": mark.host, "pid": mark.pid,
                    "reason": why, "worker": self.worker_id})
            await self._take_back(mark, now, result)
            await self.registry.settle(mark.worker_id, now=now)
        return result

    async def _take_back(self, mark: WorkerMark, now: float, result: ReconcileResult) -> None:
        """A gone worker's leases end: those with a send started become uncertain (it
        may have sent: the channel's policy settles each, as for an expired lease), the
        others are released; its messages become visible."""
        assert self.registry is not None
        try:
            # Whatever its sessions still hold (row locks of a transaction cut off
            # mid-way) is let go now, not when the server notices the peer is gone.
            await self.registry.disconnect(mark)
        except Exception:
            log.warning("could not end the sessions of a gone worker", exc_info=True,
                        extra={"gone_worker": mark.worker_id, "worker": self.worker_id})
        while True:
            held = await self.store.intent_find(states=[State.CLAIMED],
                                                lease_owner=mark.worker_id,
                                                limit=self.config.limit)
            changes = [self._lease_ended(i, mark, now)
                       for i in held if i.lease_owner == mark.worker_id]
            applied = await self._release_unstarted(changes, now, result)
            result.leases_ended += len(applied)
            if len(held) < self.config.limit or not applied:
                break
        if isinstance(self.transport, RecordsReceiver):
            result.messages_released += await self.transport.release_receiver(
                mark.worker_id, now=now)
        if sends_land_by(mark, host=self.host, config=self.liveness,
                         send_deadline_s=self.config.send_deadline_s) is None:
            # Its process is gone: none of its requests is in flight, so the slots it
            # held are free now, not after the pacer's stale_s, which a kill every few
            # seconds would let pile up past max_in_flight.
            result.pacer_slots_freed += await self._free_pacer_slots(mark.worker_id)

    async def _free_pacer_slots(self, worker: str) -> int:
        freed = 0
        for channel in sorted(self.providers):
            if algorithm.holds_slots(await self.store.pacer_read(channel), worker=worker):
                freed += await self.store.pacer_transact(
                    channel, partial(algorithm.forget, worker=worker))
        return freed

    def _lease_ended(self, intent: Intent, mark: WorkerMark, now: float) -> Change:
        """``intent``'s lease, held by gone ``mark``, ended: uncertain, and not settled
        (``next_attempt_at``) before its send, if one is in flight, can no longer land."""
        deadline = self.config.send_deadline_for(intent.channel)
        landed_by = sends_land_by(mark, host=self.host, config=self.liveness,
                                  send_deadline_s=deadline)
        wait = landed_by is not None and landed_by > now
        reason = (f"lease of {intent.lease_owner} ended before it expired at "
                  f"{intent.lease_expires_at or 0:.3f}: its worker is gone")
        if wait:
            reason += f"; settled from {landed_by:.3f}, when a send in flight has landed"
        return Change(key=intent.key, from_state=State.CLAIMED, to_state=State.UNCERTAIN,
                      event="lease_ended", lease_token=intent.lease_token,
                      worker=self.worker_id, reason=reason,
                      next_attempt_at=landed_by if wait else None)

    async def _expire_leases(self, now: float, result: ReconcileResult) -> int:
        """Expired leases: a send started under one may have left, so the intent is
        uncertain and its channel's policy settles it (it is never simply retried); a
        lease with no send started under it is released for another claim."""
        expired = await self.store.intent_find(
            states=[State.CLAIMED], lease_expired_at=now, limit=self.config.limit)
        changes = [Change(
            key=i.key, from_state=State.CLAIMED, to_state=State.UNCERTAIN,
            event="lease_expired", lease_token=i.lease_token, lease_expired_by=now,
            worker=self.worker_id,
            reason=f"lease of {i.lease_owner} expired at {i.lease_expires_at or 0:.3f}")
            for i in expired]
        return len(await self._release_unstarted(changes, now, result))

    async def _release_unstarted(self, changes: list[Change], now: float,
                                 result: ReconcileResult) -> list[str]:
        """End leases: a claim with no send started under it (``intent_mark_started``
        marked none) is released for another claim, and only the rest become uncertain
        as ``changes`` say. Each release is guarded on "not started" in the store, so a
        send marked after the intent was read is never released: that one's change to
        uncertain applies instead. The keys whose lease ended, either way."""
        if not changes:
            return []
        releases = [Change(
            key=c.key, from_state=State.CLAIMED, to_state=State.RETRYABLE, event="released",
            lease_token=c.lease_token, lease_expired_by=c.lease_expired_by, unstarted=True,
            next_attempt_at=now, worker=self.worker_id,
            reason=f"{c.reason}; no send had started under it, so it is claimed again")
            for c in changes]
        released = set(await self.store.intent_apply_many(releases, now=now))
        rest = [c for c in changes if c.key not in released]
        ended = await self.store.intent_apply_many(rest, now=now) if rest else []
        result.leases_released += len(released)
        return [*released, *ended]

    async def _republish_lost(self, now: float) -> int:
        # Only intents already due: a scheduled one whose message was lost is republished
        # once it is due (a pass late at most, and never sent early), and the pass does not
        # read the same page of intents due days later every time (on a month-long ledger
        # those reads, of rows no longer in the cache, were most of a pass).
        stale = await self.store.intent_find(
            states=[State.ENQUEUED, State.RETRYABLE], updated_before=now - self.config.lost_after_s,
            due_before=now, limit=self.config.limit)
        by_channel: dict[str, list[tuple[str, float, int, str]]] = defaultdict(list)
        for intent in stale:
            due = intent.next_attempt_at if intent.state == State.RETRYABLE else intent.due_at
            by_channel[intent.channel].append((intent.key, due or now, intent.lane,
                                               intent.group_key))
        count = 0
        events: list[Event] = []
        for channel, items in by_channel.items():
            present = await self.transport.contains(channel, [k for k, _, _, _ in items])
            lost = [(k, channel, due, lane, group) for k, due, lane, group in items
                    if k not in present]
            if not lost:
                continue
            count += await publish(self.transport, lost, now=now)
            events.extend(Event(key=k, channel=channel, type="republished", at=now,
                                worker=self.worker_id, detail="message missing from the queue")
                          for k, _, _, _, _ in lost)
        if events:
            await self.store.event_append_many(events)
        return count

    def policy(self, channel: str) -> UncertainPolicy:
        """The channel's policy; a channel no provider serves here is held."""
        return self.policies.get(channel) or UncertainPolicy(mode=Policy.HOLD)

    async def _resolve_uncertain(self, now: float, result: ReconcileResult) -> None:
        pending = await self.store.intent_find(
            states=[State.UNCERTAIN], updated_before=now - self.config.uncertain_after_s,
            limit=self.config.limit)
        timelines = {i.key: await self.store.events_for(i.key) for i in pending}
        # A webhook that came while the send was in flight already settled it.
        seen = {key: early_evidence(events) for key, events in timelines.items()}
        # A gone worker's send may still land (``_lease_ended``): asked now, a "not
        # found" could be resent beside it.
        landing = {i.key for i in pending
                   if i.next_attempt_at is not None and i.next_attempt_at > now}
        asks = [i for i in pending if seen[i.key] is None and i.key not in landing
                and self.policy(i.channel).mode is Policy.LOOKUP]
        hints = {i.key: hint_for(i, timelines[i.key], lease_s=self.config.lease_s)
                 for i in asks}
        answers = dict(zip((i.key for i in asks), await self._lookups(asks, hints),
                           strict=True))
        changes: list[Change] = []
        for intent in pending:
            policy = self.policy(intent.channel)
            found = answers.get(intent.key)
            verdict: Verdict | None = seen[intent.key]
            if verdict is not None:
                pass
            elif intent.key in landing:
                result.uncertain_waiting += 1
                continue
            elif found is not None:
                verdict = after_lookup(intent, policy, found, now=now)
            else:
                verdict = on_policy(intent, policy, now=now, lease_s=self.config.lease_s)
            if verdict is None or verdict.to is None:
                result.uncertain_waiting += 1
                continue
            # Guarded by the lease token too: the verdict is about this uncertain episode.
            # Another sweep may have resent it meanwhile and it may be uncertain again, with
            # a new token, about a send this lookup could not have seen.
            changes.append(Change(
                key=intent.key, from_state=State.UNCERTAIN, to_state=verdict.to,
                event=verdict.event, receipt=verdict.receipt, worker=self.worker_id,
                reason=verdict.reason, lease_token=intent.lease_token,
                next_attempt_at=self._resend_at(intent, now)
                if verdict.to is State.RETRYABLE else None))
        applied = set(await self.store.intent_apply_many(changes, now=now)) if changes else set()
        retry: list[tuple[str, str, float, int, str]] = []
        by_key = {i.key: i for i in pending}
        for change in changes:
            if change.key not in applied:
                continue  # settled meanwhile (a webhook, an operator, another sweep)
            match change.to_state:
                case State.ACCEPTED:
                    result.uncertain_accepted += 1
                case State.DEAD:
                    result.uncertain_failed += 1
                case State.HELD:
                    result.uncertain_held += 1
                case State.RETRYABLE:
                    retry.append((change.key, by_key[change.key].channel,
                                  change.next_attempt_at or now, by_key[change.key].lane,
                                  by_key[change.key].group_key))
        if retry:
            await publish(self.transport, retry, now=now)
        result.uncertain_retried = len(retry)

    def _resend_at(self, intent: Intent, now: float) -> float:
        """When a resend is due: at once after a lease a crash ended (nothing failed),
        after the backoff of the failures so far otherwise (an uncertain answer is one;
        once they spend the budget the worker sends no more, ``Worker._instead_of_send``)."""
        if not intent.failures:
            return now
        return now + retry_delay(intent.failures, self.retry, self.rng)

    async def _lookups(self, intents: Sequence[Intent], hints: Mapping[str, LookupHint]
                       ) -> list[Lookup]:
        """Ask each intent's provider by key (with the recipient and send window where
        the provider needs them), a few at a time; a lookup that raises, or does not
        answer within the channel's send deadline, is unknown (asked again later), never
        not-found. The deadline matters beyond the lookup: this pass also ends the
        leases of gone workers, and a provider whose lookups hang must not stop that."""
        gate = asyncio.Semaphore(self.config.lookups_in_flight)

        async def one(intent: Intent) -> Lookup:
            provider = self.providers.get(intent.channel)
            if provider is None:
                return Lookup.of_unknown("no provider for the channel here")
            limit = self.config.send_deadline_for(intent.channel)
            async with gate:
                deadline = asyncio.timeout(limit)
                try:
                    async with deadline:
                        if getattr(provider, "lookup_needs_hint", False):
                            found: object = await cast(Any, provider).lookup(
                                intent.key, hints[intent.key])
                        else:
                            found = await provider.lookup(intent.key)
                    if not isinstance(found, Lookup):
                        # A plug-in's wrong answer is this key's "unknown", never a
                        # failure of the pass that settles every channel's sends.
                        return Lookup.of_unknown(f"the lookup answered "
                                                 f"{type(found).__name__}, not a Lookup")
                    return found
                except asyncio.CancelledError as exc:
                    if _cancelling():
                        raise  # this pass is being cancelled
                    return Lookup.of_unknown(describe(exc))
                except TimeoutError as exc:
                    if not deadline.expired():
                        return Lookup.of_unknown(describe(exc))
                    return Lookup.of_unknown(f"no answer to the lookup within {limit:g} s")
                except Exception as exc:  # any failure of the lookup means "ask later"
                    return Lookup.of_unknown(describe(exc))

        return list(await asyncio.gather(*(one(i) for i in intents)))

    async def _count_awaiting(self, now: float) -> int:
        """Held intents past their channel's hold_s: reported, never acted on."""
        count = 0
        for channel in sorted(self.policies):
            policy = self.policies[channel]
            held = await self.store.intent_find(
                states=[State.HELD], channel=channel, updated_before=now - policy.hold_s,
                limit=self.config.limit)
            count += sum(1 for i in held if awaiting_operator(i, policy, now))
        return count


def _cancelling() -> bool:
    """Whether the running task is being cancelled (a ``CancelledError`` that a plug-in
    raised of its own is no cancellation of ours)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
