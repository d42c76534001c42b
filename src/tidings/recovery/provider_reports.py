"""One webhook request, start to end: verify, then parse, then settle, then record.

The order is the guarantee: a request that fails verification is neither parsed nor
recorded (SignatureError, answered 401), and a malformed one records nothing
(InvalidInput naming the field, answered 422). Reports that name a delivery key settle
its uncertain or held send (``tidings.recovery.evidence``) before they are recorded.
Framework-free: the HTTP layer only reads the body and maps these errors to status
codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tidings.core.suppression import SuppressionRules
from tidings.recovery.evidence import settle_by_evidence
from tidings.stores.base import Ledger, WebhookRecords
from tidings.webhooks.parse import parse
from tidings.webhooks.record import record_events
from tidings.webhooks.verify import Verifier, WebhookRequest


class WebhookStore(Ledger, WebhookRecords, Protocol):
    """What a webhook request reaches: the ledger (to settle by evidence) and the
    provider events' records."""


@dataclass(frozen=True, kw_only=True)
class WebhookOutcome:
    """What one webhook request did. ``recorded`` joined a timeline, ``orphaned`` were
    kept without an intent, ``duplicates`` were seen before, ``ignored`` are reports
    tidings does not record (opens, clicks, "sent", …)."""

    provider: str
    recorded: int
    duplicates: int
    orphaned: int
    ignored: int
    ignored_kinds: tuple[str, ...] = ()
    settled: int = 0
    """Uncertain or held sends this request's evidence settled (accepted or failed)."""
    moved: int = 0
    """Recorded reports that moved their intent on (delivered, bounced, complained)."""
    suppressed: int = 0
    """Addresses these reports suppressed (hard bounces, complaints, soft bounces past
    the threshold)."""


async def receive(request: WebhookRequest, *, verifier: Verifier, store: WebhookStore,
                  now: float, rules: SuppressionRules | None = None) -> WebhookOutcome:
    """Verify ``request`` as ``verifier.provider``'s, parse it, record its events (and
    the suppressions they make, by ``rules``)."""
    verifier.verify(request)
    parsed = parse(verifier.provider, request.body, now=now, url=request.url)
    # Settled first: an accepted intent then holds the receipt its reports attach to.
    settled = await settle_by_evidence(store, parsed.evidence, now=now)
    result = await record_events(store, parsed.events, now, rules=rules)
    return WebhookOutcome(provider=verifier.provider, recorded=result.recorded,
                          duplicates=result.duplicates, orphaned=result.orphaned,
                          ignored=parsed.ignored, ignored_kinds=parsed.ignored_kinds,
                          settled=settled.accepted + settled.failed, moved=result.moved,
                          suppressed=result.suppressed)
