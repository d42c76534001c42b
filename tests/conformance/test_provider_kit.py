"""The plug-in authors' contract kit (``tidings.testing``) passes on every built-in
adapter against its provider side, and fails an adapter that breaks the contract."""

from __future__ import annotations

from typing import Any

import pytest
from test_provider import CASES, Case, TwinCase

from tidings.core.outcomes import Accepted, Lookup, Outcome, Transient, Uncertain
from tidings.providers import SendRequest
from tidings.testing import ContractBroken, Scenario, assert_conforms, run_contract
from tidings.testing.provider_kit import BATCH_CHECKS


@pytest.mark.parametrize("name", sorted(CASES))
async def test_every_built_in_adapter_conforms(name: str) -> None:
    results = await assert_conforms(CASES[name])
    batch = {check.__name__ for check in BATCH_CHECKS}
    ran = [r for r in results if not r.skipped]
    if name.startswith(("postmark", "resend")):
        # the built-in adapters with a batch endpoint are held to every batch check
        assert batch <= {r.name for r in ran}
    else:
        assert {(r.name, r.detail) for r in results if r.name in batch} == {
            (n, "not a BatchProvider") for n in batch}
        results = [r for r in results if r.name not in batch]
        ran = [r for r in ran if r.name not in batch]
    assert len(ran) >= len(results) - 1  # only the twin skips one (nothing to be unreachable)


async def test_a_batch_provider_that_answers_for_the_wrong_messages_is_caught() -> None:
    """A batch adapter whose answer drops one message's outcome, or gives every message
    the first one's receipt, breaks the contract."""
    from tidings.testing.provider_kit import a_batch_gives_each_message_its_own_receipt

    for how in ("short", "same-receipt"):
        def make(how: str = how) -> Case:
            case = CASES["postmark-mock"]()
            start = case.start

            async def broken_start(scenario: Scenario) -> Any:
                inner = await start(scenario)
                real = inner.send_batch

                async def send_batch(requests: Any) -> list[Outcome]:
                    outcomes: list[Outcome] = await real(requests)
                    if how == "short":
                        return outcomes[:-1]
                    return [outcomes[0]] * len(outcomes)

                inner.send_batch = send_batch
                return inner

            case.start = broken_start  # type: ignore[method-assign]
            return case

        results = await run_contract(make, checks=[a_batch_gives_each_message_its_own_receipt])
        assert [r.passed for r in results] == [False], (how, results)


class Broken:
    """Wraps a built-in adapter and breaks one promise of the contract."""

    def __init__(self, inner: Any, how: str) -> None:
        self.inner, self.how = inner, how
        self.name, self.supports_lookup = inner.name, inner.supports_lookup

    async def send(self, request: SendRequest) -> Outcome:
        if self.how == "raises":
            raise RuntimeError("boom")
        outcome = await self.inner.send(request)
        if self.how == "no-receipt" and isinstance(outcome, Accepted):
            return Accepted(receipt="made-up", request_id=outcome.request_id)
        if self.how == "429-transient" and not isinstance(outcome, Accepted):
            return Transient(reason="try later")
        if self.how == "lost-answer-transient" and isinstance(outcome, Uncertain):
            return Transient(reason="connection dropped")  # a resend: a second copy
        return outcome

    async def lookup(self, key: str) -> Lookup:
        result: Lookup = await self.inner.lookup(key)
        return result

    async def close(self) -> None:
        await self.inner.close()


def broken_twin(how: str) -> Case:
    case = TwinCase()
    start = case.start

    async def broken_start(scenario: Scenario) -> Any:
        return Broken(await start(scenario), how)

    case.start = broken_start  # type: ignore[method-assign]
    return case


@pytest.mark.parametrize(("how", "check"), [
    ("raises", "accepted_carries_the_receipt"),
    ("no-receipt", "accepted_carries_the_receipt"),
    ("429-transient", "rate_limited_seconds_is_rate_limited"),
    ("lost-answer-transient", "accept_then_drop_is_uncertain_and_found"),
])
async def test_the_kit_fails_an_adapter_that_breaks_a_promise(how: str, check: str) -> None:
    results = {r.name: r for r in await run_contract(lambda: broken_twin(how))}
    assert not results[check].passed, results[check]
    with pytest.raises(ContractBroken, match=check):
        await assert_conforms(lambda: broken_twin(how))


class TwinWithout(TwinCase):
    """A side that cannot act out every scenario: it says so in ``scenarios``."""

    scenarios = frozenset(Scenario) - {Scenario.UNREACHABLE, Scenario.RATE_LIMITED_DATE,
                                       Scenario.ACCEPT_THEN_DROP}

    async def build(self, scenario: Scenario) -> Any:
        assert scenario in self.scenarios, f"cued {scenario}, which this side cannot do"
        return await super().build(scenario)


async def test_a_scenario_the_case_cannot_cue_is_skipped_by_every_check_that_needs_it() -> None:
    """The rate-limit checks ignored ``scenarios``: a case without RATE_LIMITED_DATE was
    cued with it all the same. Every check that needs a scenario now says which."""
    results = {r.name: r for r in await assert_conforms(TwinWithout)}
    for name, scenario in (("rate_limited_date_is_rate_limited", "rate_limited_date"),
                           ("accept_then_drop_is_uncertain_and_found", "accept_then_drop"),
                           ("unreachable_is_transient", "unreachable")):
        assert results[name].skipped and results[name].detail == f"{scenario} not cued"
    assert not results["rate_limited_seconds_is_rate_limited"].skipped


def test_every_scenario_is_checked() -> None:
    """ACCEPT_THEN_DROP was never checked: each scenario but ACCEPT has a check of its own."""
    from tidings.testing import CHECKS

    needed = {getattr(check, "scenario", None) for check in CHECKS}
    assert needed >= set(Scenario) - {Scenario.ACCEPT}
