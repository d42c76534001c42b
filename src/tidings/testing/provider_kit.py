"""The provider contract, as checks a plug-in author runs against an adapter.

A provider adapter is done when the worker can trust every answer it gives: an
acceptance carries the provider's receipt, the delivery key reaches the provider (as
its idempotency key wherever the API has one), each kind of trouble maps to its
outcome, no call raises (a raise strands a send: the worker can only record it as
uncertain), and a lookup, where offered, finds what was accepted.

The author supplies a ``ProviderCase``: the adapter pointed at a *side* they can cue
(a fake of their provider's API, served for real or behind ``httpx.MockTransport``)::

    class MyCase:
        to = "ada@example.com"
        needs_content = True            # the adapter sends rendered content
        secrets = ("my-api-key",)       # never in a reason or a repr
        scenarios = frozenset(Scenario) # what the side can be told to do
        def __init__(self): self.side = MyFakeApi(); self.clock = FakeClock(...)
        async def start(self, scenario): self.side.scenario = scenario; return MyProvider(...)
        async def close(self): ...

    async def test_my_provider_conforms():
        await assert_conforms(MyCase)

Each check starts from a new case (``make_case()``) and closes it after. A check that
needs a scenario names it (its ``scenario``), and is skipped, said so, for a case whose
``scenarios`` leave it out.

An adapter with a batch endpoint (``BatchProvider``) is held to the batch checks too:
each message of a request gets the outcome of its own item, in order, with the
provider's receipt for its own key; what is about the whole request (a 429, a refusal
to try later, a lost answer) is each message's outcome; a lost answer's messages are
each found by lookup where the adapter has one. Its side then answers the batch
endpoint on the same cues, one message per item. For any other adapter these checks
are skipped, said so.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from tidings.core.clock import Clock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    LookupHint,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.providers.base import BatchProvider, Provider

#: The delivery key every check sends.
KEY = "weekly-digest/2026-08-14/cust_1042/email/v3"
CONTENT = Content(subject="Your weekly digest", text="Three things happened.",
                  html="<p>Three things happened.</p>")
#: The Retry-After a side answers a rate-limited request with, in seconds.
RETRY_AFTER_S = 7


class Scenario(StrEnum):
    """What the provider side does with the next request."""

    ACCEPT = "accept"
    RATE_LIMITED_SECONDS = "rate_limited_seconds"
    """HTTP 429 with ``Retry-After: 7`` (RETRY_AFTER_S)."""
    RATE_LIMITED_DATE = "rate_limited_date"
    """HTTP 429 with ``Retry-After`` as an HTTP-date 7 s ahead."""
    TRY_LATER = "try_later"
    """A 5xx (or the protocol's "try again later")."""
    REFUSE = "refuse"
    """A permanent refusal of the recipient."""
    DROP_AFTER_SEND = "drop_after_send"
    """The request arrives; the connection drops before the answer."""
    ACCEPT_THEN_DROP = "accept_then_drop"
    """The request is accepted; the answer is lost."""
    HANG_AFTER_SEND = "hang_after_send"
    """The request arrives; no answer comes within the adapter's timeout."""
    UNREACHABLE = "unreachable"
    """Nothing listens where the adapter connects."""


@runtime_checkable
class ProviderSide(Protocol):
    """The provider's side of a case, as the checks read it."""

    has_retry_after: bool
    """The API answers 429 with Retry-After (SMTP does not)."""
    has_request_id: bool
    """The API answers with a request id of its own."""
    has_idempotency: bool
    """The API takes an idempotency key."""

    @property
    def keys_received(self) -> list[str]:
        """The delivery keys of the requests that reached it, in order."""
        ...

    @property
    def idempotency_keys(self) -> list[str]:
        """The idempotency keys it was sent, in order."""
        ...

    @property
    def request_ids(self) -> list[str]:
        """The request ids it answered with, in order."""
        ...

    def receipt_of(self, key: str) -> str | None:
        """The receipt (message id) it gave the message sent under ``key``."""
        ...


class ProviderCase(Protocol):
    """One adapter and the side it talks to (see the module)."""

    to: str
    needs_content: bool
    secrets: tuple[str, ...]
    side: ProviderSide
    clock: Clock

    async def start(self, scenario: Scenario) -> Provider:
        """Cue the side with ``scenario``; return an adapter pointed at it."""
        ...

    async def close(self) -> None: ...


class ContractBroken(AssertionError):
    """An adapter's answer the worker could not trust; the message says which and why."""


class NotApplicable(Exception):
    """The check is about something this adapter does not offer (a batch endpoint)."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    skipped: bool = False


Check = Callable[[ProviderCase], Awaitable[None]]


def request(case: ProviderCase, *, content: Content | None = CONTENT,
            key: str = KEY) -> SendRequest:
    return SendRequest(key=key, channel="email", to=case.to, template="digest",
                       data={"items": [1, 2]}, recipient_id="cust_1042", content=content)


#: The keys of the messages a batch check sends together.
BATCH_KEYS = tuple(f"{KEY}/{i}" for i in range(3))


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractBroken(message)


async def send(provider: Provider, case: ProviderCase, *,
               content: Content | None = CONTENT) -> Outcome:
    """``provider.send``, where a raise is itself a broken contract."""
    try:
        return await provider.send(request(case, content=content))
    except Exception as exc:
        raise ContractBroken(f"send raised {type(exc).__name__}: {exc}; an adapter answers "
                             "every send with an Outcome (Uncertain when the request may "
                             "have gone out)") from exc


def discreet(outcome: Outcome, case: ProviderCase) -> None:
    """A refusal says why, and never names the recipient or a credential."""
    expect(not isinstance(outcome, Accepted), f"expected a refusal, got {outcome!r}")
    reason = getattr(outcome, "reason", "")
    expect(bool(reason), f"{type(outcome).__name__} gives no reason")
    expect(case.to.lower() not in reason.lower() and case.to.lstrip("+") not in reason,
           f"the reason names the recipient: {reason!r}")
    for secret in case.secrets:
        expect(secret not in reason, "the reason shows a credential")


def kind(outcome: Outcome, wanted: type[Outcome]) -> None:
    expect(isinstance(outcome, wanted),
           f"expected {wanted.__name__}, got {type(outcome).__name__}: {outcome!r}")


async def lookup(provider: Provider, case: ProviderCase, key: str = KEY) -> Lookup:
    try:
        if getattr(provider, "lookup_needs_hint", False):
            now = case.clock.now()
            hint = LookupHint(to=case.to, sent_after=now - 600, sent_before=now + 600)
            answer: Lookup = await provider.lookup(key, hint)  # type: ignore[call-arg]
        else:
            answer = await provider.lookup(key)
    except Exception as exc:
        raise ContractBroken(f"lookup raised {type(exc).__name__}: {exc}; a failing lookup "
                             "answers 'unknown'") from exc
    expect(isinstance(answer, Lookup), f"lookup answered {answer!r}, not a Lookup")
    return answer


# ---------------------------------------------------------------- the checks


async def accepted_carries_the_receipt(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    outcome = await send(provider, case)
    kind(outcome, Accepted)
    assert isinstance(outcome, Accepted)
    expect(outcome.receipt == case.side.receipt_of(KEY),
           f"receipt {outcome.receipt!r} is not the provider's {case.side.receipt_of(KEY)!r}")
    wanted = case.side.request_ids[-1] if case.side.has_request_id else None
    expect(outcome.request_id == wanted,
           f"request id {outcome.request_id!r}, the provider answered {wanted!r}")


async def the_key_reaches_the_provider(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    await send(provider, case)
    expect(case.side.keys_received == [KEY],
           f"the provider saw keys {case.side.keys_received!r}, not [{KEY!r}]")
    if case.side.has_idempotency:
        expect(case.side.idempotency_keys == [KEY],
               "the delivery key is not sent as the idempotency key")


async def a_retry_sends_the_same_key(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    first, second = await send(provider, case), await send(provider, case)
    kind(first, Accepted)
    kind(second, Accepted)
    expect(case.side.keys_received == [KEY, KEY], "a resend did not carry the same key")
    if case.side.has_idempotency:
        assert isinstance(first, Accepted) and isinstance(second, Accepted)
        expect(second.receipt == first.receipt,
               "the provider deduplicates on the key, but a resend got a new receipt")


def _rate_limited(scenario: Scenario) -> Check:
    async def check(case: ProviderCase) -> None:
        provider = await case.start(scenario)
        outcome = await send(provider, case)
        kind(outcome, RateLimited)
        assert isinstance(outcome, RateLimited)
        wanted = RETRY_AFTER_S if case.side.has_retry_after else None
        expect(outcome.retry_after_s == wanted,
               f"retry_after_s {outcome.retry_after_s!r}, the provider said {wanted!r}")
        discreet(outcome, case)

    check.__name__ = f"{scenario.value}_is_rate_limited"
    check.scenario = scenario  # type: ignore[attr-defined]
    return check


def _maps_to(scenario: Scenario, wanted: type[Outcome], *, reached: bool | None) -> Check:
    async def check(case: ProviderCase) -> None:
        provider = await case.start(scenario)
        outcome = await send(provider, case)
        kind(outcome, wanted)
        discreet(outcome, case)
        if reached is not None:
            expect(case.side.keys_received == ([KEY] if reached else []),
                   f"the provider saw {case.side.keys_received!r}")

    check.__name__ = f"{scenario.value}_is_{wanted.__name__.lower()}"
    check.scenario = scenario  # type: ignore[attr-defined]
    return check


async def accept_then_drop_is_uncertain_and_found(case: ProviderCase) -> None:
    """The provider accepted the send and the answer was lost: the worker must not call
    that sent or failed, only uncertain; an adapter with a lookup then finds it
    accepted, with the receipt the provider gave it (the reconciler settles it so)."""
    provider = await case.start(Scenario.ACCEPT_THEN_DROP)
    outcome = await send(provider, case)
    kind(outcome, Uncertain)
    discreet(outcome, case)
    expect(case.side.keys_received == [KEY], f"the provider saw {case.side.keys_received!r}")
    if provider.supports_lookup:
        found = await lookup(provider, case)
        expect((found.found, found.receipt) == (True, case.side.receipt_of(KEY)),
               f"lookup of a send accepted with its answer lost answered {found!r}")


accept_then_drop_is_uncertain_and_found.scenario = (  # type: ignore[attr-defined]
    Scenario.ACCEPT_THEN_DROP)


async def without_rendered_content(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    outcome = await send(provider, case, content=None)
    if case.needs_content:
        expect(isinstance(outcome, Permanent),
               f"an adapter that needs content answered {outcome!r} without it")
        expect(case.side.keys_received == [], "it called the provider without content")
    else:
        kind(outcome, Accepted)


async def lookup_finds_what_was_accepted(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    outcome = await send(provider, case)
    kind(outcome, Accepted)
    assert isinstance(outcome, Accepted)
    if not provider.supports_lookup:
        try:
            await provider.lookup(KEY)
        except NotImplementedError:
            return
        except Exception as exc:
            raise ContractBroken(f"supports_lookup is False, but lookup raised "
                                 f"{type(exc).__name__}, not NotImplementedError") from exc
        raise ContractBroken("supports_lookup is False, but lookup answered")
    found = await lookup(provider, case)
    expect((found.found, found.receipt) == (True, outcome.receipt),
           f"lookup of an accepted key answered {found!r}")


async def close_twice(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    kind(await send(provider, case), Accepted)
    try:
        await provider.close()
        await provider.close()
    except Exception as exc:
        raise ContractBroken(f"a second close raised {type(exc).__name__}") from exc


async def no_credential_in_repr(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    shown = repr(provider) + str(getattr(provider, "__dict__", ""))
    for secret in case.secrets:
        expect(secret not in shown, "the adapter's repr or attributes show a credential")


async def declares_what_the_core_needs(case: ProviderCase) -> None:
    provider = await case.start(Scenario.ACCEPT)
    expect(isinstance(getattr(provider, "name", None), str), "no name: str")
    expect(isinstance(getattr(provider, "supports_lookup", None), bool),
           "no supports_lookup: bool")
    for method in ("send", "lookup", "close"):
        expect(inspect.iscoroutinefunction(getattr(provider, method, None)),
               f"{method} is not an async method")


async def _batch_provider(case: ProviderCase, scenario: Scenario) -> BatchProvider:
    provider = await case.start(scenario)
    if not isinstance(provider, BatchProvider):
        raise NotApplicable("not a BatchProvider")
    limit = provider.batch_max_messages
    expect(isinstance(limit, int) and limit >= 2,
           f"batch_max_messages is {limit!r}, not an int of at least 2")
    return provider


async def send_batch(provider: BatchProvider, case: ProviderCase) -> list[Outcome]:
    """``provider.send_batch`` of ``BATCH_KEYS``: a raise, or an answer of the wrong
    length, is itself a broken contract."""
    try:
        outcomes = await provider.send_batch([request(case, key=k) for k in BATCH_KEYS])
    except Exception as exc:
        raise ContractBroken(f"send_batch raised {type(exc).__name__}: {exc}; an adapter "
                             "answers every message with an Outcome") from exc
    expect(isinstance(outcomes, list) and len(outcomes) == len(BATCH_KEYS),
           f"send_batch of {len(BATCH_KEYS)} answered {outcomes!r}")
    return outcomes


async def a_batch_gives_each_message_its_own_receipt(case: ProviderCase) -> None:
    provider = await _batch_provider(case, Scenario.ACCEPT)
    outcomes = await send_batch(provider, case)
    for key, outcome in zip(BATCH_KEYS, outcomes, strict=True):
        kind(outcome, Accepted)
        assert isinstance(outcome, Accepted)
        expect(outcome.receipt == case.side.receipt_of(key),
               f"{key}: receipt {outcome.receipt!r}, the provider gave it "
               f"{case.side.receipt_of(key)!r}")
    expect(sorted(case.side.keys_received) == sorted(BATCH_KEYS),
           f"the provider saw keys {case.side.keys_received!r}")


def _batch_maps_to(scenario: Scenario, wanted: type[Outcome]) -> Check:
    async def check(case: ProviderCase) -> None:
        provider = await _batch_provider(case, scenario)
        for outcome in await send_batch(provider, case):
            kind(outcome, wanted)
            discreet(outcome, case)

    check.__name__ = f"a_batch_{scenario.value}_is_{wanted.__name__.lower()}_for_each"
    check.scenario = scenario  # type: ignore[attr-defined]
    return check


async def a_lost_batch_answer_is_uncertain_and_each_found(case: ProviderCase) -> None:
    """The provider accepted every message and the answer was lost: each is uncertain,
    and an adapter with a lookup finds each on its own key with its own receipt."""
    provider = await _batch_provider(case, Scenario.ACCEPT_THEN_DROP)
    for outcome in await send_batch(provider, case):
        kind(outcome, Uncertain)
        discreet(outcome, case)
    if provider_supports_lookup(provider):
        for key in BATCH_KEYS:
            found = await lookup(provider, case, key)  # type: ignore[arg-type]
            expect((found.found, found.receipt) == (True, case.side.receipt_of(key)),
                   f"lookup of {key}, accepted in a batch whose answer was lost, "
                   f"answered {found!r}")


a_lost_batch_answer_is_uncertain_and_each_found.scenario = (  # type: ignore[attr-defined]
    Scenario.ACCEPT_THEN_DROP)


def provider_supports_lookup(provider: object) -> bool:
    return bool(getattr(provider, "supports_lookup", False))


BATCH_CHECKS: tuple[Check, ...] = (
    a_batch_gives_each_message_its_own_receipt,
    _batch_maps_to(Scenario.RATE_LIMITED_SECONDS, RateLimited),
    _batch_maps_to(Scenario.TRY_LATER, Transient),
    _batch_maps_to(Scenario.REFUSE, Permanent),
    _batch_maps_to(Scenario.DROP_AFTER_SEND, Uncertain),
    a_lost_batch_answer_is_uncertain_and_each_found,
)


CHECKS: tuple[Check, ...] = (
    declares_what_the_core_needs,
    accepted_carries_the_receipt,
    the_key_reaches_the_provider,
    a_retry_sends_the_same_key,
    _rate_limited(Scenario.RATE_LIMITED_SECONDS),
    _rate_limited(Scenario.RATE_LIMITED_DATE),
    _maps_to(Scenario.TRY_LATER, Transient, reached=None),
    _maps_to(Scenario.REFUSE, Permanent, reached=None),
    _maps_to(Scenario.DROP_AFTER_SEND, Uncertain, reached=True),
    _maps_to(Scenario.HANG_AFTER_SEND, Uncertain, reached=True),
    accept_then_drop_is_uncertain_and_found,
    _maps_to(Scenario.UNREACHABLE, Transient, reached=False),
    without_rendered_content,
    lookup_finds_what_was_accepted,
    close_twice,
    no_credential_in_repr,
    *BATCH_CHECKS,
)


def _needs(check: Check) -> Scenario | None:
    found = getattr(check, "scenario", None)
    return found if isinstance(found, Scenario) else None


async def run_contract(make_case: Callable[[], ProviderCase], *,
                       checks: Sequence[Check] = CHECKS) -> list[CheckResult]:
    """Every check against a new case each; a scenario the case cannot cue (its
    ``scenarios``, default all) is skipped, and said so."""
    results = []
    for check in checks:
        case = make_case()
        can: Collection[Scenario] = getattr(case, "scenarios", frozenset(Scenario))
        needed = _needs(check)
        try:
            if needed is not None and needed not in can:
                results.append(CheckResult(check.__name__, True, f"{needed} not cued",
                                           skipped=True))
                continue
            await check(case)
            results.append(CheckResult(check.__name__, True))
        except NotApplicable as exc:
            results.append(CheckResult(check.__name__, True, str(exc), skipped=True))
        except ContractBroken as exc:
            results.append(CheckResult(check.__name__, False, str(exc)))
        finally:
            await case.close()
    return results


async def assert_conforms(make_case: Callable[[], ProviderCase], *,
                          checks: Sequence[Check] = CHECKS) -> list[CheckResult]:
    """``run_contract``, raising ContractBroken listing every check that failed."""
    results = await run_contract(make_case, checks=checks)
    failed = [r for r in results if not r.passed]
    if failed:
        raise ContractBroken("; ".join(f"{r.name}: {r.detail}" for r in failed))
    return results
