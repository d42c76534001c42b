"""SQLite's plans for the reads of a growing ledger, held to their index.

tidings never runs ``ANALYZE``, so SQLite plans with no statistics; for the prune it
took ``intents_state`` (every terminal intent) and sorted them in a temporary B-tree,
seconds a batch on a ledger of a million, inside the write transaction. Each read of
intents here names ``intents_created`` and reads the oldest rows first; the age span is
two probes of that index, not a scan of it. An operator's look-up of one recipient
goes by ``intents_recipient`` (migration 0020), not a scan of every intent. A digest
close pass reads the live windows by ``digest_windows_due``, not every window ever
closed (it did, every half second, inside the closer's write transaction), and chooses
its page in that index alone (migration 0023): it looked up every live window's row for
its state, a table page each, 203 pages a pass with 200 windows open.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tidings.core.retention import PENDING_STATES, PRUNABLE_STATES
from tidings.stores.sqlite_db import SqliteDatabase

PARAMS = {"cutoff": 1_800_000_000.0, "states": json.dumps(PRUNABLE_STATES), "limit": 2000,
          "pending": json.dumps(PENDING_STATES), "recipient_id": "cust_42",
          "now": 1_800_000_000.0}


@pytest.fixture
async def plans(tmp_path: Path) -> dict[str, str]:
    """Each retention query's EXPLAIN QUERY PLAN on a migrated, empty ledger, one text."""
    db = SqliteDatabase(str(tmp_path / "plans.db"))
    try:
        await db.migrate(now=0.0)
        names = ("retention_prune_intents", "retention_count_intents",
                 "retention_count_events", "retention_oldest_kept", "intent_age_span",
                 "intent_find_by_recipient", "digest_due", "digest_claim")

        def explain(conn: sqlite3.Connection) -> dict[str, str]:
            out = {}
            for name in names:
                sql = db.sql[name]
                params = {k: v for k, v in PARAMS.items() if f":{k}" in sql}
                rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
                out[name] = "\n".join(str(row[-1]) for row in rows)
            return out

        return await db.read(explain)
    finally:
        await db.close()


@pytest.mark.parametrize("name", ["retention_prune_intents", "retention_count_intents",
                                  "retention_count_events"])
def test_a_read_of_old_intents_goes_by_creation_time(plans: dict[str, str], name: str) -> None:
    plan = plans[name]
    assert "USING INDEX intents_created (created_at<?)" in plan, plan
    assert "intents_state" not in plan, plan


def test_the_oldest_kept_intent_is_the_first_in_creation_order(plans: dict[str, str]) -> None:
    # A walk of intents_created from its start that stops at the first kept row.
    plan = plans["retention_oldest_kept"]
    assert "SCAN intents USING INDEX intents_created" in plan, plan
    assert "intents_state" not in plan and "TEMP B-TREE" not in plan, plan


def test_a_prune_batch_sorts_nothing(plans: dict[str, str]) -> None:
    plan = plans["retention_prune_intents"]
    assert "TEMP B-TREE" not in plan, plan


def test_the_age_span_is_two_probes(plans: dict[str, str]) -> None:
    plan = plans["intent_age_span"]
    assert plan.count("SEARCH intents USING COVERING INDEX intents_created") == 2, plan
    assert "SCAN intents" not in plan, plan


def test_one_recipients_deliveries_are_found_by_its_index(plans: dict[str, str]) -> None:
    plan = plans["intent_find_by_recipient"]
    assert "SEARCH intents USING INDEX intents_recipient (recipient_id=?)" in plan, plan


@pytest.mark.parametrize("name", ["digest_due", "digest_claim"])
def test_a_close_pass_reads_only_the_live_windows(plans: dict[str, str], name: str) -> None:
    plan = plans[name]
    assert "SCAN digest_windows USING COVERING INDEX digest_windows_due" in plan, plan
    assert "SCAN digest_windows\n" not in plan + "\n", plan


@pytest.mark.parametrize("name", ["digest_due", "digest_claim"])
def test_a_close_pass_chooses_its_page_in_the_index_alone(plans: dict[str, str],
                                                          name: str) -> None:
    # The index holds the state the page's WHERE reads: no live window's row is looked
    # up but those of the page (found by their key), and the index's order is the
    # page's order. digest_due sorts the rows of its page (at most ``limit``) once read;
    # the claim's caller sorts what it took.
    plan = plans[name].splitlines()
    assert "SCAN digest_windows USING COVERING INDEX digest_windows_due" in plan, plan
    assert "SEARCH digest_windows USING PRIMARY KEY (window_id=?)" in plan, plan
    assert not any(line.startswith("SCAN digest_windows USING INDEX") for line in plan), plan
    sorts = sum("TEMP B-TREE" in line for line in plan)
    assert sorts == (1 if name == "digest_due" else 0), plan
