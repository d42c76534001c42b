"""One query vocabulary: the same names in both dialects, each used by its whole name.

A name that exists in one dialect only must be listed below with the reason it has no
twin; the list is the vocabulary's exceptions, and a name added to one dialect alone,
or renamed in one, fails here until the other follows or the list says why not.
"""

import ast
from pathlib import Path

import pytest

from tidings.stores import queries

SRC = Path(__file__).resolve().parents[2] / "src" / "tidings"

DIALECT_ONLY: dict[str, dict[str, str]] = {
    "sqlite": {
        # The SQLite database thread drives its transactions by statement; psycopg's
        # conn.transaction() does it on PostgreSQL.
        "connect": "connection PRAGMAs (WAL, busy timeout) run once per connection",
        "begin_write": "BEGIN IMMEDIATE: take the one write lock up front",
        "busy_wait_ours": "around BEGIN IMMEDIATE, the wait for another process's writer "
                          "is tidings' own (tried again 0.2-2 ms apart); PostgreSQL's "
                          "writers wait on row locks in the server",
        "busy_wait_sqlite": "everything else waits on SQLite's busy handler as opened",
        "begin_read": "BEGIN DEFERRED: one snapshot for a read",
        "commit": "ends a statement-driven transaction",
        "rollback": "ends a statement-driven transaction",
        # SQLite binds drafts as one multi-row VALUES statement; PostgreSQL COPYs them into
        # a temporary stage (intent_admit_fresh/_staged and the *_stage_* names). A
        # campaign page is intent_admit_page(_enqueued) in both, from bound values here,
        # from its stage there.
        "intent_admit_values": "multi-row VALUES insert of a page (no COPY in SQLite)",
        "intent_admit_values_enqueued": "the same, born enqueued",
        "event_insert_keys": "admission's events, one statement a channel (PostgreSQL "
                             "writes them inside its intent_admit_* statements)",
        "message_insert_keys": "admission's queue messages, one statement a channel "
                               "(PostgreSQL writes them inside intent_admit_page_enqueued)",
        "message_publish_many": "a publish, each message in its intent's lane (PostgreSQL's "
                                "message_insert_many does both, a NULL lane meaning the "
                                "intent's)",
        "message_receive_group": "one group of a shared lane a statement (PostgreSQL takes "
                                 "every group's share in one: message_receive_groups)",
        # SQLite has no data-modifying CTE: what PostgreSQL does in one statement takes
        # two here.
        "intent_mark_enqueued_events": "the events half of intent_mark_enqueued",
        "message_dead_letter_copy": "first half of message_dead_letter",
        "message_dead_letter_delete": "second half of message_dead_letter",
        "dead_letter_redrive_copy": "first half of dead_letter_redrive",
        "dead_letter_redrive_delete": "second half of dead_letter_redrive",
        "dead_letter_count": "PostgreSQL's queue_depth returns the dead letters as a column",
    },
    "postgresql": {
        "clock_now": "the server's clock; a SQLite store's clock is the kernel's, read "
                     "from a file write beside the database (stores/file_clock.py)",
        "message_receive_groups": "every group's share of a shared lane in one statement "
                                  "(SQLite: message_receive_group, one a group)",
        # A SQLite worker holds no session a peer could end or lose and take again.
        "worker_disconnect": "ends the sessions of a worker declared gone",
        "worker_relock": "takes the marker lock again on a new connection",
        # A caller's own transaction is joined on PostgreSQL alone (SQLite's store writes
        # through its one connection, in its own thread).
        "join_identity": "which database and search_path a connection has",
        "join_search_path": "the store's search_path, set locally around a join's writes",
        # Admission stages a page by COPY into temporary tables, then inserts from them.
        "admit_stage_create": "temporary stage for whole drafts",
        "admit_stage_copy": "COPY into that stage",
        "admit_stage_clear": "empty that stage between two admissions in one transaction",
        "admit_page_stage_create": "temporary stage for a page's columns",
        "admit_page_stage_copy": "COPY into that stage",
        "intent_admit_fresh": "insert staged drafts, no key existing yet",
        "intent_admit_fresh_enqueued": "the same, born enqueued with their messages",
        "intent_admit_staged": "insert staged drafts skipping existing keys",
        "intent_admit_staged_enqueued": "the same, born enqueued with their messages",
        # One statement where SQLite needs two (data-modifying CTEs).
        "message_dead_letter": "SQLite: message_dead_letter_copy + _delete",
        "dead_letter_redrive": "SQLite: dead_letter_redrive_copy + _delete",
        # SQLite's executemany binds rows in C; psycopg's adapts each row in Python.
        "event_insert_columns": "many events in one statement, an array per column",
        "intent_apply_columns": "many changes in one statement, an array per field",
        # Row locks and advisory locks: SQLite has one writer, so nothing to lock.
        "relay_lock": "advisory lock: one relay lease statement at a time",
        "relay_plan": "planner settings: walk the state index, never sort the outbox",
        "relay_probe_plan": "planner settings: probe intents by primary key, never hash "
                            "the outbox",
        "intent_release_publish": "ends a page's lease row (migration 0013); SQLite's "
                                  "lease is a column of each intent",
        "intent_lock_keys": "lock a batch's rows in key order (no deadlock)",
        "pacer_lock": "SELECT ... FOR UPDATE of a channel's pacer row",
        "pacer_ensure": "create the pacer row so that it can be locked",
        "migrations_lock": "advisory lock: one migrator at a time across machines",
        # LISTEN/NOTIFY wakes receivers when messages become ready.
        "queue_notify": "NOTIFY a queue's listeners",
        "listen_ready": "LISTEN for ready messages",
        "listen_schema": "the schema LISTEN channels are named in",
        # The events table is partitioned by day on PostgreSQL only (migration 0009);
        # SQLite deletes a pruned intent's events row-wise with it.
        "event_partitions": "the events table's partitions",
        "event_partitions_detached": "tables a stopped prune detached but did not drop",
        "event_partition_lock": "advisory lock: one partition change at a time",
        "event_partition_lock_timeout": "no long wait for the table's lock",
        "event_default_has_range": "a range the default partition holds rows of",
        "event_partition_create": "create a day partition ahead",
        "event_partition_detach": "detach a partition before it is dropped",
        "event_partition_count": "a detached partition's events, and those kept",
        "event_partition_rescue": "keep a partition's events of no intent",
        "event_partition_drop": "drop a detached partition",
        "event_orphans_delete": "a kept partition's events of pruned intents, row-wise",
    },
}

