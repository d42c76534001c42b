"""The overview's sparklines: recent readings per channel, kept in memory by this
process while someone watches (bounded), and the SVG points drawn from them."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.operate.readmodel import Counts

#: Sparkline readings: at most one per ``SAMPLE_EVERY_S``, the last ``HISTORY`` kept.
SAMPLE_EVERY_S = 2.0
HISTORY = 180


@dataclass(frozen=True)
class Sample:
    at: float
    backlog: int
    accepted: int


class History:
    """Recent readings per channel, kept by this process while someone watches the
    overview: at most one per ``every_s`` and the last ``size`` (bounded memory)."""

    def __init__(self, size: int = HISTORY, every_s: float = SAMPLE_EVERY_S) -> None:
        self.size = size
        self.every_s = every_s
        self._series: dict[str, deque[Sample]] = {}
        self._last: float | None = None

    def record(self, now: float, channels: Mapping[str, Counts]) -> None:
        """A reading of each channel's counts, unless the last is under ``every_s`` old."""
        if self._last is not None and now - self._last < self.every_s:
            return
        self._last = now
        for name, counts in channels.items():
            series = self._series.setdefault(name, deque(maxlen=self.size))
            series.append(Sample(at=now, backlog=counts.backlog, accepted=counts.accepted))

    def series(self, channel: str) -> list[Sample]:
        return list(self._series.get(channel, ()))


def sparkline(values: Sequence[float], *, width: float = 120.0,
              height: float = 28.0) -> str:
    """SVG ``points`` for ``values`` across ``width``, the largest at the top; a lone
    value is a flat line."""
    if not values:
        return ""
    top = max(values) or 1.0
    if len(values) == 1:
        y = height - values[0] / top * (height - 2) - 1
        return f"0,{y:.1f} {width:.1f},{y:.1f}"
    step = width / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - v / top * (height - 2) - 1:.1f}"
                    for i, v in enumerate(values))


def spark(series: Sequence[Sample]) -> dict[str, Any]:
    """A channel card's two lines: backlog per reading, and the send rate between
    readings (one per reading, so both lines share the x axis)."""
    backlog = [float(s.backlog) for s in series]
    rates = [max(0, b.accepted - a.accepted) / max(b.at - a.at, 1e-9)
             for a, b in itertools.pairwise(series)]
    rates = rates[:1] + rates  # one per reading, so both lines share the x axis
    line = sparkline(backlog)
    return {
        "samples": len(series),
        "span_s": series[-1].at - series[0].at if series else 0.0,
        "backlog": line, "backlog_area": f"0,28 {line} 120,28" if line else "",
        "backlog_max": max(backlog, default=0.0),
        "rate": sparkline(rates), "rate_max": max(rates, default=0.0),
    }
