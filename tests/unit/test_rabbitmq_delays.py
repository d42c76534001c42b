"""The RabbitMQ transport's delay buckets (pure): a delay is spent in buckets of one TTL
each, never past its due time, in a bounded number of hops."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from tidings.transports.rabbitmq import BUCKETS_S, EARLY_S, bucket_for


def hops(delay_s: float) -> tuple[int, float]:
    """The buckets a message goes through (as receivers move it on), and what is left
    when it is visible (negative: late)."""
    remaining, count = delay_s, 0
    while remaining > EARLY_S:
        bucket = bucket_for(remaining)
        assert bucket <= remaining  # a bucket never outlasts what is left of the delay
        remaining -= bucket
        count += 1
    return count, remaining


@given(st.floats(min_value=EARLY_S, max_value=30 * 86_400.0, allow_nan=False))
def test_a_delay_is_never_overshot_and_takes_few_hops(delay_s: float) -> None:
    count, left = hops(delay_s)

    assert 0.0 <= left <= EARLY_S  # visible at most the shortest bucket early, never late
    longest = BUCKETS_S[-1]
    assert count <= 3 * len(BUCKETS_S) + math.ceil(delay_s / longest)


@given(st.floats(min_value=0.0, max_value=EARLY_S, allow_nan=False))
def test_a_delay_shorter_than_every_bucket_takes_the_shortest(delay_s: float) -> None:
    assert bucket_for(delay_s) == BUCKETS_S[0]


def test_the_buckets_are_powers_of_four_from_a_quarter_second_to_three_days() -> None:
    assert BUCKETS_S[0] == 0.25 and all(
        b == 4 * a for a, b in itertools.pairwise(BUCKETS_S))
    assert 3 * 86_400 <= BUCKETS_S[-1] < 4 * 86_400
