"""The command line's text: local ISO times, and tables that fold instead of cutting."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from tidings.cli import textout
from tidings.core.model import Event, Intent
from tidings.core.states import State
from tidings.operate import operations
from tidings.operate.readmodel import Delivery


@pytest.fixture
def in_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_times_are_local_iso_with_their_offset(in_new_york: None) -> None:
    assert textout.when(1796103351.041) == "2026-12-01T00:35:51-05:00"
    assert textout.when(None) == "" and textout.when(None, empty="-") == "-"


def render(table: object, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue()


def first_column(text: str) -> list[str]:
    """The first column's cell text, line by line, borders stripped."""
    return [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]


@given(st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/_-", min_size=1,
                        max_size=70), min_size=1, max_size=4))
def test_a_table_at_80_columns_folds_every_cell_and_cuts_none(keys: list[str]) -> None:
    table = textout.table("key", "channel", "dead letters", "duplicates", "oldest (s)",
                          "SLI", "drain (s)", "paused")
    for key in keys:
        table.add_row(key, "email", "12", "3", "1,234.5", "99.95%", "12.00", "no")
    text = render(table)
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "".join(first_column(text)) == "".join(keys)


def test_whole_columns_stay_on_one_line() -> None:
    table = textout.table("at", "event", "worker", "detail", whole=("at",))
    at = "2026-12-01T09:40:50+01:00"
    table.add_row(at, "accepted", "host:4242:email:9f3a1c" * 3, "r_5d0c1b9e33a4f1c2")
    assert at in render(table)


def test_a_rate_limited_delivery_says_why_and_when_it_is_tried_again() -> None:
    key = "digest/2026-12-01/cust_1/email/v1"
    intent = Intent(key=key, channel="email", recipient_id="cust_1", address="c1@example.com",
                    template="digest", data="{}", campaign="digest", occurrence=None,
                    state=State.RETRYABLE, due_at=0.0, expires_at=None, created_at=0.0,
                    updated_at=3.0, selected_at=1.0, enqueued_at=2.0, accepted_at=None,
                    finished_at=None, attempts=1, failures=0, lease_owner=None, lease_token=1,
                    lease_expires_at=None, next_attempt_at=3600.0, receipt=None,
                    provider_request_id="req_42", disposition=None,
                    reason="HTTP 429: slow down", cancel_requested=False)
    delivery = Delivery(
        key=key, answers=operations.answers(intent), intent=operations.intent_view(intent),
        events=(Event(key=key, channel="email", type="rate_limited", at=3.0,
                      state="retryable", attempt=1, worker="w1", provider_request_id="req_42",
                      detail="r_5d0c1b9e33a4f1c2"),))
    lines, events = textout.inspected(delivery)
    text = "\n".join(lines)
    assert "reason     HTTP 429: slow down" in text
    assert f"retry at   {textout.when(3600.0)}" in text
    assert "request id req_42" in text
    assert "accepted   no" in text and "receipt" not in text
    assert "rate_limited" in render(events, width=200)


def test_texts_name_what_happened() -> None:
    assert textout.migrated("sqlite:///t.db", [1, 2], 2) == (
        "sqlite:///t.db: applied migrations 0001, 0002; schema version 2")
    assert textout.migrated("sqlite:///t.db", [], 6) == (
        "sqlite:///t.db: schema is current (version 6)")
    assert textout.cancelled({"a": "cancelled", "b": "accepted"}) == (
        "a: cancelled\nb: accepted, too late to cancel")
    assert textout.reconciled({"leases_expired": 2, "republished_lost": 0}) == (
        "reconciled: leases expired 2")


def test_data_without_text_of_its_own_prints_as_lines_not_json() -> None:
    text = textout.plain({"campaign": "digest", "admitted": 3, "paused": None,
                          "channels": ["email", "sms"]})
    assert text.splitlines() == ["campaign: digest", "admitted: 3", "paused:   -",
                                 'channels: ["email", "sms"]']
    assert textout.plain([]) == "" and textout.plain(7) == "7"


def test_a_table_too_wide_for_the_terminal_is_turned_a_quarter() -> None:
    headers = ("channel", *(f"measure {i}" for i in range(12)))
    rows = [("email", *(str(i) for i in range(12))), ("sms", *(str(10 * i) for i in range(12)))]
    console = Console(width=80, record=True)
    console.print(textout.fitted(headers, rows, width=80))
    lines = console.export_text().splitlines()
    assert any("channel" in line and "email" in line and "sms" in line for line in lines)
    assert any("measure 11" in line and "11" in line and "110" in line for line in lines)
    assert max(len(line) for line in lines) <= 80

    wide = Console(width=300, record=True)
    wide.print(textout.fitted(headers, rows, width=300))
    assert any("measure 0" in line and "measure 11" in line
               for line in wide.export_text().splitlines())
