"""Recording normalized provider events in the store, framework-free.

A provider event joins its intent's timeline beside ``accepted`` (as
``provider_delivered``, ``provider_bounced``, …) once per (provider, message id,
type), and moves the intent on as ``tidings.core.states.report_move`` says: accepted ->
delivered -> bounced or complained, never out of another state, and a repeat moves
nothing. In the same transaction, a hard bounce or a complaint suppresses the intent's
address, and soft bounces count toward the threshold (``tidings.core.suppression``).
A message id that is no intent's receipt is not an error: the event is kept as
orphaned, for an operator to find and for ``adopt_orphans`` to attach once the receipt
is stored (a webhook can beat the worker's commit of the acceptance by milliseconds).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tidings.core.suppression import SuppressionRules
from tidings.stores.base import ProviderEvent, RecordResult, WebhookRecords

log = logging.getLogger("tidings.webhooks")

#: How far back ``adopt_orphans`` looks by default: a webhook that beats the worker's
#: commit does so by seconds; an older orphan is another system's message.
ADOPT_WINDOW_S = 3600.0
#: Message ids named in one log line at most.
_LOGGED_ORPHANS = 5


async def record_events(store: WebhookRecords, events: Sequence[ProviderEvent],
                        now: float, *, rules: SuppressionRules | None = None
                        ) -> RecordResult:
    """Record ``events`` in one store transaction: new ones on their intent's timeline
    or orphaned, repeats as duplicates (no-ops); hard bounces, complaints and enough
    soft bounces suppress their address (``rules``)."""
    if not events:
        return RecordResult()
    result = await store.provider_events_record(events, now=now, rules=rules)
    if result.orphaned:
        # Message ids are the provider's identifiers, not personal data: an operator
        # searches the provider's console with them.
        ids = sorted({e.message_id for e in events})
        log.info("provider events without an intent kept as orphaned: provider=%s "
                 "orphaned=%d of a batch of %d message ids, first: %s", events[0].provider,
                 result.orphaned, len(ids), ",".join(ids[:_LOGGED_ORPHANS]))
    return result


async def adopt_orphans(store: WebhookRecords, now: float, *, window_s: float = ADOPT_WINDOW_S,
                        limit: int = 1000, rules: SuppressionRules | None = None) -> int:
    """Attach orphans of the last ``window_s`` whose message id has become a receipt
    (moving and suppressing as on arrival); return how many (a sweep for the
    reconciler)."""
    return await store.provider_events_adopt(since=now - window_s, limit=limit, now=now,
                                             rules=rules)
