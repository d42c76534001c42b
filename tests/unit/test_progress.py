"""What a long-running process tells at info: its start-up summary, progress lines while
it works, and the simulated time in both the summary and the log stamps."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.logcapture import json_logs, lines, restored_logging
from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.cron import Schedule
from tidings.core.logs import log_time, use_clock
from tidings.core.model import Recipient
from tidings.processes.progress import Tally, startup
from tidings.runtime import build_runtime

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

MONDAY_0830 = 1_796_632_200.0  # 2026-12-07T08:30:00Z, a Monday


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    with restored_logging():
        yield


async def test_the_summary_names_store_channels_quotas_and_the_next_occurrence(
        tmp_path: Path) -> None:
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}", "clock_offset_s": 86_400.0,
        "channels": {"email": {"quota": "50/s", "max_in_flight": 8, **TWIN},
                     "sms": {"quota": "5/s", **TWIN}}})
    digest = Campaign(name="digest", schedule=Schedule("0 9 * * 1", "UTC"),
                      channels=("email",), template="digest", version=1,
                      audience=GeneratorAudience(lambda: iter([Recipient(id="c1")])))
    async with await build_runtime(settings, clock=FakeClock(MONDAY_0830),
                                   campaigns=[digest]) as runtime:
        summary = startup(runtime, "scheduler")

    (head_event, head), *rest = summary
    assert head_event == "starting" and head["role"] == "scheduler"
    assert head["store"] == settings.store and head["channels"] == "email,sms"
    assert (head["simulated_now"], head["clock_offset_s"]) == (log_time(MONDAY_0830), 86_400.0)
    channels = {f["channel"]: f for e, f in rest if e == "channel"}
    assert (channels["email"]["quota"], channels["email"]["max_in_flight"]) == ("50/s", 8)
    [(_, campaign)] = [(e, f) for e, f in rest if e == "campaign"]
    assert campaign["next_occurrence"] == "2026-12-07"
    assert campaign["next_at"] == "2026-12-07T09:00:00Z" and campaign["next_in_s"] == 1800
    assert campaign["due_now"] is None  # last Monday is far past its grace period


async def test_a_worker_summarises_its_own_channel_only(tmp_path: Path) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}",
                               "channels": {"email": TWIN, "sms": TWIN}})
    async with await build_runtime(settings, clock=FakeClock(MONDAY_0830)) as runtime:
        summary = startup(runtime, "worker", channel="sms")
    assert [f["channel"] for e, f in summary if e == "channel"] == ["sms"]
    assert "simulated_now" not in summary[0][1]


def test_log_lines_carry_the_simulated_time_when_one_is_set() -> None:
    stream = json_logs("info")
    use_clock(FakeClock(MONDAY_0830))
    logging.getLogger("tidings.test").info("hello")
    [line] = lines(stream)
    assert line["timestamp"] == "2026-12-07T08:30:00.000000Z"


totals = st.lists(st.fixed_dictionaries({"accepted": st.integers(0, 3),
                                         "dead": st.integers(0, 2)}), max_size=30)


@given(totals)
def test_progress_lines_add_up_and_idle_is_said_once_per_lull(steps: list[dict[str, int]]
                                                              ) -> None:
    running = {"accepted": 0, "dead": 0}
    tally = Tally(last=dict(running))
    said: list[tuple[str, dict[str, int]]] = []
    for step in steps:
        running = {k: running[k] + step[k] for k in running}
        line = tally.step(dict(running))
        if line is not None:
            said.append(line)
    progress = [counts for event, counts in said if event == "progress"]
    assert sum(c.get("accepted", 0) for c in progress) == running["accepted"]
    assert sum(c.get("dead", 0) for c in progress) == running["dead"]
    assert all(counts for counts in progress)  # never an empty progress line
    events = [event for event, _ in said]
    assert "idle" not in [a for a, b in pairwise(events) if a == b]
    assert not events or events[0] == "progress"
