"""The capacity model: how long a campaign takes to drain, worked out before it runs.

Pure functions over a handful of numbers; ``operations.campaign_forecast`` reads them
(the audience's count, the channel's pace, the ledger's recent outcomes) and
``tidings plan --campaign`` prints the answer. ``docs/capacity.md`` has the figures
measured on real runs and the sizing of a 10M and a 100M-recipient day, and
``bench/capacity_check.py`` compares a forecast with a measured drain.

The model, for one channel of a campaign of ``N`` recipients:

- **sustained rate** ``r = min(pace, workers × per_worker)``: the pacer's aim for the
  channel (``PaceLimits.paced_per_s``, None when unpaced) or what the worker processes
  deliver, whichever binds. ``per_worker`` is one worker process's delivery rate,
  observed (the ledger's recent outcomes over the workers that produced them) or given.
- **admission** overlaps delivery (fused admission: a page's messages are on the queue
  when its transaction commits), so the slower stage sets the pace:
  ``drain = startup + N / min(r, admission)``.
- against the **freshness deadline** ``F`` (``expires_after_s``, counted from the
  occurrence's logical time): served in order, ``r × F`` go out in time and the rest
  expire (``late``); the workers and the quota that would drain it in time are said.

What it leaves out, on purpose: retries and 429 pauses (a sandbox that refuses nothing
has none; a provider that refuses 5 % of the time drains about 5 % slower), and workers
that scale less than linearly on one store (``docs/capacity.md`` measures how much).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Bound(StrEnum):
    """What sets a forecast's rate."""

    QUOTA = "quota"
    """The channel's pacer: more workers would not send faster."""
    WORKERS = "workers"
    """The worker processes: more of them (up to the quota) would."""
    ADMISSION = "admission"
    """Admission writes intents more slowly than the workers could send them."""


class Verdict(StrEnum):
    CLEAR = "clear"
    """Nothing to send."""
    OK = "ok"
    """Drains before the freshness deadline."""
    AT_RISK = "at_risk"
    """Some intents expire before they are sent."""
    NO_DEADLINE = "no_deadline"
    """Drains; nothing in it expires."""


@dataclass(frozen=True, kw_only=True)
class Forecast:
    """A campaign channel's drain, forecast from the numbers it names."""

    recipients: int
    workers: int
    per_worker_per_s: float
    pace_per_s: float | None
    admission_per_s: float | None
    startup_s: float
    rate_per_s: float
    """The sustained rate: ``min(pace, workers × per_worker, admission)``."""
    bound: Bound
    drain_s: float
    freshness_s: float | None
    late: int
    """Intents expected to expire unsent (0 without a deadline)."""
    verdict: Verdict
    workers_needed: int | None
    """Worker processes that would drain it within the deadline at ``per_worker_per_s``;
    None without a deadline, or when the pace alone cannot (see ``pace_needed_per_s``)."""
    pace_needed_per_s: float | None
    """The paced rate a drain within the deadline needs (None without a deadline)."""


