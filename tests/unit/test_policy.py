"""Backoff and Retry-After parsing."""

import random
from email.utils import formatdate

from tidings.core.policy import full_jitter, parse_retry_after

NOW = 1_780_000_000.0


def test_retry_after_in_seconds() -> None:
    assert parse_retry_after("2", NOW) == 2.0
    assert parse_retry_after(" 0 ", NOW) == 0.0
    assert parse_retry_after("-5", NOW) == 0.0


def test_retry_after_as_http_date() -> None:
    header = formatdate(NOW + 3, usegmt=True)
    assert parse_retry_after(header, NOW) == 3.0
    assert parse_retry_after(formatdate(NOW - 60, usegmt=True), NOW) == 0.0


def test_retry_after_absent_or_garbage() -> None:
    assert parse_retry_after(None, NOW) is None
    assert parse_retry_after("", NOW) is None
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after("nan", NOW) is None


def test_full_jitter_stays_under_the_exponential_cap() -> None:
    rng = random.Random(3)
    for attempt in range(1, 12):
        ceiling = min(30.0, 0.5 * 2 ** (attempt - 1))
        draws = [full_jitter(attempt, base=0.5, cap=30.0, rng=rng) for _ in range(50)]
        assert all(0 <= d <= ceiling for d in draws)
