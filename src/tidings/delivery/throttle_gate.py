"""A worker's side of per-recipient throttles: after the send-time gate, before pacing.

For each send the gate let through, the rule it is counted under
(``tidings.core.throttle.Rules.rule_for``) asks the store for a reservation in the
current window, the whole batch in one transaction (``Throttles.throttle_reserve``);
what the store refuses becomes the rule's ``Throttled`` outcome (``throttled``, or
deferred to the next window). A send that surely did not happen hands its reservation
back once its outcome is committed (``release``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tidings.core.model import Intent
from tidings.core.throttle import Ask, Rules, Throttled, ask, refused
from tidings.stores.base import Throttles


class ThrottleGate:
    """Reserves sends under a channel's throttles and hands back those not made."""

    def __init__(self, store: Throttles, rules: Rules) -> None:
        self.store = store
        self.rules = rules

    async def reserve(self, intents: Sequence[Intent], *, now: float
                      ) -> list[Throttled | None]:
        """One answer per intent, in order: None when it may be sent (no rule counts
        it, or its reservation was granted), its ``Throttled`` outcome otherwise."""
        asks: list[tuple[int, Ask]] = []
        for i, intent in enumerate(intents):
            rule = self.rules.rule_for(intent.channel, intent.campaign)
            if rule is not None:
                asks.append((i, ask(rule, key=intent.key, recipient=intent.recipient_id,
                                    now=now)))
        answers: list[Throttled | None] = [None] * len(intents)
        if not asks:
            return answers
        granted = await self.store.throttle_reserve([a for _, a in asks])
        for (i, asked), ok in zip(asks, granted, strict=True):
            if not ok:
                intent = intents[i]
                rule = self.rules.rule_for(intent.channel, intent.campaign)
                assert rule is not None
                answers[i] = refused(rule, asked)
        return answers

    def counts(self, intent: Intent) -> bool:
        """Whether a rule counts sends of ``intent`` (so it may hold a reservation)."""
        return self.rules.rule_for(intent.channel, intent.campaign) is not None

    async def release(self, keys: Sequence[str]) -> int:
        """Hand back the reservations of sends that surely did not happen."""
        return await self.store.throttle_release(keys) if keys else 0
