"""The reconciler: a periodic, idempotent sweep that repairs what crashes leave behind.

1. Claimed intents whose lease expired become uncertain (resolved like any other
   uncertain send) or, where the provider has no lookup, retryable.
2. Selected intents whose publisher died are published again (the relay).
3. Enqueued or retryable intents whose message vanished are published again.
4. Uncertain intents are resolved: accepted if the provider's lookup finds the key,
   else retryable and republished, to be retried under the same idempotency key.

Every action leaves an audit event. Running it twice, or in two processes at once,
is safe: every change is a compare-and-set.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidings.model import Event
from tidings.providers.base import Provider
from tidings.relay import RelayConfig, publish, relay_pass
from tidings.states import State
from tidings.stores.base import Change, Store
from tidings.transports.base import Transport
from tidings.webhooks.record import adopt_orphans

log = logging.getLogger("tidings.reconciler")


@dataclass(frozen=True, kw_only=True)
class ReconcilerConfig:
    lost_after_s: float = 60.0
    uncertain_after_s: float = 1.0
    limit: int = 2000
    relay: RelayConfig = field(default_factory=RelayConfig)


@dataclass(kw_only=True)
class ReconcileResult:
    leases_expired: int = 0
    republished_stuck: int = 0
    republished_lost: int = 0
    uncertain_accepted: int = 0
    uncertain_retried: int = 0
    orphans_adopted: int = 0

    def total(self) -> int:
        return (self.leases_expired + self.republished_stuck + self.republished_lost
                + self.uncertain_accepted + self.uncertain_retried + self.orphans_adopted)


class Reconciler:
    def __init__(self, *, store: Store, transport: Transport, providers: Mapping[str, Provider],
                 config: ReconcilerConfig | None = None, worker_id: str = "reconciler") -> None:
        self.store = store
        self.transport = transport
        self.providers = providers
        self.config = config or ReconcilerConfig()
        self.worker_id = worker_id

    async def run_pass(self, *, now: float, paused_channels: Sequence[str] = ()
                       ) -> ReconcileResult:
        result = ReconcileResult()
        result.leases_expired = await self._expire_leases(now)
        result.republished_stuck = await relay_pass(
            self.store, self.transport, now=now, config=self.config.relay,
            paused_channels=paused_channels)
        result.republished_lost = await self._republish_lost(now)
        accepted, retried = await self._resolve_uncertain(now)
        result.uncertain_accepted, result.uncertain_retried = accepted, retried
        # A provider's webhook can beat the worker's commit of "accepted": attach it now.
        result.orphans_adopted = await adopt_orphans(self.store, now, limit=self.config.limit)
        for action, count in result.__dict__.items():
            if count:
                log.info("reconciled", extra={"action": action, "count": count,
                                              "worker": self.worker_id})
        return result

    async def _expire_leases(self, now: float) -> int:
        """Expired leases: the holder may have sent before it died. Where the provider
        can be asked, the intent becomes uncertain and is resolved by lookup, so a
        send that did happen is never repeated; elsewhere it is retried under the
        same idempotency key."""
        expired = await self.store.intent_find(
            states=[State.CLAIMED], lease_expired_at=now, limit=self.config.limit)
        changes = []
        for i in expired:
            provider = self.providers.get(i.channel)
            ask = provider is not None and provider.supports_lookup
            changes.append(Change(
                key=i.key, from_state=State.CLAIMED,
                to_state=State.UNCERTAIN if ask else State.RETRYABLE,
                event="lease_expired", lease_token=i.lease_token, lease_expired_by=now,
                next_attempt_at=None if ask else now, worker=self.worker_id,
                reason=f"lease of {i.lease_owner} expired at {i.lease_expires_at or 0:.3f}"))
        return len(await self.store.intent_apply_many(changes, now=now)) if changes else 0

    async def _republish_lost(self, now: float) -> int:
        stale = await self.store.intent_find(
            states=[State.ENQUEUED, State.RETRYABLE], updated_before=now - self.config.lost_after_s,
            limit=self.config.limit)
        by_channel: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for intent in stale:
            due = intent.next_attempt_at if intent.state == State.RETRYABLE else intent.due_at
            by_channel[intent.channel].append((intent.key, due or now))
        count = 0
        events: list[Event] = []
        for channel, items in by_channel.items():
            present = await self.transport.contains(channel, [k for k, _ in items])
            lost = [(k, channel, due) for k, due in items if k not in present]
            if not lost:
                continue
            count += await publish(self.transport, lost, now=now)
            events.extend(Event(key=k, channel=channel, type="republished", at=now,
                                worker=self.worker_id, detail="message missing from the queue")
                          for k, _, _ in lost)
        if events:
            await self.store.event_append_many(events)
        return count

    async def _resolve_uncertain(self, now: float) -> tuple[int, int]:
        pending = await self.store.intent_find(
            states=[State.UNCERTAIN], updated_before=now - self.config.uncertain_after_s,
            limit=self.config.limit)
        changes: list[Change] = []
        retry: list[tuple[str, str, float]] = []
        for intent in pending:
            provider = self.providers.get(intent.channel)
            if provider is not None and provider.supports_lookup:
                found = await provider.lookup(intent.key)
                if found.found:
                    changes.append(Change(
                        key=intent.key, from_state=State.UNCERTAIN, to_state=State.ACCEPTED,
                        event="resolved_accepted", receipt=found.receipt, worker=self.worker_id,
                        lease_token=intent.lease_token,
                        reason="provider lookup found the key accepted"))
                    continue
                reason = "provider lookup did not find the key; retry under the same key"
            else:
                reason = "provider has no lookup; retry under the same idempotency key"
            # The token read with the intent: another reconciler's retry and a new send
            # may have made it uncertain again since, and this lookup answered for the
            # send before that one (a stale "not found" would send it a third time).
            changes.append(Change(
                key=intent.key, from_state=State.UNCERTAIN, to_state=State.RETRYABLE,
                event="resolved_retry", next_attempt_at=now, worker=self.worker_id,
                lease_token=intent.lease_token, reason=reason))
            retry.append((intent.key, intent.channel, now))
        applied = set(await self.store.intent_apply_many(changes, now=now)) if changes else set()
        again = [item for item in retry if item[0] in applied]
        if again:
            await publish(self.transport, again, now=now)
        accepted = sum(1 for c in changes if c.to_state == State.ACCEPTED and c.key in applied)
        return accepted, len(again)