def sustained_rate(*, workers: int, per_worker_per_s: float, pace_per_s: float | None,
                   admission_per_s: float | None = None) -> tuple[float, Bound]:
    """The rate a channel sustains and what binds it (ties go to the quota, then the
    workers: the cheaper thing to be bound by)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if per_worker_per_s <= 0:
        raise ValueError(f"per_worker_per_s must be positive, got {per_worker_per_s}")
    candidates = [(workers * per_worker_per_s, Bound.WORKERS)]
    if pace_per_s is not None:
        if pace_per_s <= 0:
            raise ValueError(f"pace_per_s must be positive, got {pace_per_s}")
        candidates.append((pace_per_s, Bound.QUOTA))
    if admission_per_s is not None:
        if admission_per_s <= 0:
            raise ValueError(f"admission_per_s must be positive, got {admission_per_s}")
        candidates.append((admission_per_s, Bound.ADMISSION))
    order = {Bound.QUOTA: 0, Bound.WORKERS: 1, Bound.ADMISSION: 2}
    rate, bound = min(candidates, key=lambda c: (c[0], order[c[1]]))
    return rate, bound


def forecast(*, recipients: int, workers: int, per_worker_per_s: float,
             pace_per_s: float | None, admission_per_s: float | None = None,
             freshness_s: float | None = None, startup_s: float = 0.0) -> Forecast:
    """The drain of ``recipients`` intents on one channel (see the module docstring)."""
    if recipients < 0:
        raise ValueError(f"recipients must not be negative, got {recipients}")
    if startup_s < 0:
        raise ValueError(f"startup_s must not be negative, got {startup_s}")
    rate, bound = sustained_rate(workers=workers, per_worker_per_s=per_worker_per_s,
                                 pace_per_s=pace_per_s, admission_per_s=admission_per_s)
    drain = 0.0 if recipients == 0 else startup_s + recipients / rate
    late = 0
    needed: int | None = None
    pace_needed: float | None = None
    if recipients == 0:
        verdict = Verdict.CLEAR
    elif freshness_s is None:
        verdict = Verdict.NO_DEADLINE
    else:
        sending_s = max(0.0, freshness_s - startup_s)
        late = max(0, recipients - math.floor(rate * sending_s))
        verdict = Verdict.OK if late == 0 else Verdict.AT_RISK
        # A window of a hair (a deadline a rounding error past the start-up) needs a
        # pace no float holds: no pace and no number of workers is enough.
        if sending_s > 0 and math.isfinite(recipients / sending_s):
            pace_needed = recipients / sending_s
            needed = workers_for(pace_needed, per_worker_per_s=per_worker_per_s)
            if (pace_per_s is not None and pace_per_s < pace_needed) or (
                    admission_per_s is not None and admission_per_s < pace_needed):
                needed = None  # no number of workers is enough under this pace
    return Forecast(recipients=recipients, workers=workers, per_worker_per_s=per_worker_per_s,
                    pace_per_s=pace_per_s, admission_per_s=admission_per_s,
                    startup_s=startup_s, rate_per_s=rate, bound=bound, drain_s=drain,
                    freshness_s=freshness_s, late=late, verdict=verdict,
                    workers_needed=needed, pace_needed_per_s=pace_needed)


def workers_for(rate_per_s: float, *, per_worker_per_s: float) -> int:
    """Worker processes that deliver ``rate_per_s`` together (at least one)."""
    if per_worker_per_s <= 0:
        raise ValueError(f"per_worker_per_s must be positive, got {per_worker_per_s}")
    # A hair of tolerance: 3 × (1/3) is not below 1 for want of a rounding error.
    return max(1, math.ceil(rate_per_s / per_worker_per_s - 1e-9))


def quota_for(pace_per_s: float, *, safety: float = 0.98, margin: float = 2.0) -> float:
    """The provider quota whose pacer aims at ``pace_per_s`` at least (the pacer aims at
    ``min(quota × safety, quota − margin)``, see ``PaceLimits.paced_per_s``)."""
    if not 0 < safety <= 1:
        raise ValueError(f"safety must be in (0, 1], got {safety}")
    if safety == 1:
        return pace_per_s
    return max(pace_per_s / safety, pace_per_s + margin)


def observed_rate(counts: Mapping[int, int], *, bucket_s: float) -> float | None:
    """Sends per second while the channel was busy, from outcome counts per time bucket
    (``Store.outcome_counts``: bucket = ``floor(at / bucket_s)``); None when there are none.

    Only buckets with sends count (an idle stretch says nothing of capacity), and with
    three or more of them the first and the last are left out: a run starts and ends
    part of the way into a bucket, and those part-filled buckets would read low. With
    one or two, the fuller one is the best there is."""
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive, got {bucket_s}")
    busy = sorted((bucket, count) for bucket, count in counts.items() if count > 0)
    if not busy:
        return None
    if len(busy) < 3:
        return max(count for _, count in busy) / bucket_s
    inner = busy[1:-1]
    return sum(count for _, count in inner) / (len(inner) * bucket_s)


def buckets_of(rows: Iterable[tuple[int, int]]) -> dict[int, int]:
    """``(bucket, count)`` rows (several per bucket: one per type and campaign) added up."""
    out: dict[int, int] = {}
    for bucket, count in rows:
        out[bucket] = out.get(bucket, 0) + count
    return out


@dataclass(frozen=True, kw_only=True)
class DayPlan:
    """What a day of ``intents_per_day`` needs, sent within ``send_window_s``."""

    intents_per_day: int
    send_window_s: float
    rate_per_s: float
    """The sustained rate that drains a day within the window."""
    workers: int
    quota_per_s: float
    """The provider quota (summed over the channels' providers) that paces at that rate."""
    store_bytes: int
    """The ledger at steady state: a day's intents × the days they are kept (retention
    plus the day being sent) × bytes per intent."""
    retention_days: float


def day_plan(*, intents_per_day: int, send_window_s: float, per_worker_per_s: float,
             bytes_per_intent: float, retention_days: float, safety: float = 0.98) -> DayPlan:
    """Workers, quota and store size for a day of ``intents_per_day`` (one intent is one
    recipient on one channel) sent within ``send_window_s`` of its start."""
    if intents_per_day < 0 or send_window_s <= 0 or bytes_per_intent < 0 or retention_days < 0:
        raise ValueError("intents_per_day, bytes_per_intent and retention_days must not be "
                         "negative and send_window_s must be positive")
    rate = intents_per_day / send_window_s
    kept = intents_per_day * (retention_days + 1)
    return DayPlan(intents_per_day=intents_per_day, send_window_s=send_window_s,
                   rate_per_s=rate, workers=workers_for(rate, per_worker_per_s=per_worker_per_s),
                   quota_per_s=quota_for(rate, safety=safety),
                   store_bytes=math.ceil(kept * bytes_per_intent),
                   retention_days=retention_days)


@dataclass(frozen=True, kw_only=True)
class ChannelForecast:
    """``Forecast`` of one channel of a campaign, with where its per-worker rate came
    from: ``observed`` (the ledger's sends in the last ``window_s``, over
    ``observed_workers``) or ``given`` (the operator's figure, for a channel with no
    recent sends)."""

    campaign: str
    channel: str
    rate_source: str
    observed_rate_per_s: float | None
    observed_workers: int
    window_s: float
    forecast: Forecast
