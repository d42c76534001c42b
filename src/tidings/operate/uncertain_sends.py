"""Uncertain sends for an operator: list them, count them per channel, settle them by
an operator's decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.admission.relay import publish
from tidings.core.errors import InvalidInput
from tidings.core.keys import check_line
from tidings.core.model import Intent
from tidings.core.states import UNSETTLED, State
from tidings.core.surrogate import surrogate
from tidings.delivery.uncertain import (
    OperatorDecision,
    Policy,
    UncertainPolicy,
    awaiting_operator,
    on_operator,
)
from tidings.operate.readmodel import UncertainRow, UncertainSends
from tidings.operate.snapshot import age
from tidings.stores.base import Change, Store
from tidings.transports.base import Transport


def uncertain_view(intent: Intent, policy: UncertainPolicy, now: float) -> UncertainRow:
    """An unsettled intent for an operator: where it stands and since when."""
    return UncertainRow(key=intent.key, channel=intent.channel, state=intent.state,
                        since=intent.updated_at, age_s=round(age(now, intent.updated_at), 3),
                        attempts=intent.attempts, reason=intent.reason,
                        policy=policy.mode.value,
                        awaiting_operator=awaiting_operator(intent, policy, now),
                        recipient_surrogate=surrogate(intent.recipient_id))


def _policy(policies: Mapping[str, UncertainPolicy], channel: str) -> UncertainPolicy:
    return policies.get(channel) or UncertainPolicy(mode=Policy.HOLD)


async def uncertain_list(store: Store, policies: Mapping[str, UncertainPolicy], *, now: float,
                         channel: str | None = None, older_than_s: float | None = None,
                         limit: int = 100) -> list[UncertainRow]:
    """Uncertain and held intents (of ``channel``, unsettled for at least
    ``older_than_s``), oldest first."""
    found = await store.intent_find(
        states=sorted(UNSETTLED), channel=channel,
        updated_before=None if older_than_s is None else now - older_than_s, limit=limit)
    found.sort(key=lambda i: (i.updated_at, i.key))
    return [uncertain_view(i, _policy(policies, i.channel), now) for i in found]


async def uncertain_counts(store: Store, policies: Mapping[str, UncertainPolicy], *,
                           now: float, limit: int = 10_000) -> dict[str, UncertainSends]:
    """Per channel: its policy, and how many intents are uncertain, held, and held past
    ``hold_s`` (awaiting an operator; counted up to ``limit``)."""
    counts = await store.intent_counts()
    rows: dict[str, UncertainSends] = {}
    for channel in sorted(set(policies) | set(counts)):
        policy = _policy(policies, channel)
        by_state = counts.get(channel, {})
        held = by_state.get(State.HELD.value, 0)
        waiting = 0
        if held:
            old = await store.intent_find(states=[State.HELD], channel=channel,
                                          updated_before=now - policy.hold_s, limit=limit)
            waiting = sum(1 for i in old if awaiting_operator(i, policy, now))
        rows[channel] = UncertainSends(policy=policy,
                                       uncertain=by_state.get(State.UNCERTAIN.value, 0),
                                       held=held, awaiting_operator=waiting)
    return rows


@dataclass(frozen=True, kw_only=True)
class ResolveResult:
    """What an operator's decision did to each intent it named or selected."""

    decision: str
    by: str
    resolved: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


async def uncertain_resolve(store: Store, transport: Transport, *,
                            decision: OperatorDecision | str, who: str, now: float,
                            keys: Sequence[str] | None = None, channel: str | None = None,
                            older_than_s: float | None = None, note: str | None = None,
                            limit: int = 1000) -> ResolveResult:
    """Settle uncertain or held intents by an operator's decision, named by ``keys`` or
    selected by ``channel`` / ``older_than_s`` (not both ways at once).

    ``accepted`` records them accepted (no send); ``resend`` makes them retryable and
    publishes them (sent again under the same key); ``failed`` makes them dead
    (terminal, with the reason). Each is a guarded change with an audit event naming
    ``who``; one settled meanwhile (by a webhook, or another operator) is skipped.
    """
    try:
        chosen = OperatorDecision(decision)
    except ValueError:
        raise InvalidInput("as", f"must be one of: "
                           f"{', '.join(d.value for d in OperatorDecision)}") from None
    who = who.strip()
    if not who:
        raise InvalidInput("by", "must name who decides")
    check_line(who, "by", max_length=200)
    if note is not None:
        check_line(note, "note")
    if keys and (channel is not None or older_than_s is not None):
        raise InvalidInput("keys", "give keys, or a selection (channel, older than), not both")
    result = ResolveResult(decision=chosen.value, by=who)
    intents: list[Intent] = []
    if keys:
        for key in dict.fromkeys(keys):
            intent = await store.intent_get(key)
            if intent is None:
                result.skipped.append({"key": key, "why": "no intent has this key"})
            elif intent.state not in UNSETTLED:
                result.skipped.append({"key": key, "why": f"is {intent.state.value}, "
                                                          "not uncertain or held"})
            else:
                intents.append(intent)
    elif channel is None and older_than_s is None:
        raise InvalidInput("keys", "give keys, or a selection (channel, older than)")
    else:
        intents = await store.intent_find(
            states=sorted(UNSETTLED), channel=channel,
            updated_before=None if older_than_s is None else now - older_than_s, limit=limit)
    verdict = on_operator(chosen, who=who, note=note)
    assert verdict.to is not None
    resend = verdict.to is State.RETRYABLE
    # The lease token pins the decision to the send the operator saw: one resent and
    # uncertain again meanwhile is a new question, skipped as settled meanwhile.
    changes = [Change(key=i.key, from_state=i.state, to_state=verdict.to, event=verdict.event,
                      reason=verdict.reason, worker=f"operator:{who}",
                      lease_token=i.lease_token,
                      next_attempt_at=now if resend else None, reset_failures=resend)
               for i in intents]
    applied = set(await store.intent_apply_many(changes, now=now)) if changes else set()
    again = [(i.key, i.channel, now, i.lane, i.group_key) for i in intents
             if i.key in applied and resend]
    if again:
        await publish(transport, again, now=now)
    for intent in intents:
        if intent.key in applied:
            result.resolved.append({"key": intent.key, "channel": intent.channel,
                                    "state_before": intent.state.value,
                                    "state": verdict.to.value})
        else:
            result.skipped.append({"key": intent.key, "why": "settled meanwhile"})
    return result
