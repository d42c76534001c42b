"""Webhook evidence settles uncertain sends: a report that names our key is proof.

A report whose key belongs to an uncertain or held intent settles it at once, by the
core's rule (``tidings.delivery.uncertain.on_evidence``): accepted, with the provider's message
id as receipt (so the report itself then joins the timeline instead of being
orphaned), or dead when the provider says it failed. A report that arrives while the
send is still in flight (the webhook beat the worker's timeout) is kept on the
intent's timeline as ``provider_evidence``; the reconciler reads it when the intent
turns uncertain (``early_evidence``). Evidence for an intent already settled changes
nothing. Every change is guarded, so a webhook and a reconciler (or an operator) at
the same moment settle an intent once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidings.core.model import Event, Intent
from tidings.core.states import UNSETTLED, State
from tidings.delivery.uncertain import Verdict, on_evidence
from tidings.stores.base import Change, Ledger

if TYPE_CHECKING:  # the parsers (and their verifiers) are the webhook route's imports
    from tidings.webhooks.parse import Evidence

#: The timeline event of evidence that came while the send was in flight.
EARLY = "provider_evidence"
#: Unsettled intents searched for a key given only by its SHA-256 (Postmark, long keys).
HASHED_SEARCH_LIMIT = 10_000


@dataclass(frozen=True, kw_only=True)
class Settled:
    """What a batch of evidence did: ``accepted`` / ``failed`` settled an unsettled
    intent, ``early`` were kept for one still in flight."""

    accepted: int = 0
    failed: int = 0
    early: int = 0


def _verdict(item: Evidence) -> Verdict:
    return on_evidence(accepted=item.accepted, provider=item.provider,
                       message_id=item.message_id, detail=item.detail)


async def _intents(store: Ledger, evidence: Sequence[Evidence]
                   ) -> list[tuple[Evidence, Intent]]:
    found: list[tuple[Evidence, Intent]] = []
    hashed = [e for e in evidence if e.key is None and e.key_sha256]
    by_digest: dict[str, Intent] = {}
    if hashed:
        for unsettled in await store.intent_find(states=sorted(UNSETTLED),
                                                 limit=HASHED_SEARCH_LIMIT):
            by_digest[hashlib.sha256(unsettled.key.encode()).hexdigest()] = unsettled
    for item in evidence:
        intent: Intent | None = (await store.intent_get(item.key) if item.key is not None
                                 else by_digest.get(item.key_sha256 or ""))
        if intent is not None:
            found.append((item, intent))
    return found


async def settle_by_evidence(store: Ledger, evidence: Sequence[Evidence], *,
                             now: float) -> Settled:
    """Settle the uncertain and held intents ``evidence`` names; keep evidence for
    intents still in flight on their timeline."""
    if not evidence:
        return Settled()
    changes: list[Change] = []
    early: list[Event] = []
    seen: set[str] = set()
    for item, intent in await _intents(store, evidence):
        if intent.key in seen:
            continue  # the first report of a batch settles it
        verdict = _verdict(item)
        assert verdict.to is not None
        if intent.state in UNSETTLED:
            seen.add(intent.key)
            changes.append(Change(
                key=intent.key, from_state=intent.state, to_state=verdict.to,
                event=verdict.event, reason=verdict.reason, receipt=verdict.receipt,
                worker=f"webhook:{item.provider}"))
        elif intent.state is State.CLAIMED:
            seen.add(intent.key)
            early.append(Event(key=intent.key, channel=intent.channel, type=EARLY, at=now,
                               state=verdict.to.value, worker=f"webhook:{item.provider}",
                               message_id=item.message_id, detail=verdict.reason))
    applied = set(await store.intent_apply_many(changes, now=now)) if changes else set()
    if early:
        await store.event_append_many(early)
    done = [c for c in changes if c.key in applied]
    return Settled(accepted=sum(1 for c in done if c.to_state is State.ACCEPTED),
                   failed=sum(1 for c in done if c.to_state is State.DEAD),
                   early=len(early))


def early_evidence(events: Sequence[Event]) -> Verdict | None:
    """The verdict of the first evidence kept while the send was in flight, if any."""
    for event in events:
        if event.type == EARLY and event.state in (State.ACCEPTED.value, State.DEAD.value):
            accepted = event.state == State.ACCEPTED.value
            verdict = on_evidence(accepted=accepted, provider=(event.worker or "webhook")
                                  .removeprefix("webhook:"),
                                  message_id=event.message_id, detail=None)
            return Verdict(to=verdict.to, event=verdict.event,
                           reason=event.detail or verdict.reason, receipt=verdict.receipt)
    return None
