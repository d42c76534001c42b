"""The sandbox's counts: per channel, every answer by kind, the requests and acceptances
of each one-second window, and the keys it accepted (the witness every test and
benchmark judges by)."""

from __future__ import annotations

from typing import Any

#: Per-second series are kept for the most recent hour; the running maxima and
#: violation counts are kept incrementally so pruning never changes them.
SERIES_WINDOWS = 3600
#: A bounded sample of keys accepted more than once (the count is exact).
TWICE_SAMPLE = 100

COUNTERS = (
    "requests",
    "accepted",
    "accepted_twice",
    "deduplicated",
    "refused_quota",
    "refused_injected",
    "server_errors",
    "timeouts",
    "lost_responses",
    "rejected",
    "bad_requests",
)


class Series:
    """Counts per 1-second window, with a running maximum and over-quota windows."""

    __slots__ = ("counts", "max_rate", "violations")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.max_rate = 0
        self.violations = 0

    def add(self, window: int, quota: int | None = None) -> int:
        count = self.counts.get(window, 0) + 1
        if count == 1 and len(self.counts) >= SERIES_WINDOWS:
            del self.counts[next(iter(self.counts))]
        self.counts[window] = count
        if count > self.max_rate:
            self.max_rate = count
        if quota is not None and count == quota + 1:
            self.violations += 1
        return count


class ChannelCounts:
    """One channel's counts and its dedupe state (key → first receipt)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.windows = Series()
        self.accepted_series = Series()
        self.receipts: dict[str, str] = {}
        self.times_accepted: dict[str, int] = {}  # only keys accepted more than once

    def stats(self, quota: int | None) -> dict[str, Any]:
        return {
            **self.counts,
            "quota": quota,
            "accepted_keys": len(self.receipts),
            "keys_accepted_twice": len(self.times_accepted),
            "keys_accepted_twice_sample": list(self.times_accepted)[:TWICE_SAMPLE],
            "max_rate_1s": self.windows.max_rate,
            "quota_violations": self.windows.violations,
            "requests_per_window": dict(self.windows.counts),
            "accepted_per_window": dict(self.accepted_series.counts),
        }
