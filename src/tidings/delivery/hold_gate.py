"""A worker's side of delivery holds: right after its claim, park what a hold covers.

Holding and releasing (the operator's side, and the sweep) are ``tidings.operate.holds``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from tidings.core.claims import Change, Claim, ClaimKind
from tidings.core.clock import Clock
from tidings.core.model import Intent, Received
from tidings.core.states import State
from tidings.stores.base import Hold, Ledger, Selections

#: The event a parked intent's expiry leaves (what status counts).
EXPIRED_WHILE_HELD = "expired_while_held"
#: How long a worker trusts the holds it read (a hold reaches every worker this soon).
GATE_TTL_S = 1.0


class HoldStore(Ledger, Selections, Protocol):
    """What holds reach: the holds and the selections they cover, and the ledger that
    parks, releases and expires."""


def covering(holds: Iterable[Hold], intent: Intent) -> Hold | None:
    """The first hold that covers ``intent``, if any (pure)."""
    names = {"channel": intent.channel, "campaign": intent.campaign,
             "occurrence": intent.occurrence}
    for hold in holds:
        if names.get(hold.scope) == hold.name:
            return hold
    return None


class HoldGate:
    """A worker's view of the holds: parks what they cover, right after the claim.

    The holds are read at most every ``ttl_s`` (one small read per batch at most), so a
    new hold reaches every worker within that time (what a worker claimed before it saw
    the hold is sent, as any send already under way), and read again before parking, so
    a release is seen at once. A park that still races a release is resumed by the
    holds sweep (``resume_orphans``)."""

    def __init__(self, store: HoldStore, clock: Clock, *, ttl_s: float = GATE_TTL_S) -> None:
        self.store = store
        self.clock = clock
        self.ttl_s = ttl_s
        self._holds: list[Hold] = []
        self._read_at: float | None = None

    async def holds(self, *, fresh: bool = False) -> list[Hold]:
        now = self.clock.now()
        if fresh or self._read_at is None or now - self._read_at >= self.ttl_s:
            self._holds = await self.store.hold_all()
            self._read_at = now
        return self._holds

    async def park(self, received: Sequence[Received], claims: Sequence[Claim], *,
                   worker: str, now: float) -> tuple[list[Received], list[Claim], list[str]]:
        """Park the claimed intents a hold covers, or expire those already stale (one
        transaction). Returns the rest of the batch, and the receipts to ack (the
        messages of the intents parked or expired)."""
        holds = await self.holds()
        if not holds:
            return list(received), list(claims), []
        if any(c.intent is not None and covering(holds, c.intent) is not None
               for c in claims):
            # About to park: read again, so a release is seen at once, not a TTL later.
            holds = await self.holds(fresh=True)
        parks: list[tuple[Change, Received]] = []
        rest_r: list[Received] = []
        rest_c: list[Claim] = []
        for item, claim in zip(received, claims, strict=True):
            intent = claim.intent
            found = None if claim.kind is not ClaimKind.CLAIMED or intent is None \
                else covering(holds, intent)
            if found is None:
                rest_r.append(item)
                rest_c.append(claim)
                continue
            held = f"{found.scope} {found.name} held by {found.held_by}"
            if intent is not None and intent.expires_at is not None and now >= intent.expires_at:
                # Stale before any worker saw it under the hold: expired while held too.
                change = Change(key=claim.key, from_state=State.CLAIMED,
                                to_state=State.EXPIRED, event=EXPIRED_WHILE_HELD,
                                lease_token=claim.token, worker=worker,
                                message_id=item.message_id,
                                reason=f"its freshness deadline passed while {held}")
            else:
                change = Change(key=claim.key, from_state=State.CLAIMED, to_state=State.PARKED,
                                event="parked", lease_token=claim.token, worker=worker,
                                message_id=item.message_id, reason=held)
            parks.append((change, item))
        if not parks:
            return rest_r, rest_c, []
        applied = set(await self.store.intent_apply_many([c for c, _ in parks], now=now))
        # A park that did not apply lost its lease meanwhile: its message is left to
        # come back (not acked), like any outcome recorded under a lost lease.
        return rest_r, rest_c, [item.receipt for change, item in parks if change.key in applied]
