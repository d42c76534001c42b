"""The arithmetic of the peer benchmark, pure: sink logs, 1-second windows, utilisation.

Nothing here does I/O or imports a third-party package, so tidings' own test suite can
check it without the peer venv (tests/unit/test_peer_bench_analysis.py).

Windows are the sandbox's: ``int(epoch seconds)`` of each request's arrival, counted
per channel, refused requests included (``requests_per_window``), and accepted ones
apart (``accepted_per_window``). The sandbox lists only windows that saw a request; the
silent ones in between count 0.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def windows(counts: Mapping[int | str, int]) -> dict[int, int]:
    """Per-second counts keyed by int, with the silent seconds between filled with 0."""
    known = {int(w): int(c) for w, c in counts.items()}
    if not known:
        return {}
    return {w: known.get(w, 0) for w in range(min(known), max(known) + 1)}


def pacing_figures(requests: Mapping[int | str, int], accepted: Mapping[int | str, int],
                   quota: int) -> dict[str, Any]:
    """What the sandbox's log says about a paced run.

    * ``max_rate_1s``: the most requests (refused included) in any 1-second window;
    * ``windows_over_quota``: windows with more requests than ``quota``;
    * ``utilisation``: mean *accepted* per steady window ÷ quota. The steady windows are
      the full windows strictly between the first window with a request and the last
      window with an acceptance (the first and last are partial); 1.0 = every second of
      the run used the whole quota;
    * ``span_s``: first request window to last accepted window, inclusive.
    """
    req = windows(requests)
    acc = windows(accepted)
    if not req:
        return {"max_rate_1s": 0, "windows_over_quota": 0, "utilisation": None,
                "steady_windows": 0, "span_s": 0, "requests": 0, "accepted": 0}
    first = min(req)
    last = max(acc) if acc else max(req)
    steady = [w for w in range(first + 1, last)]
    used = [acc.get(w, 0) for w in steady]
    return {
        "max_rate_1s": max(req.values()),
        "windows_over_quota": sum(1 for c in req.values() if c > quota),
        "utilisation": round(sum(used) / len(used) / quota, 3) if used else None,
        "steady_windows": len(steady),
        "span_s": last - first + 1,
        "requests": sum(req.values()),
        "accepted": sum(acc.values()),
    }


def series(counts: Mapping[int | str, int], start: float) -> tuple[list[float], list[int]]:
    """``(seconds since start, count)`` per window, silent windows as 0, for a plot."""
    filled = windows(counts)
    xs = [w - start for w in filled]
    return xs, list(filled.values())


@dataclass(frozen=True, kw_only=True)
class SinkSummary:
    """What the sink log of a run says: jobs done, by whom, when."""

    done: int            # distinct job ids >= 0 recorded
    records: int         # records of ids >= 0 (done + repeats)
    repeats: int         # records beyond the first per id: a job run twice
    first_at: float | None
    last_at: float | None


def parse_sink(lines: Iterable[str], n: int) -> SinkSummary:
    """Summarise ``"<i> <epoch s>"`` lines; ids < 0 are warm-up jobs, ids >= n ignored."""
    seen: set[int] = set()
    records = 0
    first: float | None = None
    last: float | None = None
    for line in lines:
        parts = line.split()
        if len(parts) != 2:
            continue  # a line being written right now
        i, t = int(parts[0]), float(parts[1])
        if not 0 <= i < n:
            continue
        records += 1
        seen.add(i)
        first = t if first is None or t < first else first
        last = t if last is None or t > last else last
    return SinkSummary(done=len(seen), records=records, repeats=records - len(seen),
                       first_at=first, last_at=last)


def rate(count: int, seconds: float | None) -> float | None:
    """``count / seconds``, or None when there is no duration to divide by."""
    if seconds is None or seconds <= 0:
        return None
    return count / seconds


def summarise(values: Iterable[float | int | None]) -> dict[str, Any]:
    """Median, min and max of the repetitions' values (None values skipped)."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "runs": []}
    return {"median": statistics.median(present), "min": min(present), "max": max(present),
            "runs": present}


