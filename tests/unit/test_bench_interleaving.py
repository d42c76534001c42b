"""The arithmetic of bench/embedded_drain.py and bench/transactional_notify.py: rounds
that alternate which side goes first, and a drain rate read from polled counts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import embedded_drain
import transactional_notify


def test_rounds_split_n_into_whole_calls_and_alternate_the_first_side() -> None:
    assert transactional_notify.round_sizes(2000, 10) == [200] * 10
    assert transactional_notify.round_sizes(7, 3) == [3, 2, 2]
    assert transactional_notify.round_sizes(2, 5) == [1, 1]
    assert [transactional_notify.order_of(r, ("a", "b", "c")) for r in range(3)] == [
        ("a", "b", "c"), ("c", "b", "a"), ("a", "b", "c")]
    with pytest.raises(ValueError):
        transactional_notify.round_sizes(0, 1)


def test_notify_added_is_each_side_less_its_floor() -> None:
    def side(wall: float, cpu: float) -> dict[str, object]:
        return {"wall_us": wall, "cpu_us": cpu, "rounds_us": [wall, wall]}

    got = transactional_notify.figures({
        "raw": side(1000, 500), "sqlalchemy": side(1300, 900),
        "raw_floor": side(400, 100), "sqlalchemy_floor": side(650, 450)})
    assert got["ratio"] == 1.3 and got["round_ratios"] == [1.3, 1.3]
    assert got["floor_ratio"] == 1.625 and got["cpu_ratio"] == 1.8
    assert got["notify_added"] == {"raw": {"wall_us": 600, "cpu_us": 400},
                                   "sqlalchemy": {"wall_us": 650, "cpu_us": 450}}


def test_drain_modes_alternate_from_round_to_round() -> None:
    assert embedded_drain.run_order(3) == ["embedded", "worker", "worker", "embedded",
                                           "embedded", "worker"]
    assert embedded_drain.run_order(2, ("a", "b", "c")) == ["a", "b", "c", "c", "b", "a"]


def test_store_figures_weigh_each_round_by_its_time_and_pair_rounds_with_the_worker() -> None:
    def run(mode: str, counted: int, drain_s: float, cpu: dict[str, float]) -> dict[str, object]:
        return {"mode": mode, "counted": counted, "drain_s": drain_s,
                "rate_per_s": counted / drain_s, "cpu_ms_per_1000": cpu}

    runs = [run("embedded", 1000, 1.0, {"drainer": 600}),
            run("worker", 1000, 0.5, {"drainer": 400, "app": 10}),
            run("worker", 1000, 1.5, {"drainer": 500, "app": 10}),
            run("embedded", 1000, 1.0, {"drainer": 500})]
    got = embedded_drain.store_figures(runs, ("embedded", "worker"))
    assert got["rate_per_s"] == {"embedded": 1000.0, "worker": 1000.0}
    assert got["cpu_ms_per_1000"] == {"embedded": 550.0, "worker": 460.0}
    versus = got["vs_worker"]["embedded"]
    assert versus["ratio"] == 1.0 and versus["round_ratios"] == [0.5, 1.5]
    assert versus["median_round_ratio"] == 1.0 and versus["cpu_ratio"] == round(550 / 460, 3)


def test_the_drain_rate_runs_from_the_first_send_seen_to_the_last() -> None:
    # Start-up (no send yet) and polls after the last send are left out.
    samples = [(0.0, 0), (1.0, 0), (1.5, 100), (2.5, 600), (3.5, 1000), (4.0, 1000)]
    rate, span, counted = embedded_drain.drain_rate(samples, 1000)
    assert (rate, span, counted) == (450.0, 2.0, 900)
    with pytest.raises(ValueError):
        embedded_drain.drain_rate([(0.0, 0), (1.0, 10)], 1000)


def test_percentile_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert embedded_drain.percentile(values, 0.5) == 50.0
    assert embedded_drain.percentile(values, 0.99) == 99.0
    assert embedded_drain.percentile([3.0], 0.99) == 3.0
    assert embedded_drain.percentile([], 0.5) == 0.0
