"""The plug-in authors' contract kit (``tidings.testing``) passes on every built-in
adapter against its provider side, and fails an adapter that breaks the contract."""

from __future__ import annotations

from typing import Any

import pytest
from test_provider import CASES, Case, TwinCase

from tidings.core.outcomes import Accepted, Lookup, Outcome, Transient
from tidings.providers import SendRequest
from tidings.testing import ContractBroken, Scenario, assert_conforms, run_contract


@pytest.mark.parametrize("name", sorted(CASES))
async def test_every_built_in_adapter_conforms(name: str) -> None:
    results = await assert_conforms(CASES[name])
    ran = [r for r in results if not r.skipped]
    assert len(ran) >= len(results) - 1  # only the twin skips one (nothing to be unreachable)


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
])
async def test_the_kit_fails_an_adapter_that_breaks_a_promise(how: str, check: str) -> None:
    results = {r.name: r for r in await run_contract(lambda: broken_twin(how))}
    assert not results[check].passed, results[check]
    with pytest.raises(ContractBroken, match=check):
        await assert_conforms(lambda: broken_twin(how))
