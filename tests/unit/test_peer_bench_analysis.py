"""The peer benchmark's arithmetic (bench/peers/analysis.py): windows, utilisation, sink logs.

The module is pure standard library, so it is tested here without the peer venv.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "peers" / "analysis.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers_analysis", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


analysis = _load()


def test_silent_seconds_between_windows_count_zero() -> None:
    assert analysis.windows({"100": 3, "103": 1}) == {100: 3, 101: 0, 102: 0, 103: 1}
    assert analysis.windows({}) == {}


def test_a_run_exactly_at_quota_uses_all_of_it_and_breaks_nothing() -> None:
    # given 50 requests in each of 20 seconds, a partial second at each end
    requests = {1000: 12, **{w: 50 for w in range(1001, 1021)}, 1021: 7}
    # when the pacing figures are computed with every request accepted
    figures = analysis.pacing_figures(requests, requests, 50)
    # then the partial first and last windows are left out of the utilisation
    assert figures["utilisation"] == 1.0
    assert figures["steady_windows"] == 20
    assert figures["windows_over_quota"] == 0
    assert figures["max_rate_1s"] == 50
    assert figures["span_s"] == 22


def test_overshoot_counts_refused_requests_but_utilisation_counts_accepted_ones() -> None:
    # given a burst of 120 requests in one second, of which the sandbox accepted 50
    requests = {10: 5, 11: 120, 12: 40, 13: 40, 14: 3}
    accepted = {10: 5, 11: 50, 12: 40, 13: 40, 14: 3}
    figures = analysis.pacing_figures(requests, accepted, 50)
    # then one window is over quota, and utilisation is (50 + 40 + 40) / 3 / 50
    assert figures["max_rate_1s"] == 120
    assert figures["windows_over_quota"] == 1
    assert figures["utilisation"] == pytest.approx(0.867, abs=1e-3)
    assert figures["requests"] == 208 and figures["accepted"] == 138


def test_a_gap_in_the_middle_of_a_run_lowers_utilisation() -> None:
    accepted = {0: 10, 1: 50, 3: 50, 4: 10}  # second 2 silent (e.g. a 429 pause)
    figures = analysis.pacing_figures(accepted, accepted, 50)
    assert figures["steady_windows"] == 3
    assert figures["utilisation"] == pytest.approx(100 / 3 / 50, abs=1e-3)


def test_no_requests_gives_no_utilisation() -> None:
    figures = analysis.pacing_figures({}, {}, 50)
    assert figures["utilisation"] is None and figures["max_rate_1s"] == 0


def test_sink_log_counts_each_job_once_and_reports_repeats() -> None:
    lines = ["-2 99.0", "0 100.5", "1 100.7", "1 101.0", "3 102.25", "7 103.0", "5 10"]
    # ids < 0 are warm-up jobs, ids >= n are not part of the run, a torn line is skipped
    summary = analysis.parse_sink(lines, n=5)
    assert summary.done == 3
    assert summary.records == 4
    assert summary.repeats == 1
    assert summary.first_at == 100.5 and summary.last_at == 102.25


def test_rate_and_summary() -> None:
    assert analysis.rate(1000, 2.0) == 500.0
    assert analysis.rate(1000, 0.0) is None and analysis.rate(5, None) is None
    assert analysis.summarise([3, None, 1, 2]) == {"median": 2, "min": 1, "max": 3,
                                                   "runs": [3, 1, 2]}
    assert analysis.summarise([None])["median"] is None


def test_series_fills_silent_windows_relative_to_the_start() -> None:
    xs, ys = analysis.series({"101": 2, "103": 4}, start=100.0)
    assert xs == [1.0, 2.0, 3.0] and ys == [2, 0, 4]


def test_profile_summary_leaves_waits_out_and_ranks_the_focus_frames() -> None:
    lines = [
        "thread (1): MainThread;run (asyncio/runners.py:1);"
        "EpollSelector.select (selectors.py:468) 40",
        "thread (1): MainThread;run (asyncio/runners.py:1);"
        "Claiming._take (tidings/delivery/claiming.py:9);"
        "loads (json/__init__.py:3) 30",
        "thread (2): db;_worker (concurrent/futures/thread.py:81) 20",
        "thread (2): db;_worker (concurrent/futures/thread.py:83);"
        "Store.apply (tidings/stores/sqlite.py:5) 10",
        "a torn line",
    ]
    summary = analysis.profile_summary(lines, top=5)
    assert summary["idle"] == 60 and summary["busy"] == 40
    assert summary["threads"] == {"thread (1): MainThread": 0.75, "thread (2): db": 0.25}
    assert summary["self"][0] == {"frame": "loads (json/__init__.py:3)", "samples": 30,
                                  "share": 0.75}
    assert [row["frame"] for row in summary["inclusive"]] == [
        "Claiming._take (tidings/delivery/claiming.py:9)",
        "Store.apply (tidings/stores/sqlite.py:5)"]


def test_delivery_breakdown_names_the_part_of_the_path_of_each_main_thread_sample() -> None:
    lines = [
        "thread (1): MainThread;run;Sending._send (tidings/delivery/sending.py:1);"
        "SinkTwin.send (t.py:2);"
        "io_round_trip (jobs.py:3);Redis.execute_command (r.py:4) 6",
        "thread (1): MainThread;run;Sending._send (tidings/delivery/sending.py:1);"
        "decide (s.py:9) 2",
        "thread (1): MainThread;run;Pacer.acquire (tidings/delivery/pacing/pacer.py:1) 1",
        "thread (1): MainThread;run;EpollSelector.select (selectors.py:468) 1",
        "thread (2): tidings-sqlite_0;_worker;SqliteDatabase._transaction (x.py:1) 50",
    ]

    parts = analysis.delivery_breakdown(lines)

    assert parts == {"provider I/O (the Redis round trip)": 0.6,
                     "send path (per-send task, decide, outcome)": 0.2,
                     "pacer (start slots, 429 pause looks)": 0.1,
                     "idle (waiting for I/O)": 0.1}
