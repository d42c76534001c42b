"""Fair share among groups inside a lane (``tidings.core.fair``): the split of a
receive by weight, the passes that hand a short group's room to the others, and a
worker on a channel with ``fair_share`` that serves three tenants in turn (a provider
of the test's own keeps the order of the sends: the witness)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.fair import Passes, split
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome
from tidings.runtime import build_runtime

T0 = 1_790_000_000.0


class Outbox:
    """A provider that keeps the keys it was asked to send, in order."""

    name = "outbox"
    channel = "email"
    supports_lookup = False
    deduplicates = False
    dedupe_window_s: float | None = None

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def send(self, request: SendRequest) -> Outcome:
        self.keys.append(request.key)
        return Accepted(receipt=f"m{len(self.keys)}")

    async def close(self) -> None:
        return None



def test_a_receive_is_split_by_weight_with_one_each_first() -> None:
    assert split(["a", "b", "c"], 9, {}) == [("a", 3), ("b", 3), ("c", 3)]
    # by weight 2:1:1 (5, 2.5, 2.5: the first of the equal remainders gets the odd one)
    assert split(["a", "b", "c"], 10, {"a": 2.0}) == [("a", 5), ("b", 3), ("c", 2)]
    # every group at least one while room allows, the largest share giving way
    assert split(["a", "b", "c"], 3, {"a": 100.0}) == [("a", 1), ("b", 1), ("c", 1)]
    assert split(["a", "b", "c"], 4, {"a": 100.0}) == [("a", 2), ("b", 1), ("c", 1)]
    assert split(["a", "b", "c"], 2, {}) == [("a", 1), ("b", 1)]
    assert split([], 5, {}) == [] and split(["a"], 0, {}) == []


@given(groups=st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=20, unique=True),
       room=st.integers(1, 500),
       weights=st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0.01, 100)))
def test_a_split_hands_out_exactly_the_room(groups: list[str], room: int,
                                            weights: dict[str, float]) -> None:
    shares = split(groups, room, weights)
    assert sum(n for _, n in shares) == room
    assert all(n >= 1 for _, n in shares)
    assert len(shares) == min(len(groups), room)


def test_a_group_short_of_its_share_leaves_the_rest_to_the_others() -> None:
    ready = {"big": list(range(100)), "small": [1000, 1001]}
    passes: Passes[int] = Passes(["big", "small"], 10, {})
    while asks := passes.asks():
        passes.took({g: [ready[g].pop(0) for _ in range(min(n, len(ready[g])))]
                     for g, n in asks})
    rows = passes.rows()
    assert len(rows) == 10
    assert rows[:4] == [0, 1000, 1, 1001]  # in turn while both have some


async def test_three_tenants_under_one_quota_are_served_in_turn(tmp_path: Path) -> None:
    outbox = Outbox()
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 's.db'}",
                               "worker": {"batch_size": 9},
                               "channels": {"email": {"fair_share": True,
                                                      "group_weights": {"gold": 2.0}}}})
    rt = await build_runtime(settings, clock=FakeClock(T0), providers={"email": outbox},
                             campaigns=[])
    try:
        # Given one tenant's big campaign admitted first, then two small tenants
        for tenant, size in (("big", 60), ("small", 12), ("gold", 24)):
            for n in range(size):
                key = f"{tenant}-{n:03d}"
                await rt.notify(key=key, recipient={"id": key, "email": f"{key}@example.com"},
                                channels=["email"], template="t", lane="bulk", group=tenant)
        worker = rt.worker("email", "w1")
        await worker.run_once()
        await worker.run_once()
        first = [key.split("-")[0] for key in outbox.keys]
        # Then each receive of 9 gives gold (weight 2) 5 (4.5 and the larger remainder),
        # big and small 2 each, although big's 60 were admitted first
        assert (first.count("gold"), first.count("big"), first.count("small")) == (10, 4, 4)
        while await worker.run_once():
            pass
        assert len(outbox.keys) == len(set(outbox.keys)) == 96
        with pytest.raises(InvalidInput) as caught:
            await rt.notify(key="x", recipient={"id": "x", "email": "x@example.com"},
                            channels=["email"], template="t", group="a b")
        assert caught.value.field == "group"
    finally:
        await rt.close()


def test_a_bad_group_in_the_settings_names_its_field() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"store": "sqlite:///x.db",
                        "channels": {"email": {"provider": {"kind": "sandbox-twin"}}},
                        "api": {"queues": {"q": {"channel": "email", "group": "a/b"}}}})
    assert caught.value.field == "api.queues.q.group"
