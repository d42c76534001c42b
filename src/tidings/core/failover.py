"""Failover: which of a channel's providers carries a send, and when a provider is out.

A channel may list providers in order: its ``provider`` first, then its ``fallbacks``.
A send moves to the next provider only on **proof that the provider did not accept
it**: an answer or a failure the adapter reports as ``Transient`` (the connection
refused, a DNS or TLS failure, a 5xx, credentials refused, the request never left).
Nothing else moves a send:

- ``Uncertain`` (the request left, no answer came) may have been accepted: it is
  settled by evidence (a lookup by key on every provider of the channel, webhook
  evidence, the channel's uncertain policy) and sent again only once no provider has
  it. A timeout is never a reason to fail over; that is how a failover sends twice.
- ``RateLimited`` pauses the channel, as without fallbacks: the quota is the
  provider's own word about when to come back. Unless the channel says to fail over on
  a pause longer than a bound (``CircuitRule.on_pause_over_s``): a 429 is a refusal too,
  so the next provider may carry the send, and the provider is out until its pause ends.
- ``Permanent`` is about the message (a bad address), and another provider would
  refuse it too.

Each provider has a circuit (``Circuit``): closed, it takes sends; ``failures_to_open``
proofs of non-acceptance within ``window_s`` open it, and for ``open_s`` no send is
tried on it (sends go straight to the next provider); then it is half-open: one send
at a time probes it, and a probe's acceptance closes it (traffic returns to it), a
probe's failure opens it for another ``open_s``. A circuit is a process's, and a process
also hears what the others said (``Circuit.heard``, through the store): a provider one
process took out is out for the others too, and back once one of them says so. A send
tries each provider at most once, in order, so a flapping provider never bounces one
send back and forth.

The arithmetic is here, with time passed in; ``tidings.delivery.failover`` applies it
around the providers' calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tidings.core.outcomes import Outcome, Transient


class CircuitState(StrEnum):
    CLOSED = "closed"
    """Takes sends."""
    OPEN = "open"
    """Out: no send is tried on it until ``open_s`` has passed."""
    HALF_OPEN = "half_open"
    """One send at a time probes it."""


@dataclass(frozen=True, kw_only=True)
class CircuitRule:
    """When a provider is taken out, and for how long."""

    failures_to_open: int = 3
    """Proofs of non-acceptance within ``window_s`` that open the circuit."""
    window_s: float = 10.0
    open_s: float = 15.0
    """How long an open circuit tries nothing before a probe (the bound on how late
    traffic returns to a provider that is back)."""
    on_pause_over_s: float | None = None
    """A 429 asking for a longer pause than this moves the send on (None: never)."""


def route_names(kinds: Sequence[str]) -> list[str]:
    """The names of a channel's providers, first to last: each its kind (``sendgrid``),
    numbered where the kind came before (``sandbox``, ``sandbox-2``)."""
    names: list[str] = []
    for kind in kinds:
        name = kind
        n = 1
        while name in names:
            n += 1
            name = f"{kind}-{n}"
        names.append(name)
    return names


def providers_key(channel: str) -> str:
    """Where the store keeps what the workers last said about each provider of
    ``channel`` being out or back (beside the channel's pacer state)."""
    return f"{channel}#providers"


def provider_said(state: dict[str, Any] | None, *, name: str, out: bool, at: float,
                  worker: str, reason: str) -> dict[str, Any]:
    """``state`` (kept under ``providers_key``) with what ``worker`` said about the
    provider ``name`` at ``at``: out (its circuit opened) or back (a probe answered)."""
    providers = dict((state or {}).get("providers") or {})
    providers[name] = {"out": out, "at": at, "worker": worker, "reason": reason}
    return {"providers": providers}


def proves_not_accepted(outcome: Outcome) -> bool:
    """Whether ``outcome`` proves the provider did not accept the message, so that
    another provider may carry it without a chance of sending it twice."""
    return isinstance(outcome, Transient)


class Circuit:
    """One provider's circuit in one process (see the module)."""

    def __init__(self, rule: CircuitRule) -> None:
        self.rule = rule
        self._failures: deque[float] = deque()
        self._open_until: float | None = None
        self._opened_at = float("-inf")
        self._probing = False
        self.opened = 0
        """Times the circuit opened (a failed probe included)."""

    def state(self, now: float) -> CircuitState:
        if self._open_until is None:
            return CircuitState.CLOSED
        return CircuitState.OPEN if now < self._open_until else CircuitState.HALF_OPEN

    def take(self, now: float) -> bool:
        """Whether a send may be tried on the provider now. In the half-open state the
        first caller takes the probe (and must report its outcome); the others go on to
        the next provider until it ends."""
        state = self.state(now)
        if state is CircuitState.CLOSED:
            return True
        if state is CircuitState.OPEN or self._probing:
            return False
        self._probing = True
        return True

    def failed(self, now: float) -> None:
        """A proof of non-acceptance: counted; a failed probe opens the circuit again."""
        if self._open_until is not None:
            self._open(now)
            return
        self._failures.append(now)
        while self._failures and self._failures[0] <= now - self.rule.window_s:
            self._failures.popleft()
        if len(self._failures) >= self.rule.failures_to_open:
            self._open(now)

    def answered(self, now: float) -> None:
        """The provider answered for the message itself (accepted it, refused the
        message, paced us, or the answer was lost after the request left): it is up. A
        probe's answer closes the circuit."""
        if self._open_until is not None and self._probing:
            self._open_until = None
            self._failures.clear()
        self._probing = False

    def heard(self, *, out: bool, at: float, now: float) -> bool:
        """Another process said at ``at`` that the provider went out (its circuit
        opened) or came back (a probe answered): a closed circuit takes the provider out
        until ``at + open_s`` (then probes it, as its own would), an open one closes
        when the provider came back after it opened. Returns whether the state changed.
        So one process's proof spares the others their own refusals."""
        if out:
            if self._open_until is not None or at + self.rule.open_s <= now:
                return False
            self._open_until = at + self.rule.open_s
            self._opened_at = at
            self._failures.clear()
            self._probing = False
            return True
        if self._open_until is None or at <= self._opened_at:
            return False
        self._open_until = None
        self._failures.clear()
        self._probing = False
        return True

    def paused(self, now: float, for_s: float) -> None:
        """The provider asked for a pause (a 429 with a Retry-After) longer than the
        channel waits for: out until it ends, then probed."""
        self._open_until = now + max(0.0, for_s)
        self._opened_at = now
        self._failures.clear()
        self._probing = False
        self.opened += 1

    def gave_up(self) -> None:
        """A probe taken and not tried (the send was cancelled first): free for another."""
        self._probing = False

    def _open(self, now: float) -> None:
        self._open_until = now + self.rule.open_s
        self._opened_at = now
        self._failures.clear()
        self._probing = False
        self.opened += 1
