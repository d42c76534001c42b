"""Lanes: which lane an admission goes to, and the share each lower lane keeps
(``tidings.core.lanes``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError
from tidings.core.lanes import EVERY_LANE, MAX_LANES, ChannelLanes, LaneShare, lane_number


def test_calls_go_to_transactional_and_campaigns_to_bulk_by_default() -> None:
    assert lane_number(("transactional", "bulk"), None, bulk=False) == 0
    assert lane_number(("transactional", "bulk"), None, bulk=True) == 1
    # Without lanes of those names: the first lane for calls, the last for bulk.
    assert lane_number(("urgent", "normal", "later"), None, bulk=False) == 0
    assert lane_number(("urgent", "normal", "later"), None, bulk=True) == 2
    assert lane_number(("only",), None, bulk=True) == 0
    # A named lane wins.
    assert lane_number(("transactional", "bulk"), "bulk", bulk=False) == 1
    with pytest.raises(ValueError, match="'urgent' is not one of this channel's lanes"):
        lane_number(("transactional", "bulk"), "urgent", bulk=False)


class Queue:
    """Two (or more) lanes of ready messages, each always full or always empty."""

    def __init__(self, busy: set[int]) -> None:
        self.busy = busy

    def receive(self, lanes: tuple[int, ...], most: int) -> list[int]:
        taken: list[int] = []
        for lane in lanes:
            if lane in self.busy:
                taken += [lane] * (most - len(taken))
        return taken


def run(share: LaneShare, queue: Queue, receives: int, limit: int) -> list[int]:
    taken: list[int] = []
    for _ in range(receives):
        for lanes, most in share.plan(limit):
            got = queue.receive(lanes, most)
            share.took(lanes, got, limit=most)
            taken += got
    return taken


@pytest.mark.parametrize("limit", [1, 7, 200])
def test_a_busy_lower_lane_keeps_its_share_of_a_busy_first_lane(limit: int) -> None:
    taken = run(LaneShare(2, 0.1), Queue({0, 1}), receives=2000 // limit + 50, limit=limit)
    bulk = taken.count(1) / len(taken)
    assert 0.09 <= bulk <= 0.11, bulk


def test_strict_order_when_the_share_is_zero() -> None:
    taken = run(LaneShare(2, 0.0), Queue({0, 1}), receives=100, limit=10)
    assert set(taken) == {0}


def test_a_lower_lane_alone_takes_everything() -> None:
    taken = run(LaneShare(2, 0.1), Queue({1}), receives=20, limit=10)
    assert taken == [1] * 200


def test_an_idle_lane_banks_no_credit() -> None:
    # Given a long time with the first lane busy and the bulk lane empty
    share = LaneShare(2, 0.1)
    run(share, Queue({0}), receives=500, limit=10)
    # When bulk work arrives, it is owed no more than one receive's share
    taken = run(share, Queue({0, 1}), receives=1, limit=10)
    assert taken.count(1) <= 2


def test_a_lower_lane_never_takes_a_whole_batch_ahead_of_the_first() -> None:
    share = LaneShare(2, 0.1)
    for _ in range(50):
        steps = share.plan(200)
        first_lane_room = sum(most for lanes, most in steps if lanes[0] == 0)
        assert first_lane_room >= 200 - 23
        for lanes, most in steps:
            got = Queue({0, 1}).receive(lanes, most)
            share.took(lanes, got, limit=most)


@given(lanes=st.integers(1, MAX_LANES), min_share=st.floats(0, 0.9),
       limits=st.lists(st.integers(1, 300), min_size=1, max_size=30),
       busy=st.sets(st.integers(0, MAX_LANES - 1)))
def test_a_plan_never_asks_for_more_than_the_limit_and_always_asks_every_lane(
        lanes: int, min_share: float, limits: list[int], busy: set[int]) -> None:
    share = LaneShare(lanes, min_share)
    queue = Queue(busy)
    for limit in limits:
        steps = share.plan(limit)
        assert sum(most for _, most in steps) == limit
        assert all(most >= 1 for _, most in steps)
        # Every lane number is asked whenever room is left after the owed lanes:
        # nothing is ever stranded.
        owed = sum(most for asked, most in steps if asked != EVERY_LANE)
        assert owed == limit or steps[-1] == (EVERY_LANE, limit - owed)
        for asked, most in steps:
            got = queue.receive(asked, most)
            share.took(asked, got, limit=most)


def test_settings_refuse_bad_lanes_naming_the_field() -> None:
    base = {"store": "sqlite:///x.db",
            "channels": {"email": {"provider": {"kind": "sandbox-twin"}}}}
    for lanes, message in ((["a", "a"], "twice"), ([], "1 to 4"),
                           (["a", "b", "c", "d", "e"], "1 to 4"), (["a b"], "whitespace")):
        with pytest.raises(ConfigurationError, match=message) as info:
            Settings.parse({**base, "channels": {"email": {
                "provider": {"kind": "sandbox-twin"}, "lanes": lanes}}})
        assert "channels.email.lanes" in str(info.value)
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({**base, "campaigns": {"weekly": {
            "cron": "0 9 * * 1", "channels": ["email"], "template": "t",
            "audience": {"kind": "list", "recipients": []}, "lane": "urgent"}}})
    assert "campaigns.weekly.lane" in str(caught.value)
    assert "'urgent' is not a lane of channel 'email'" in str(caught.value)


async def test_the_publish_route_goes_to_transactional_unless_its_queue_names_a_lane() -> None:
    from tidings.admission.campaign import Campaign
    from tidings.admission.publish_intake import PublishItem, resolve
    from tidings.config.queues import QueueSettings

    def campaign_of(name: str) -> Campaign:
        raise AssertionError(name)

    item = PublishItem(customer_id="c1", schedule_day="2026-12-07", template="receipt",
                       email="c1@example.com")
    queues = {"receipts": QueueSettings(channel="email"),
              "statements": QueueSettings(channel="email", lane="bulk")}
    lanes = ChannelLanes({"email": ("transactional", "bulk")})
    for queue, lane in (("receipts", 0), ("statements", 1)):
        published = await resolve(queue, item, queues=queues, campaign_of=campaign_of,
                                  kinds={"email": "email"}, problem=lambda d: None,
                                  now=1_790_000_000.0, lanes=lanes)
        assert [d.lane for d in published.drafts] == [lane]


def test_a_queue_naming_a_lane_its_channel_lacks_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="'later' is not a lane of channel") as info:
        Settings.parse({"store": "sqlite:///x.db",
                        "channels": {"email": {"provider": {"kind": "sandbox-twin"}}},
                        "api": {"queues": {"receipts": {"channel": "email", "lane": "later"}}}})
    assert info.value.field == "api.queues.receipts.lane"
