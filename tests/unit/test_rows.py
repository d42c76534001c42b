"""Rows become records by column name, whatever order a query gives its columns."""

import dataclasses
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.errors import StoreError
from tidings.core.model import Intent
from tidings.core.states import State
from tidings.stores.base import Switch
from tidings.stores.rows import INTENT, SWITCH, Shape

INTENT_ROW = {
    "key": "k1:email", "channel": "email", "recipient_id": "r1", "address": "a@example.com",
    "template": "t", "data": "{}", "campaign": None, "occurrence": None, "state": "claimed",
    "due_at": 10.0, "expires_at": None, "created_at": 1.0, "updated_at": 2.0,
    "selected_at": 1.0, "enqueued_at": 1.5, "accepted_at": None, "finished_at": None,
    "attempts": 3, "failures": 1, "lease_owner": "w1", "lease_token": 7,
    "lease_expires_at": 40.0, "next_attempt_at": None, "receipt": None,
    "provider_request_id": None, "disposition": None, "reason": None, "cancel_requested": 1,
    "lane": 1, "group_key": "tenant-a",
}


def description(columns: list[str]) -> tuple[tuple[str, None, None, None, None, None, None], ...]:
    return tuple((name, None, None, None, None, None, None) for name in columns)


@given(st.permutations(list(INTENT_ROW)))
def test_an_intent_is_read_by_name_in_any_column_order(columns: list[str]) -> None:
    # given a row whose columns come in any order, with the stored forms of state and flag
    row = tuple(INTENT_ROW[name] for name in columns)

    # when it is read
    intent = INTENT.one(description(columns), row)

    # then every field has its column's value, converted where the store cannot say it
    expected = {**INTENT_ROW, "state": State.CLAIMED, "cancel_requested": True}
    assert intent == Intent(**expected)
    assert type(intent.state) is State and intent.cancel_requested is True


def test_a_missing_column_is_named_and_extra_columns_are_ignored() -> None:
    columns = [*INTENT_ROW, "extra"]
    columns.remove("lease_token")
    with pytest.raises(StoreError, match="lease_token"):
        INTENT.reader(description(columns))
    switch = SWITCH.one(description(["reason", "paused", "name", "scope", "changed_at", "x"]),
                        (None, 0, "email", "channel", 5.0, "ignored"))
    assert switch == Switch(scope="channel", name="email", paused=False, changed_at=5.0,
                            reason=None)


def test_one_reader_per_column_list() -> None:
    columns = description(["scope", "name", "paused", "changed_at", "reason"])
    assert SWITCH.reader(columns) is SWITCH.reader(list(columns))
    assert SWITCH.reader(columns) is not SWITCH.reader(columns[::-1])


def test_a_converter_must_name_a_field() -> None:
    with pytest.raises(ValueError, match="paused_at"):
        Shape(Switch, {"paused_at": bool})


def test_sqlite_cursor_descriptions_are_read_as_they_come() -> None:
    # given a real cursor whose query names its columns out of field order
    conn = sqlite3.connect(":memory:")
    cursor = conn.execute("SELECT 1 AS paused, 'email' AS name, 'channel' AS scope, "
                          "NULL AS reason, 2.5 AS changed_at")
    # then the shape reads it by those names
    assert SWITCH.all(cursor.description, cursor) == [
        Switch(scope="channel", name="email", paused=True, changed_at=2.5, reason=None)]
    conn.close()


def test_a_record_field_name_is_never_taken_from_the_database() -> None:
    # A column named like code is just an unknown column: only the record's fields are read.
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class One:
        value: int

    shape = Shape(One)
    assert shape.one(description(["value", "__import__('os')"]), (4, 5)) == One(value=4)
