"""A worker's store or queue out of reach: how long to wait before the next try, and
when to say so.

An outage is told three ways, never once per failed try: a warning with the error at
its start, a warning with the count every ``TELL_EVERY_S`` while it lasts, and an info
line with its length when a try succeeds again. The pause between tries grows from
0.2 s to 5 s, as the pauses of its commits and acks do (``settle``).
"""

from __future__ import annotations

import logging

from tidings.core.clock import Clock

log = logging.getLogger("tidings.worker")

#: Seconds between two warnings while an outage lasts.
TELL_EVERY_S = 30.0


def pause_after(failures: int) -> float:
    """Seconds before the next try after ``failures`` in a row (a receive, a commit, an
    ack): 0.2 s doubling to 5 s. The exponent is bounded: an outage of an hour or more
    fails more than a thousand times, and ``2 ** 1024`` is no float."""
    return min(5.0, 0.1 * 2.0 ** min(failures, 6))


class Outage:
    """One worker's run of failed tries at its store or queue."""

    def __init__(self, channel: str, worker: str, clock: Clock) -> None:
        self._extra = {"channel": channel, "worker": worker}
        self._clock = clock
        self.failures = 0
        self._since = 0.0
        self._told_at = 0.0

    def failed(self, exc: Exception) -> float:
        """Count a failed try; return the pause before the next."""
        now = self._clock.now()
        self.failures += 1
        if self.failures == 1:
            self._since = self._told_at = now
            log.warning("store or queue out of reach; waiting and trying again: %s", exc,
                        extra=self._extra)
        elif now - self._told_at >= TELL_EVERY_S:
            self._told_at = now
            log.warning("store or queue still out of reach after %.0f s (%d tries): %s",
                        now - self._since, self.failures, exc, extra=self._extra)
        return pause_after(self.failures)

    def over(self) -> None:
        """A try succeeded: tell the outage's end, if there was one."""
        if self.failures:
            log.info("store or queue back after %.1f s (%d failed tries)",
                     self._clock.now() - self._since, self.failures, extra=self._extra)
            self.failures = 0
