"""The capacity model (tidings.operate.capacity): properties of the forecast, checked by
hypothesis, and its edges by example."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.pacing import PaceLimits
from tidings.operate import capacity
from tidings.operate.capacity import Bound, Verdict

rates = st.floats(min_value=0.01, max_value=1e6, allow_nan=False, allow_infinity=False)
maybe_rates = st.none() | rates
counts = st.integers(min_value=0, max_value=10**9)
workers = st.integers(min_value=1, max_value=10_000)
deadlines = st.none() | st.floats(min_value=0.0, max_value=30 * 86_400.0)
startups = st.floats(min_value=0.0, max_value=600.0)


@given(n=counts, k=workers, per=rates, pace=maybe_rates, admit=maybe_rates,
       fresh=deadlines, startup=startups)
def test_the_rate_is_the_tightest_bound_and_the_drain_follows(
        n: int, k: int, per: float, pace: float | None, admit: float | None,
        fresh: float | None, startup: float) -> None:
    f = capacity.forecast(recipients=n, workers=k, per_worker_per_s=per, pace_per_s=pace,
                          admission_per_s=admit, freshness_s=fresh, startup_s=startup)
    limits = [k * per] + [x for x in (pace, admit) if x is not None]
    assert f.rate_per_s == min(limits)
    bound_value = {Bound.WORKERS: k * per, Bound.QUOTA: pace, Bound.ADMISSION: admit}
    assert bound_value[f.bound] == f.rate_per_s
    if n == 0:
        assert (f.drain_s, f.verdict, f.late) == (0.0, Verdict.CLEAR, 0)
        return
    assert f.drain_s == pytest.approx(startup + n / f.rate_per_s)
    assert 0 <= f.late <= n
    if fresh is None:
        assert f.verdict is Verdict.NO_DEADLINE and f.late == 0
    else:
        # late is what does not fit before the deadline, at the sustained rate
        sending = max(0.0, fresh - startup)
        assert f.late == max(0, n - math.floor(f.rate_per_s * sending))
        assert (f.verdict is Verdict.OK) == (f.late == 0)
        if f.verdict is Verdict.OK:
            assert f.drain_s <= fresh * (1 + 1e-9) + 1e-6


@given(n=st.integers(min_value=1, max_value=10**9), k=workers, per=rates,
       pace=maybe_rates, fresh=st.floats(min_value=1.0, max_value=30 * 86_400.0))
def test_more_workers_never_drain_slower_and_the_workers_needed_are_enough(
        n: int, k: int, per: float, pace: float | None, fresh: float) -> None:
    f = capacity.forecast(recipients=n, workers=k, per_worker_per_s=per, pace_per_s=pace,
                          freshness_s=fresh)
    more = capacity.forecast(recipients=n, workers=k + 1, per_worker_per_s=per,
                             pace_per_s=pace, freshness_s=fresh)
    assert more.drain_s <= f.drain_s
    assert more.late <= f.late
    assert f.pace_needed_per_s == pytest.approx(n / fresh)
    if f.workers_needed is None:
        # only the pace can forbid it
        assert pace is not None and pace < n / fresh
        return
    enough = capacity.forecast(recipients=n, workers=f.workers_needed, per_worker_per_s=per,
                               pace_per_s=pace, freshness_s=fresh)
    assert enough.drain_s <= fresh * (1 + 1e-6)
    if f.workers_needed > 1:
        fewer = capacity.forecast(recipients=n, workers=f.workers_needed - 1,
                                  per_worker_per_s=per, pace_per_s=pace, freshness_s=fresh)
        assert fewer.drain_s > fresh * (1 - 1e-6)


@given(pace=st.floats(min_value=0.5, max_value=1e6), safety=st.floats(min_value=0.5,
                                                                    max_value=1.0))
def test_the_quota_asked_for_paces_at_least_the_rate(pace: float, safety: float) -> None:
    quota = capacity.quota_for(pace, safety=safety)
    paced = PaceLimits(quota_per_s=quota, safety=safety).paced_per_s
    assert paced is not None and paced >= pace * (1 - 1e-9)


@given(per_bucket=st.lists(st.integers(min_value=1, max_value=10_000), min_size=3,
                           max_size=60),
       first=st.integers(min_value=0, max_value=10**6), width=st.sampled_from([0.5, 1.0, 10.0]),
       gap=st.integers(min_value=0, max_value=30))
def test_the_observed_rate_counts_busy_buckets_and_leaves_out_the_edges(
        per_bucket: list[int], first: int, width: float, gap: int) -> None:
    buckets = {first + i: c for i, c in enumerate(per_bucket)}
    # an idle stretch (empty buckets, or none at all) in the middle changes nothing
    shifted = {b + (gap if b > first + len(per_bucket) // 2 else 0): c
               for b, c in buckets.items()}
    shifted[first + len(per_bucket) // 2 + 1] = shifted.get(first + len(per_bucket) // 2 + 1,
                                                            0)
    inner = per_bucket[1:-1]
    expected = sum(inner) / (len(inner) * width)
    assert capacity.observed_rate(buckets, bucket_s=width) == pytest.approx(expected)
    assert capacity.observed_rate(shifted, bucket_s=width) == pytest.approx(expected)


def test_a_steady_rate_is_observed_as_itself() -> None:
    # 1,000/s for 30 s, starting and ending part of the way into a second
    buckets = {100: 400, **{100 + i: 1000 for i in range(1, 30)}, 130: 600}
    assert capacity.observed_rate(buckets, bucket_s=1.0) == 1000.0
    assert capacity.observed_rate({}, bucket_s=1.0) is None
    assert capacity.observed_rate({5: 0}, bucket_s=1.0) is None
    assert capacity.observed_rate({5: 10, 6: 30}, bucket_s=1.0) == 30.0


def test_buckets_add_up_over_types_and_campaigns() -> None:
    assert capacity.buckets_of([(1, 2), (1, 3), (2, 5)]) == {1: 5, 2: 5}


def test_a_paced_campaign_is_bound_by_its_quota_and_says_what_it_needs() -> None:
    # 1M recipients, 4 workers of 2,000/s, a quota paced at 490/s, 6 h of freshness
    f = capacity.forecast(recipients=1_000_000, workers=4, per_worker_per_s=2000.0,
                          pace_per_s=490.0, freshness_s=6 * 3600.0)
    assert f.bound is Bound.QUOTA and f.rate_per_s == 490.0
    assert f.verdict is Verdict.OK and f.late == 0
    assert f.drain_s == pytest.approx(1_000_000 / 490.0)
    tight = capacity.forecast(recipients=1_000_000, workers=4, per_worker_per_s=2000.0,
                              pace_per_s=490.0, freshness_s=1800.0)
    assert tight.verdict is Verdict.AT_RISK
    assert tight.late == 1_000_000 - 490 * 1800
    assert tight.workers_needed is None  # the quota, not the workers, is short
    assert tight.pace_needed_per_s == pytest.approx(1_000_000 / 1800.0)


def test_a_day_plan_sizes_workers_quota_and_store() -> None:
    day = capacity.day_plan(intents_per_day=10_000_000, send_window_s=4 * 3600.0,
                            per_worker_per_s=1000.0, bytes_per_intent=1500.0,
                            retention_days=30.0)
    assert day.rate_per_s == pytest.approx(10_000_000 / 14_400)
    assert day.workers == math.ceil(10_000_000 / 14_400 / 1000.0)
    assert day.quota_per_s == pytest.approx(day.rate_per_s / 0.98)
    assert day.store_bytes == 10_000_000 * 31 * 1500


@pytest.mark.parametrize("kw", [
    {"workers": 0}, {"per_worker_per_s": 0.0}, {"pace_per_s": 0.0},
    {"admission_per_s": -1.0}, {"recipients": -1}, {"startup_s": -1.0},
])
def test_nonsense_is_refused(kw: dict[str, float]) -> None:
    args: dict[str, float | None] = {"recipients": 10, "workers": 1, "per_worker_per_s": 1.0,
                                     "pace_per_s": None}
    args.update(kw)
    with pytest.raises(ValueError):
        capacity.forecast(**args)  # type: ignore[arg-type]
