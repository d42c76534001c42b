"""``model.evolve``: ``dataclasses.replace`` for the hot path, and the same answer."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.model import Intent, evolve
from tidings.core.states import State

BASE = Intent(
    key="weekly-digest/2026-08-14/cust_1042/email/v3", channel="email", recipient_id="c1",
    address="c1@example.com", template="digest@v3", data="{}", campaign="weekly-digest",
    occurrence="weekly-digest/2026-08-14", state=State.ENQUEUED, due_at=1.0,
    expires_at=None, created_at=1.0, updated_at=1.0, selected_at=1.0, enqueued_at=1.0,
    accepted_at=None, finished_at=None, attempts=0, failures=0, lease_owner=None,
    lease_token=0, lease_expires_at=None, next_attempt_at=None, receipt=None,
    provider_request_id=None, disposition=None, reason=None, cancel_requested=False)

CHANGES = st.fixed_dictionaries({}, optional={
    "state": st.sampled_from(list(State)),
    "lease_owner": st.none() | st.text(max_size=20),
    "lease_token": st.integers(min_value=0, max_value=2**62),
    "lease_expires_at": st.none() | st.floats(allow_nan=False),
    "attempts": st.integers(min_value=0, max_value=1000),
    "updated_at": st.floats(allow_nan=False),
})


@given(CHANGES)
def test_evolve_answers_as_replace_does(changes: dict[str, Any]) -> None:
    evolved = evolve(BASE, **changes)
    assert evolved == replace(BASE, **changes)
    assert type(evolved) is Intent
    assert {f.name: getattr(evolved, f.name) for f in fields(Intent)} == {
        f.name: changes.get(f.name, getattr(BASE, f.name)) for f in fields(Intent)}


def test_evolve_leaves_the_original_as_it_was() -> None:
    evolved = evolve(BASE, state=State.CLAIMED, lease_token=1)
    assert (BASE.state, BASE.lease_token) == (State.ENQUEUED, 0)
    assert (evolved.state, evolved.lease_token) == (State.CLAIMED, 1)
    with pytest.raises(AttributeError):
        evolved.state = State.ACCEPTED  # type: ignore[misc]


def test_a_name_that_is_no_field_is_refused() -> None:
    with pytest.raises(TypeError, match=r"no field.*'stat'"):
        evolve(BASE, stat=State.CLAIMED)
