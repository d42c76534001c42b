"""A channel's providers in order, as one provider: a send moves on only when the
provider before proves it did not accept it (``tidings.core.failover``).

``FailoverProvider`` is what the worker and the reconciler of a channel with
``fallbacks`` talk to. A send goes to the first provider whose circuit takes it; an
answer that proves non-acceptance counts against that provider's circuit and the same
send goes on to the next, at once, under the same key (nothing reached the first). Any
other answer is the send's outcome, wherever it came from, naming the provider that
gave it (``Accepted.via``, or its reason), so the intent's events say which one carried
it; ``Failover`` counts what each carried and refused in this process. A provider going
out or coming back is told to the store (``report``), and what the other processes
told is read once a second (``hear``): one process's proof spares the others theirs.

Lookups ask every provider by key, first to last, and only a "not found" from every
one of them is "not found": whichever provider a send went to (a crash can cut a worker
off between its choice and its record), the key is found where it is, and a send one
provider may have accepted is never sent again on another. A provider whose lookup
fails leaves the answer "unknown", asked again later, as without fallbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.core.clock import Clock
from tidings.core.failover import Circuit, CircuitRule, CircuitState, proves_not_accepted
from tidings.core.model import SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    LookupHint,
    LookupStatus,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.delivery.pacing import Pacer
from tidings.providers.base import Provider, concurrent_sends

log = logging.getLogger("tidings.worker")

#: ``report(provider, out, at, reason)``: a provider went out (its circuit opened) or
#: came back (a probe answered).
Report = Callable[[str, bool, float, str], Awaitable[None]]
#: ``hear()``: what every process last reported (``tidings.core.failover.provider_said``).
Hear = Callable[[], Awaitable["dict[str, Any] | None"]]
#: How often a process reads what the others reported.
HEAR_EVERY_S = 1.0


@dataclass
class Route:
    """One provider of the channel, under the name its settings give it."""

    name: str
    provider: Provider
    circuit: Circuit
    carried: int = 0
    """Sends this provider answered for in this process."""
    refused: int = 0
    """Sends it proved it did not accept (each went on to the next provider)."""


@dataclass
class Failover:
    """What failover did in this process (for status and metrics)."""

    routes: list[Route] = field(default_factory=list)
    moved: int = 0
    """Sends carried by a provider after the first that was tried for them."""

    def circuits(self, now: float) -> dict[str, CircuitState]:
        return {r.name: r.circuit.state(now) for r in self.routes}


def _with_via(outcome: Outcome, via: str) -> Outcome:
    """``outcome`` with the provider that gave it named in its reason (an acceptance
    has no reason: its receipt is the provider's own)."""
    note = f" (via {via})"
    match outcome:
        case Accepted():
            return Accepted(receipt=outcome.receipt, request_id=outcome.request_id, via=via)
        case Transient(reason=reason):
            return Transient(reason=reason + note, request_id=outcome.request_id)
        case Uncertain(reason=reason):
            return Uncertain(reason=reason + note, request_id=outcome.request_id)
        case Permanent(reason=reason):
            return Permanent(reason=reason + note, request_id=outcome.request_id,
                             code=outcome.code)
        case RateLimited(reason=reason):
            return RateLimited(retry_after_s=outcome.retry_after_s,
                               request_id=outcome.request_id, reason=reason + note)
    return outcome


class FailoverProvider:
    """The channel's providers in order, behind one Provider (see the module)."""

    def __init__(self, routes: Sequence[tuple[str, Provider]], *, rule: CircuitRule,
                 clock: Clock, pacers: Mapping[str, Pacer] | None = None,
                 report: Report | None = None, hear: Hear | None = None) -> None:
        if len(routes) < 2:
            raise ValueError("failover needs at least two providers")
        # A provider with a quota of its own (``failover.quotas``) is paced by its own
        # pacer too, inside the channel's slot: the channel's quota is the first
        # provider's, and a fallback may allow less.
        self._pacers = dict(pacers or {})
        # Where a provider's going out and coming back is told (for status and metrics,
        # and for the other processes, which hear it at most a second later).
        self._report = report
        self._hear = hear
        self._next_hear = float("-inf")
        self.failover = Failover([Route(name, provider, Circuit(rule))
                                  for name, provider in routes])
        self._clock = clock
        providers = [p for _, p in routes]
        self.name = "+".join(name for name, _ in routes)
        # A lookup can say "not found" only if every provider can be asked.
        self.supports_lookup = all(getattr(p, "supports_lookup", False) for p in providers)
        self.lookup_needs_hint = any(getattr(p, "lookup_needs_hint", False)
                                     for p in providers)
        self.lookup_settle_s = max(float(getattr(p, "lookup_settle_s", 0.0) or 0.0)
                                   for p in providers)
        # A resend under the same key may reach another provider, which has never seen
        # the key: no provider's deduplication covers it.
        self.deduplicates = False
        limits = [n for n in (concurrent_sends(p) for p in providers) if n is not None]
        if limits:
            self.max_concurrent_sends = min(limits)

    @property
    def routes(self) -> list[Route]:
        return self.failover.routes

    async def send(self, request: SendRequest) -> Outcome:
        refusals: list[str] = []
        paced: Outcome | None = None  # a 429 moved on, answered if nobody else takes it
        now = self._clock.now()
        if self._hear is not None and now >= self._next_hear:
            self._next_hear = now + HEAR_EVERY_S  # one look a second, whoever sends
            await self._listen(now)
        for route in self.routes:
            if not route.circuit.take(now):
                continue
            try:
                outcome = await self._send_on(route, request)
            except BaseException:
                # Raised, not answered: the worker decides what it means (it may have
                # left); the circuit learns nothing from it.
                route.circuit.gave_up()
                raise
            now = self._clock.now()
            if proves_not_accepted(outcome):
                route.refused += 1
                opened = route.circuit.opened
                route.circuit.failed(now)
                reason = getattr(outcome, "reason", outcome)
                refusals.append(f"{route.name}: {reason}")
                if route.circuit.opened > opened:
                    log.warning("provider %s is out: no send is tried on it for %g s, then "
                                "one at a time probes it (last refusal: %s)", route.name,
                                route.circuit.rule.open_s, reason)
                    await self._tell(route.name, True, now, str(reason))
                continue
            bound = route.circuit.rule.on_pause_over_s
            if (isinstance(outcome, RateLimited) and bound is not None
                    and (outcome.retry_after_s or 0.0) > bound):
                # A 429 is a refusal too: the next provider may carry it, and this one
                # is out until its pause ends.
                pause = outcome.retry_after_s or 0.0
                route.circuit.paused(now, pause)
                route.refused += 1
                paced = paced or _with_via(outcome, route.name)
                refusals.append(f"{route.name}: {outcome.reason}")
                log.warning("provider %s is out: it asked for a pause of %g s, longer than "
                            "failover.on_pause_over_s (%g s)", route.name, pause, bound)
                await self._tell(route.name, True, now, f"{outcome.reason} for {pause:g} s")
                continue
            if isinstance(outcome, Uncertain):
                route.circuit.gave_up()  # neither up nor down: the answer was lost
            else:
                was = route.circuit.state(now)
                route.circuit.answered(now)
                if was is CircuitState.HALF_OPEN:
                    log.warning("provider %s is back: it answered a probe, and takes "
                                "sends again", route.name)
                    await self._tell(route.name, False, now, "answered a probe")
            route.carried += 1
            if route is not self.routes[0]:
                self.failover.moved += 1
            return _with_via(outcome, route.name)
        if paced is not None:
            return paced  # nobody else took it: the channel pauses, as the provider asked
        if not refusals:
            return Transient(reason="every provider of the channel is out (circuits open: "
                                    + ", ".join(r.name for r in self.routes) + ")")
        return Transient(reason="; ".join(refusals))

    async def _listen(self, now: float) -> None:
        assert self._hear is not None
        try:
            state = await self._hear()
        except Exception:  # the send goes on with what this process knows
            log.debug("could not read what the other workers said of the providers",
                      exc_info=True)
            return
        said = (state or {}).get("providers") or {}
        for route in self.routes:
            word = said.get(route.name)
            if not isinstance(word, dict):
                continue
            out = bool(word.get("out"))
            if route.circuit.heard(out=out, at=float(word.get("at") or 0.0), now=now):
                log.info("provider %s is %s, as worker %s said", route.name,
                         "out" if out else "back", word.get("worker"))

    async def _tell(self, name: str, out: bool, at: float, reason: str) -> None:
        if self._report is None:
            return
        try:
            await self._report(name, out, at, reason)
        except Exception:  # the send's outcome matters more than the status line
            log.debug("could not record that provider %s is %s", name,
                      "out" if out else "back", exc_info=True)

    async def _send_on(self, route: Route, request: SendRequest) -> Outcome:
        pacer = self._pacers.get(route.name)
        if pacer is None:
            return await route.provider.send(request)
        await pacer.acquire()  # raises with no slot held
        try:
            return await route.provider.send(request)
        finally:
            await pacer.release()

    async def lookup(self, key: str, hint: LookupHint | None = None) -> Lookup:
        unknown: list[str] = []
        for route in self.routes:
            provider: Any = route.provider
            try:
                if getattr(provider, "lookup_needs_hint", False):
                    if hint is None:
                        unknown.append(f"{route.name}: its lookup needs the recipient")
                        continue
                    found = await provider.lookup(key, hint)
                else:
                    found = await provider.lookup(key)
            except Exception as exc:  # a lookup that fails is unknown, never not-found
                unknown.append(f"{route.name}: {type(exc).__name__}: {exc}")
                continue
            if not isinstance(found, Lookup):
                unknown.append(f"{route.name}: answered {type(found).__name__}")
                continue
            if found.status in (LookupStatus.ACCEPTED, LookupStatus.FAILED):
                detail = f"{found.detail} (via {route.name})" if found.detail else \
                    f"via {route.name}"
                return Lookup(found=True, receipt=found.receipt, failed=found.failed,
                              detail=detail)
            if found.status is LookupStatus.UNKNOWN:
                unknown.append(f"{route.name}: {found.detail}")
        if unknown:
            return Lookup.of_unknown("; ".join(unknown))
        return Lookup.of_not_found(f"not found on {self.name}")

    async def close(self) -> None:
        for route in self.routes:
            await route.provider.close()

