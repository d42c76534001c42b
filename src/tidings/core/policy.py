"""Retry and backoff policy: pure functions, no I/O, no clock reads."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How many transient failures an intent may spend, and how long to wait between them.

    Rate limiting (429) never spends this budget: it pauses the channel instead.
    """

    max_failures: int = 5
    base_s: float = 1.0
    cap_s: float = 300.0
    rate_limit_floor_s: float = 0.25
    rate_limit_cap_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        if self.base_s <= 0 or self.cap_s < self.base_s:
            raise ValueError("backoff needs 0 < base_s <= cap_s")

    def spent(self, failures: int) -> bool:
        """Whether ``failures`` transient failures use up the budget."""
        return failures >= self.max_failures


def full_jitter(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * 2**(attempt-1)))."""
    exponent = min(max(attempt, 1) - 1, 62)
    return rng.uniform(0.0, min(cap, base * math.pow(2.0, exponent)))


def retry_delay(failures: int, policy: RetryPolicy, rng: random.Random) -> float:
    """Delay before the next try after ``failures`` transient failures."""
    return full_jitter(failures, base=policy.base_s, cap=policy.cap_s, rng=rng)


def rate_limit_pause(
    retry_after_s: float | None, consecutive: int, policy: RetryPolicy, rng: random.Random
) -> float:
    """How long a whole channel pauses after a 429.

    The provider's Retry-After wins; without one, full-jitter backoff on the number
    of consecutive 429s, never below a floor so a channel cannot spin.
    """
    # NaN (a plug-in provider's arithmetic) would compare false everywhere and pause
    # until a time no store can hold; it is read as no Retry-After at all.
    if retry_after_s is not None and not math.isnan(retry_after_s):
        return min(max(retry_after_s, 0.0), policy.rate_limit_cap_s)
    jittered = full_jitter(
        consecutive, base=policy.rate_limit_floor_s * 2, cap=policy.rate_limit_cap_s, rng=rng
    )
    return max(policy.rate_limit_floor_s, jittered)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Parse a Retry-After header (delta seconds or an HTTP-date) into seconds from ``now``.

    Returns None when absent or unparseable; a date in the past gives 0.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return max(0.0, seconds)
        return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)
