"""What settles an uncertain send: the per-channel policy and its pure deciders.

A send is uncertain when the request may have reached the provider but no answer came
back (a timeout after it left, a connection dropped mid-reply, a worker that died
holding its lease). Evidence settles it, never hope. Each channel has a policy
(``channels.<name>.uncertain``):

=========  ====================================================================
policy     what the reconciler does with an uncertain intent
=========  ====================================================================
lookup     asks the provider by key (the default where the adapter has a lookup):
           found accepted → accepted; found failed → dead; not found, once the send
           is older than ``lookup_settle_s`` → retryable, resent under the same key;
           unknown (the lookup itself failed) → asked again next pass, and still
           unknown after ``hold_s`` → held. Unknown is never read as not found.
hold       held at once (the default where there is no lookup): the intent waits for
           a webhook naming its key and, past ``hold_s``, for an operator
resend     retryable, resent under the same key: at-least-once, an explicit choice.
           Where the provider deduplicates within a known window, only inside it;
           past the window → held
=========  ====================================================================

A held intent is never resent on its own. A provider webhook naming the key settles
an uncertain or held intent (``on_evidence``): a report that the provider took the
message (processed, sent, delivered, bounced, complained) → accepted, a report that it
failed → dead. An operator settles one (``on_operator``): accepted, resend or failed,
each an audit event naming who decided. Dead is terminal: its reason says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.model import Event, Intent
from tidings.core.outcomes import Lookup, LookupHint, LookupStatus
from tidings.core.states import State


class Policy(StrEnum):
    LOOKUP = "lookup"
    HOLD = "hold"
    RESEND = "resend"


class OperatorDecision(StrEnum):
    """What an operator may decide for an unsettled intent."""

    ACCEPTED = "accepted"
    """The provider did take it (seen in its console, or the recipient has it)."""
    RESEND = "resend"
    """Send it again under the same key: the operator accepts the risk of a copy."""
    FAILED = "failed"
    """It was not delivered and must not be sent again: dead (terminal)."""


@dataclass(frozen=True, kw_only=True)
class ProviderTraits:
    """What an adapter says of itself: facts about the provider, not rules."""

    lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None
    """How long the provider deduplicates on our key; None: for as long as it keeps it."""
    lookup_settle_s: float = 0.0
    """How long after a send the provider's read API is trusted to show it."""


def traits_of(provider: Any) -> ProviderTraits:
    """The traits an adapter declares (``supports_lookup``, ``deduplicates``,
    ``dedupe_window_s``, ``lookup_settle_s``); absent ones take the safe default."""
    return ProviderTraits(
        lookup=bool(getattr(provider, "supports_lookup", False)),
        deduplicates=bool(getattr(provider, "deduplicates", False)),
        dedupe_window_s=getattr(provider, "dedupe_window_s", None),
        lookup_settle_s=float(getattr(provider, "lookup_settle_s", 0.0) or 0.0))


@dataclass(frozen=True, kw_only=True)
class UncertainPolicy:
    """One channel's policy, with the provider facts it needs."""

    mode: Policy
    hold_s: float = 3600.0
    deduplicates: bool = False
    dedupe_window_s: float | None = None
    lookup_settle_s: float = 0.0
    chosen: bool = False
    """Set in settings (True) or the default for the provider (False)."""

    def describe(self) -> dict[str, Any]:
        """The policy as ``status`` and ``plan`` show it."""
        row: dict[str, Any] = {"policy": self.mode.value, "default": not self.chosen,
                               "hold_s": self.hold_s}
        if self.mode is Policy.LOOKUP:
            row["lookup_settle_s"] = self.lookup_settle_s
        if self.mode is Policy.RESEND:
            row["deduplicates"] = self.deduplicates
            row["dedupe_window_s"] = self.dedupe_window_s
        return row


