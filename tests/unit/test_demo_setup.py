"""The demo knows its totals before admission starts, and cleans up after itself."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.demo.data import seed_customers
from tidings.demo.run import (
    CAMPAIGN,
    clean_up,
    expected_intents,
    notify_shipments,
    settings_for,
    simulated_offset,
)
from tidings.runtime import build_runtime

NOW = 1_796_000_000.0


async def test_the_totals_known_up_front_are_the_intents_the_demo_makes(
        tmp_path: Path) -> None:
    customers = seed_customers(tmp_path / "customers.db", 700, seed=3)
    offset = simulated_offset(NOW)
    settings = Settings.parse(settings_for(tmp_path, f"sqlite:///{tmp_path / 't.db'}",
                                           customers.path, "http://127.0.0.1:9", offset))
    clock = FakeClock(NOW + offset)
    async with await build_runtime(settings, clock=clock) as runtime:
        expected = expected_intents(customers)
        await notify_shipments(runtime, customers, random.Random(3))
        scheduler = runtime.scheduler()
        while (await scheduler.run_pass(now=clock.now())).more:
            pass
        [occurrence] = await runtime.store.occurrence_list(CAMPAIGN)
        assert occurrence.status == "done"
        made = {channel: sum(by_state.values())
                for channel, by_state in (await runtime.store.intent_counts()).items()}
    assert made == expected


def test_the_work_folder_goes_unless_it_is_kept(tmp_path: Path) -> None:
    kept, removed = tmp_path / "kept", tmp_path / "removed"
    for folder in (kept, removed):
        folder.mkdir()
        (folder / "tidings.db").write_bytes(b"x")
        (folder / "email-1.log").write_text("log\n")
    assert clean_up(kept, keep=True) == ["email-1.log", "tidings.db"]
    assert (kept / "tidings.db").exists()
    assert clean_up(removed, keep=False) == []
    assert not removed.exists()


def test_a_small_run_still_meets_some_429s_and_a_large_one_keeps_its_share() -> None:
    from tidings.demo.run import MIN_EXPECTED_429, SANDBOX, sandbox_config

    for sends in (104, 2_160, 10_000):
        assert sandbox_config(sends)["rate_limit"] * sends >= MIN_EXPECTED_429 - 0.01
    assert sandbox_config(86_000)["rate_limit"] == SANDBOX["rate_limit"]
    assert sandbox_config(2_160)["quotas"] == SANDBOX["quotas"]


@pytest.mark.parametrize(("given", "base"), [
    ("redis://127.0.0.1:6379/9", "redis://127.0.0.1:6379/9?prefix=tidings-demo-"),
    ("redis://127.0.0.1:6379/9?prefix=live", "redis://127.0.0.1:6379/9?prefix=live-demo-"),
    ("amqp://guest:guest@127.0.0.1/?prefix=tidings",
     "amqp://guest:guest@127.0.0.1/?prefix=tidings-demo-"),
])
def test_the_demo_never_works_under_a_prefix_it_was_given(given: str, base: str) -> None:
    # the demo removes everything under its prefix at the end: a prefix in use (given,
    # or the default one) must get a suffix of the demo's own, a new one each run
    from tidings.demo.run import demo_transport

    first, second = demo_transport(given), demo_transport(given)
    assert first.startswith(base) and second.startswith(base) and first != second
    assert demo_transport("sql") == "sql"
