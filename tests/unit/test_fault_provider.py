"""RaisingProvider: raises before or after its inner send, as told, at random."""

from __future__ import annotations

import random

import pytest

from tidings.core.clock import FakeClock
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted
from tidings.providers.faults import InjectedFault, RaisingProvider
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.sandbox import SandboxConfig, SandboxCore


def twin() -> tuple[SandboxCore, SandboxTwinProvider]:
    clock = FakeClock(auto_advance=True)
    core = SandboxCore(SandboxConfig(dedupe=False, quotas={"email": 10**9}), now=clock.now, seed=0)
    return core, SandboxTwinProvider(core, "email", clock)


def request(i: int) -> SendRequest:
    return SendRequest(key=f"k{i}:email", channel="email", to=f"c{i}@example.com",
                       template="t", data={}, recipient_id=f"c{i}")


async def test_before_sends_nothing_and_after_sends_then_raises() -> None:
    core, inner = twin()
    before = RaisingProvider(inner, before=1.0, after=0.0)
    with pytest.raises(InjectedFault, match=r"before sending to c0@example\.com"):
        await before.send(request(0))
    assert core.lookup("k0:email", "email") is None
    after = RaisingProvider(inner, before=0.0, after=1.0)
    with pytest.raises(InjectedFault):
        await after.send(request(1))
    assert core.lookup("k1:email", "email") is not None  # the sandbox really has it
    assert (before.counts.raised_before, after.counts.raised_after) == (1, 1)
    assert await after.lookup("k1:email") == await inner.lookup("k1:email")


async def test_the_shares_are_about_what_was_asked() -> None:
    core, inner = twin()
    provider = RaisingProvider(inner, before=0.2, after=0.3, rng=random.Random(7))
    answered = 0
    for i in range(2000):
        try:
            outcome = await provider.send(request(i))
        except InjectedFault:
            continue
        assert isinstance(outcome, Accepted)
        answered += 1
    counts = provider.counts
    assert counts.sends == 2000 == counts.raised_before + counts.raised_after + answered
    assert 320 <= counts.raised_before <= 480 and 500 <= counts.raised_after <= 700
    accepted = core.stats()["channels"]["email"]["accepted_keys"]
    assert accepted == 2000 - counts.raised_before


@pytest.mark.parametrize(("before", "after"), [(-0.1, 0.0), (0.6, 0.5), (0.0, 1.1)])
def test_shares_must_be_probabilities(before: float, after: float) -> None:
    with pytest.raises(ValueError, match="probabilities"):
        RaisingProvider(twin()[1], before=before, after=after)