def policy_for(channel: str, provider: Any, *, mode: str | None = None, hold_s: float = 3600.0,
               dedupe_window_s: float | None = None,
               lookup_settle_s: float | None = None) -> UncertainPolicy:
    """The policy of ``channel`` from its settings and its provider; a choice the
    provider cannot honour is a ConfigurationError naming the field."""
    traits = traits_of(provider)
    prefix = f"channels.{channel}"
    chosen = Policy(mode) if mode is not None else (
        Policy.LOOKUP if traits.lookup else Policy.HOLD)
    name = getattr(provider, "name", type(provider).__name__)
    if chosen is Policy.LOOKUP and not traits.lookup:
        raise ConfigurationError(f"{prefix}.uncertain",
                                 f"'lookup' needs a provider that can be asked by key; "
                                 f"{name} cannot: use 'hold' (or 'resend', at-least-once)")
    if dedupe_window_s is not None:
        if chosen is not Policy.RESEND:
            raise ConfigurationError(f"{prefix}.dedupe_window_s",
                                     "applies only with uncertain = 'resend'")
        if not traits.deduplicates:
            raise ConfigurationError(f"{prefix}.dedupe_window_s",
                                     f"{name} does not deduplicate on our key: there is no "
                                     "window to resend inside")
    if lookup_settle_s is not None and chosen is not Policy.LOOKUP:
        raise ConfigurationError(f"{prefix}.lookup_settle_s",
                                 "applies only with uncertain = 'lookup'")
    return UncertainPolicy(
        mode=chosen, hold_s=hold_s, deduplicates=traits.deduplicates,
        dedupe_window_s=dedupe_window_s if dedupe_window_s is not None
        else traits.dedupe_window_s,
        lookup_settle_s=lookup_settle_s if lookup_settle_s is not None
        else traits.lookup_settle_s,
        chosen=mode is not None)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Where an unsettled intent goes, and the audit event that says why; ``to`` None
    leaves it where it is (ask again later)."""

    to: State | None
    event: str
    reason: str
    receipt: str | None = None


#: The events a verdict leaves, by what settled the intent (the demo counts them).
BY_LOOKUP = frozenset({"resolved_accepted", "resolved_failed", "resolved_retry"})
BY_EVIDENCE = frozenset({"evidence_accepted", "evidence_failed"})
BY_OPERATOR = frozenset({"operator_accepted", "operator_resend", "operator_failed"})
RESENT = frozenset({"resolved_retry", "resolved_resend", "operator_resend"})
HELD_EVENT = "held"
_WAIT = None


def on_policy(intent: Intent, policy: UncertainPolicy, *, now: float, lease_s: float
              ) -> Verdict | None:
    """An uncertain intent under ``hold`` or ``resend`` (``lookup`` needs the answer:
    ``after_lookup``). ``lease_s`` bounds how long before ``updated_at`` the send may
    have started, so the dedupe window is judged from the earliest it could have."""
    if policy.mode is Policy.HOLD:
        return Verdict(to=State.HELD, event=HELD_EVENT,
                       reason="no lookup: held for webhook evidence, then an operator")
    if policy.mode is Policy.RESEND:
        age = now - intent.updated_at + lease_s
        if policy.deduplicates and policy.dedupe_window_s is not None \
                and age > policy.dedupe_window_s:
            return Verdict(to=State.HELD, event=HELD_EVENT,
                           reason=f"past the provider's dedupe window "
                                  f"({policy.dedupe_window_s:g} s): held, not resent")
        why = ("the provider deduplicates on the key" if policy.deduplicates
               else "policy resend: at-least-once")
        return Verdict(to=State.RETRYABLE, event="resolved_resend",
                       reason=f"resent under the same key ({why})")
    return _WAIT


def after_lookup(intent: Intent, policy: UncertainPolicy, found: Lookup, *,
                 now: float) -> Verdict | None:
    """An uncertain intent under ``lookup``, given the provider's answer."""
    age = now - intent.updated_at
    detail = f": {found.detail}" if found.detail else ""
    match found.status:
        case LookupStatus.ACCEPTED:
            return Verdict(to=State.ACCEPTED, event="resolved_accepted",
                           reason="provider lookup found the key accepted",
                           receipt=found.receipt)
        case LookupStatus.FAILED:
            return Verdict(to=State.DEAD, event="resolved_failed",
                           reason=f"provider lookup found the key failed{detail}",
                           receipt=found.receipt)
        case LookupStatus.NOT_FOUND:
            if age < policy.lookup_settle_s:
                return _WAIT  # the read API may not show the send yet
            return Verdict(to=State.RETRYABLE, event="resolved_retry",
                           reason="provider lookup did not find the key; retry under the "
                                  "same key")
    if age >= policy.hold_s:
        return Verdict(to=State.HELD, event=HELD_EVENT,
                       reason=f"lookups failed for {policy.hold_s:g} s{detail}: held for "
                              "webhook evidence, then an operator")
    return _WAIT


def on_evidence(*, accepted: bool, provider: str, message_id: str | None,
                detail: str | None) -> Verdict:
    """A provider's webhook named the key: it took the message, or it failed."""
    said = f"{provider}: {detail}" if detail else provider
    if accepted:
        return Verdict(to=State.ACCEPTED, event="evidence_accepted",
                       reason=f"webhook evidence ({said})", receipt=message_id)
    return Verdict(to=State.DEAD, event="evidence_failed",
                   reason=f"webhook reports it failed ({said})", receipt=message_id)


def on_operator(decision: OperatorDecision, *, who: str, note: str | None = None) -> Verdict:
    """An operator's decision for an unsettled intent."""
    reason = f"{decision.value} by {who}" + (f": {note}" if note else "")
    to = {OperatorDecision.ACCEPTED: State.ACCEPTED, OperatorDecision.RESEND: State.RETRYABLE,
          OperatorDecision.FAILED: State.DEAD}[decision]
    return Verdict(to=to, event=f"operator_{decision.value}", reason=reason)


#: Clock difference allowed between us and the provider when matching send times.
CLOCK_SKEW_S = 60.0


def hint_for(intent: Intent, events: Sequence[Event], *, lease_s: float) -> LookupHint:
    """Where a send of ``intent`` can be found without our key: its recipient, and the
    window from its last claim (the request left after it) to when it turned
    uncertain, widened by the clock skew allowed."""
    claims = [e.at for e in events if e.type == "claimed"]
    start = max(claims) if claims else intent.updated_at - lease_s
    return LookupHint(to=intent.address, sent_after=start - CLOCK_SKEW_S,
                      sent_before=intent.updated_at + CLOCK_SKEW_S)


def awaiting_operator(intent: Intent, policy: UncertainPolicy, now: float) -> bool:
    """A held intent whose wait for evidence is over: an operator decides now."""
    return intent.state is State.HELD and now - intent.updated_at >= policy.hold_s



_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_age(text: str, field: str = "older_than") -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h`` or ``1d``; InvalidInput naming
    ``field`` otherwise."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:]) if value else None
    number = value[:-1] if unit is not None else value
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise InvalidInput(field, f"{text!r} is not an age such as 90, 90s, 15m, 2h or 1d")
    return seconds