#: The modules that run each dialect's queries.
USERS = {
    "sqlite": ["stores/sqlite.py", "stores/sqlite_admission.py", "stores/sqlite_api.py",
               "stores/sqlite_base.py", "stores/sqlite_ledger.py",
               "stores/sqlite_records.py", "stores/sqlite_retention.py",
               "stores/sqlite_db.py", "stores/reads.py",
               "transports/sqlite.py", "stores/sqlite_liveness.py",
               "stores/sqlite_suppressions.py", "stores/sqlite_throttles.py",
               "stores/digest_steps.py"],
    "postgresql": ["stores/postgres.py", "stores/postgres_admission.py", "stores/postgres_join.py",
                   "stores/postgres_api.py", "stores/postgres_base.py",
                   "stores/postgres_ledger.py", "stores/postgres_records.py",
                   "stores/postgres_retention.py", "stores/postgres_db.py",
                   "stores/reads.py", "transports/postgres.py",
                   "transports/postgres_listen.py", "stores/postgres_liveness.py",
                   "stores/postgres_suppressions.py", "stores/postgres_throttles.py",
                   "stores/digest_steps.py"],
}


def literals(paths: list[str]) -> set[str]:
    """Every string constant in the modules, whole (an f-string's parts are not)."""
    found: set[str] = set()
    for path in paths:
        tree = ast.parse((SRC / path).read_text("utf-8"))
        joined = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                  for part in node.values}
        found |= {node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in joined}
    return found


def test_every_name_is_in_both_dialects_or_listed_with_its_reason() -> None:
    sqlite, postgresql = set(queries.load("sqlite")), set(queries.load("postgresql"))
    assert sorted(sqlite - postgresql) == sorted(DIALECT_ONLY["sqlite"])
    assert sorted(postgresql - sqlite) == sorted(DIALECT_ONLY["postgresql"])
    assert all(DIALECT_ONLY[d].values() for d in DIALECT_ONLY)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_every_name_is_used_whole(dialect: str) -> None:
    # A name never written whole in the code that runs the dialect is either dead or
    # assembled at run time (sql[f"{stage}_create"]): either way, not one vocabulary.
    used = literals(USERS[dialect])
    unused = sorted(name for name in queries.load(dialect) if name not in used)
    assert unused == []


def test_the_check_sees_an_assembled_name() -> None:
    # given a module that builds a name from parts
    tree = 'sql[f"{stage}_create"]; sql["intent_admit_staged" + suffix]'
    constants = {node.value for node in ast.walk(ast.parse(tree))
                 if isinstance(node, ast.Constant)}
    # then neither whole name is among its literals
    assert "admit_stage_create" not in constants
    assert "intent_admit_staged_enqueued" not in constants