#: Leaf frames where a thread waits rather than works: the event loop's selector, an
#: executor thread waiting for work, lock and condition waits.
IDLE_LEAVES = ("EpollSelector.select (", "_worker (concurrent/futures/thread.py:81)",
               "Condition.wait (", "_wait_for_tstate_lock (", "Event.wait (")


def profile_summary(lines: Iterable[str], top: int = 15,
                    focus: str = "tidings/") -> dict[str, Any]:
    """Where a process spent its samples, from py-spy's collapsed stacks.

    Each line is ``frame;frame;…;leaf <count>`` (root first; with ``--threads`` the
    first frame names the thread). Stacks whose leaf is a wait (``IDLE_LEAVES``) are
    counted as ``idle`` and left out of the rest. Returns, as shares of the busy
    samples: per thread, the ``top`` leaf frames by self samples, and the ``top`` frames
    whose text contains ``focus`` by inclusive samples (a frame counted once per stack).
    """
    busy = idle = 0
    threads: dict[str, int] = {}
    self_counts: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    for line in lines:
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = None
        if frames[0].startswith(("thread ", "process ")):
            thread, frames = frames[0], frames[1:] or frames
        if frames[-1].startswith(IDLE_LEAVES):
            idle += count
            continue
        busy += count
        if thread is not None:
            threads[thread] = threads.get(thread, 0) + count
        self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + count
        for frame in set(frames):
            if focus in frame:
                inclusive[frame] = inclusive.get(frame, 0) + count

    def ranked(counts: dict[str, int]) -> list[dict[str, Any]]:
        best = sorted(counts.items(), key=lambda item: item[1], reverse=True)[:top]
        return [{"frame": f, "samples": c, "share": round(c / busy, 3)} for f, c in best]

    return {"samples": busy + idle, "busy": busy, "idle": idle,
            "threads": {t: round(c / busy, 3) for t, c in threads.items()} if busy else {},
            "self": ranked(self_counts) if busy else [],
            "inclusive": ranked(inclusive) if busy else []}


#: Where a tidings worker's event-loop samples go, by the first matching frame of a
#: stack (checked in this order): the part of the delivery path each frame stands for.
DELIVERY_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up (imports, runtime)", ("_find_and_load", "build_runtime")),
    ("provider I/O (the Redis round trip)", ("io_round_trip",)),
    ("provider, rest (sandbox twin, sink)", ("SinkTwin.send",)),
    ("pacer (start slots, 429 pause looks)", ("Pacer.", "Sending._acquire")),
    ("send path (per-send task, decide, outcome)", ("Sending._send",)),
    ("receive, claim, compose", ("Claiming._take", "transport.receive", "Transport.receive",
                                 "Worker.run")),
    ("commit outcomes", ("Settling._commit_outcomes", "Settling._record", "Settling.flush")),
    ("ack, nack", ("Settling._message_ops",)),
    ("lease renewal", ("Claiming.renew",)),
    ("reconciler", ("reconcile_loop", "Reconciler.")),
)


def delivery_breakdown(lines: Iterable[str], thread: str = "MainThread") -> dict[str, float]:
    """Shares of one thread's samples by part of the delivery path (``DELIVERY_PARTS``;
    waiting in the selector is ``idle (waiting for I/O)``, the rest ``event loop,
    other``), from py-spy's collapsed stacks with ``--threads``."""
    counts: dict[str, int] = {}
    total = 0
    for line in lines:
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit() or thread not in stack.split(";", 1)[0]:
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        part = "event loop, other"
        if frames[-1].startswith(IDLE_LEAVES) or "select (selectors.py" in frames[-1]:
            part = "idle (waiting for I/O)"
        else:
            for name, marks in DELIVERY_PARTS:
                if any(mark in frame for frame in frames for mark in marks):
                    part = name
                    break
        counts[part] = counts.get(part, 0) + count
    return {part: round(c / total, 3) for part, c in
            sorted(counts.items(), key=lambda item: item[1], reverse=True)} if total else {}
