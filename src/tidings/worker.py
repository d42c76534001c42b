"""The channel worker: receive -> claim -> check -> pace -> send -> record -> ack.

One worker serves one channel. Every outcome and its audit event are committed
before the message is acked, so a crash at any point leads to a redelivery that
the ledger turns into either a retry (the lease expired) or a duplicate that is
acked with no provider call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from tidings.clock import Clock
from tidings.errors import MessageDecodeError
from tidings.model import Event, Message, Outcome, RateLimited, Received, SendRequest
from tidings.pacing.pacer import Pacer
from tidings.policy import RetryPolicy
from tidings.providers.base import Provider
from tidings.states import Decision, State, before_send, decide
from tidings.stores.base import Change, Claim, ClaimKind, Store
from tidings.surrogate import surrogate
from tidings.transports.base import Transport

log = logging.getLogger("tidings.worker")


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker takes work from its queue."""

    batch_size: int = 200
    visibility_s: float = 60.0
    lease_s: float = 30.0
    max_receives: int = 50
    idle_poll_s: float = 0.05
    max_idle_poll_s: float = 0.5
    shutdown_grace_s: float = 20.0


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
    by_kind: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class _Job:
    received: Received
    claim: Claim


class Worker:
    """Delivers one channel's messages; several may run per channel, in any process."""

    def __init__(
        self,
        *,
        channel: str,
        store: Store,
        transport: Transport,
        provider: Provider,
        pacer: Pacer,
        clock: Clock,
        policy: RetryPolicy,
        worker_id: str,
        config: WorkerConfig | None = None,
        rng: random.Random | None = None,
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
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Stop taking messages; work in hand is finished or released."""
        self._stopping.set()

    async def run(self) -> None:
        """Serve the channel until ``stop()``."""
        idle = self.config.idle_poll_s
        while not self._stopping.is_set():
            handled = await self.run_once()
            if handled:
                idle = self.config.idle_poll_s
                continue
            await self.pacer.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=idle)
            idle = min(idle * 2, self.config.max_idle_poll_s)
        await self.pacer.flush()

    async def run_once(self) -> int:
        """Receive and handle one batch; return how many messages it held."""
        batch = await self.transport.receive(
            self.channel, max_messages=self.config.batch_size,
            visibility_s=self.config.visibility_s, now=self.clock.now(),
        )
        if batch:
            await self.handle(batch)
        return len(batch)

    async def handle(self, batch: Sequence[Received]) -> None:
        """Handle received messages end to end (the unit a crash test cuts into)."""
        self.stats.received += len(batch)
        now = self.clock.now()
        acks: list[str] = []
        nacks: list[tuple[str, float]] = []
        dead: list[tuple[str, str]] = []
        keys: list[str] = []
        decoded: list[Received] = []
        for item in batch:
            try:
                keys.append(Message.decode(item.body).key)
                decoded.append(item)
            except MessageDecodeError as exc:
                self.stats.poison += 1
                dead.append((item.receipt, f"undecodable message: {exc}"))
        claims = await self.store.intent_claim_many(
            keys, owner=self.worker_id, lease_s=self.config.lease_s, now=now,
            message_ids=[r.message_id for r in decoded],
        ) if keys else []
        jobs: list[_Job] = []
        skipped: list[tuple[Change, Received]] = []
        for received, claim in zip(decoded, claims, strict=True):
            kind = claim.kind
            self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
            if kind in (ClaimKind.DONE, ClaimKind.HELD):
                self.stats.duplicates += kind == ClaimKind.DONE
                acks.append(received.receipt)
            elif kind in (ClaimKind.BUSY, ClaimKind.NOT_DUE):
                if received.receive_count > self.config.max_receives:
                    dead.append((received.receipt,
                                 f"received {received.receive_count} times without progress"))
                else:
                    nacks.append((received.receipt, max(0.0, (claim.retry_at or now) - now)))
            elif kind == ClaimKind.MISSING:
                self.stats.poison += 1
                dead.append((received.receipt, f"unknown intent key {claim.key!r}"))
            else:
                change = self._pre_send_change(received, claim, now)
                if change is None:
                    jobs.append(_Job(received=received, claim=claim))
                else:
                    skipped.append((change, received))
        if skipped:
            await self._commit(skipped, acks, nacks, dead)
        if jobs:
            await self._send_all(jobs, acks, nacks, dead)
        await self._finish(acks, nacks, dead)

    def _pre_send_change(self, received: Received, claim: Claim, now: float) -> Change | None:
        intent = claim.intent
        assert intent is not None and claim.token is not None
        if received.receive_count > self.config.max_receives:
            self.stats.poison += 1
            return Change(
                key=intent.key, from_state=State.CLAIMED, to_state=State.DEAD, event="dead",
                lease_token=claim.token, worker=self.worker_id, message_id=received.message_id,
                reason=f"poison: received {received.receive_count} times without completing",
            )
        instead = before_send(cancel_requested=intent.cancel_requested,
                              expires_at=intent.expires_at, now=now)
        if instead is None:
            return None
        self.stats.skipped += 1
        return Change(
            key=intent.key, from_state=State.CLAIMED, to_state=instead, event=instead.value,
            lease_token=claim.token, worker=self.worker_id, message_id=received.message_id,
            reason="cancel requested" if instead == State.CANCELLED else "expired before send",
        )

    async def _send_all(
        self, jobs: list[_Job], acks: list[str], nacks: list[tuple[str, float]],
        dead: list[tuple[str, str]],
    ) -> None:
        leases = {job.claim.key: job.claim.intent.lease_expires_at or 0.0
                  for job in jobs if job.claim.intent is not None}
        renewer = asyncio.create_task(self._renew(jobs, leases))
        try:
            results = await asyncio.gather(*(self._send_one(job, leases) for job in jobs))
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        now = self.clock.now()
        changes = [(self._change_for(job, result, now), job.received)
                   for job, result in zip(jobs, results, strict=True)]
        await self._commit(changes, acks, nacks, dead)

    async def _send_one(self, job: _Job, leases: dict[str, float]) -> Decision | None:
        """Pace and send one claimed intent; None means released unsent."""
        intent = job.claim.intent
        assert intent is not None
        if self._stopping.is_set():
            return None
        acquired = asyncio.ensure_future(self.pacer.acquire())
        stopping = asyncio.ensure_future(self._stopping.wait())
        done, _ = await asyncio.wait({acquired, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if acquired not in done:
            acquired.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquired
            return None
        try:
            if self.clock.now() >= leases.get(intent.key, 0.0):
                # Never send under a lease that may already belong to someone else.
                return None
            outcome = await self.provider.send(SendRequest(
                key=intent.key, channel=intent.channel, to=intent.address,
                template=intent.template, data=intent.data, recipient_id=intent.recipient_id,
            ))
        finally:
            await self.pacer.release()
        return await self._decide(intent.key, intent.failures, outcome)

    async def _decide(self, key: str, failures: int, outcome: Outcome) -> Decision:
        self.stats.sent += 1
        now = self.clock.now()
        streak = self.pacer.streak + 1 if isinstance(outcome, RateLimited) else 1
        decision = decide(outcome, failures=failures, policy=self.policy, now=now, rng=self.rng,
                          consecutive_rate_limits=streak)
        if decision.channel_pause_until is not None:
            self.stats.rate_limited += 1
            await self.pacer.pause(decision.channel_pause_until)
        elif decision.to == State.ACCEPTED:
            await self.pacer.succeeded()
        log.debug("sent", extra={"key": key, "outcome": decision.event})
        return decision

    def _change_for(self, job: _Job, decision: Decision | None, now: float) -> Change:
        claim = job.claim
        assert claim.token is not None
        if decision is None:
            self.stats.released += 1
            return Change(
                key=claim.key, from_state=State.CLAIMED, to_state=State.RETRYABLE,
                event="released", lease_token=claim.token, next_attempt_at=now,
                worker=self.worker_id, message_id=job.received.message_id,
                reason="released unsent (shutdown or lease ran out before the send)",
            )
        counter = {State.ACCEPTED: "accepted", State.RETRYABLE: "transient",
                   State.REJECTED: "rejected", State.DEAD: "dead", State.UNCERTAIN: "uncertain"}
        if decision.event != "rate_limited":
            name = counter[decision.to]
            setattr(self.stats, name, getattr(self.stats, name) + 1)
        return Change(
            key=claim.key, from_state=State.CLAIMED, to_state=decision.to, event=decision.event,
            lease_token=claim.token, reason=decision.reason,
            next_attempt_at=decision.next_attempt_at, receipt=decision.receipt,
            provider_request_id=decision.request_id, count_failure=decision.count_failure,
            worker=self.worker_id, message_id=job.received.message_id,
            detail=surrogate(claim.intent.recipient_id) if claim.intent else None,
        )

    async def _commit(
        self, changes: list[tuple[Change, Received]], acks: list[str],
        nacks: list[tuple[str, float]], dead: list[tuple[str, str]],
    ) -> None:
        """Record outcomes in one transaction, then sort messages into ack/nack/dead."""
        now = self.clock.now()
        applied = set(await self.store.intent_apply_many([c for c, _ in changes], now=now))
        lost: list[Event] = []
        for change, received in changes:
            receipt = received.receipt
            if change.key not in applied:
                # The lease moved on (expired and reclaimed): the new holder owns the
                # message now; let it come back rather than ack someone else's work.
                self.stats.lease_lost += 1
                nacks.append((receipt, 0.0))
                lost.append(Event(key=change.key, channel=self.channel, type="lease_lost",
                                  at=now, state=change.to_state.value, worker=self.worker_id,
                                  message_id=change.message_id,
                                  provider_request_id=change.provider_request_id,
                                  detail=f"outcome {change.event} not recorded: lease lost"))
            elif change.to_state == State.RETRYABLE:
                nacks.append((receipt, max(0.0, (change.next_attempt_at or now) - now)))
            elif change.to_state == State.DEAD:
                dead.append((receipt, change.reason or "dead"))
            else:
                acks.append(receipt)
        if lost:
            await self.store.event_append_many(lost)

    async def _finish(
        self, acks: list[str], nacks: list[tuple[str, float]], dead: list[tuple[str, str]]
    ) -> None:
        now = self.clock.now()
        if acks:
            await self.transport.ack(self.channel, acks)
        if nacks:
            await self.transport.nack(self.channel, nacks, now=now)
        if dead:
            await self.transport.dead_letter(self.channel, dead, now=now)

    async def _renew(self, jobs: list[_Job], leases: dict[str, float]) -> None:
        """Keep leases and message visibility alive while slow sends are in flight."""
        every = self.config.lease_s / 3
        while True:
            await self.clock.sleep(every)
            now = self.clock.now()
            held = [(j.claim.key, j.claim.token) for j in jobs if j.claim.token is not None]
            lost = set(await self.store.intent_renew_leases(
                [(k, t) for k, t in held if t is not None], owner=self.worker_id,
                lease_s=self.config.lease_s, now=now,
            ))
            for key, _ in held:
                # A lost lease reads as expired, so a send not yet started never starts.
                leases[key] = 0.0 if key in lost else now + self.config.lease_s
            await self.transport.extend(
                self.channel, [j.received.receipt for j in jobs],
                visibility_s=self.config.visibility_s, now=now,
            )
