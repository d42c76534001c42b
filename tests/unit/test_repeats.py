"""The rules of a notify repeated under its key (tidings.core.repeats): the same request
again is the same intent, any other request under that key is a KeyConflict naming the
first field that differs. Pure: no store; what a store holds is ``body_of`` the first
request's drafts, as the stores read it back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tidings.admission.intake import NotifyRequest, asked_of, asked_of_many
from tidings.core.errors import InvalidInput, KeyConflict
from tidings.core.keys import canonical_json
from tidings.core.repeats import (
    Asked,
    IntentBody,
    Notified,
    body_of,
    check_repeats,
    difference,
    guard_for,
    notified,
)

NOW = 1_800_000_000.0
CHANNELS = {"email": "email", "sms": "sms", "push": "email"}
WHO = {"id": "c1", "email": "c1@example.com", "phone": "+15550100123"}


def request(**change: Any) -> NotifyRequest:
    fields: dict[str, Any] = {"key": "order-1", "channels": ["email"],
                              "template": "receipt/v1", "recipient": dict(WHO),
                              "data": {"total": 12, "items": ["a", "b"]}}
    fields.update(change)
    return NotifyRequest(**fields)


def ask(r: NotifyRequest, *, now: float = NOW, where: str = "") -> Asked:
    return asked_of(r, known_channels=CHANNELS, now=now, where=where)


def held_by(r: NotifyRequest, *, at: float = NOW) -> dict[str, IntentBody]:
    """What a store holds once ``r`` was written at ``at``."""
    return {d.key: body_of(d, created_at=at) for d in ask(r, now=at).drafts}


def differs(first: NotifyRequest, then: NotifyRequest, *, later: float = 3600.0
            ) -> str | None:
    """The field ``then`` (asked ``later`` seconds after) differs from ``first`` in."""
    found = difference(ask(then, now=NOW + later), held_by(first))
    return None if found is None else found[0]


# ---------------------------------------------------------------- the same request


def test_the_same_request_again_is_the_same_even_an_hour_later() -> None:
    assert differs(request(), request()) is None
    assert differs(request(channels=["email", "sms"]), request(channels=["sms", "email"])) is None


def test_data_in_another_key_order_is_the_same_data() -> None:
    first = request(data={"a": 1, "b": {"x": [1, 2], "y": None}})
    again = request(data={"b": {"y": None, "x": [1, 2]}, "a": 1})
    assert differs(first, again) is None


def test_data_held_in_another_spelling_is_still_the_same() -> None:
    # A row written before data was canonical (spaces, another order) is the same data.
    held = held_by(request(data={"a": 1, "b": 2}))
    spelled = {k: IntentBody(**{**vars(b), "data": '{"b": 2,  "a": 1}'}) for k, b in held.items()}
    assert difference(ask(request(data={"a": 1, "b": 2})), spelled) is None


def test_no_data_and_empty_data_are_the_same() -> None:
    assert differs(request(data=None), request(data={})) is None


def test_the_recipients_own_fields_are_data() -> None:
    first = request(recipient={**WHO, "name": "Ann"}, data={"total": 1})
    assert differs(first, request(recipient=dict(WHO), data={"total": 1, "name": "Ann"})) is None
    assert differs(first, request(recipient={**WHO, "name": "Bob"},
                                  data={"total": 1})) == "data.name"


def test_nothing_held_is_no_difference() -> None:
    assert difference(ask(request()), {}) is None
    assert difference(ask(request()), held_by(request(key="order-2"))) is None


# ---------------------------------------------------------------- each field


@pytest.mark.parametrize(("change", "field"), [
    ({"template": "receipt/v2"}, "template"),
    ({"data": {"total": 13, "items": ["a", "b"]}}, "data.total"),
    ({"data": {"total": 12, "items": ["b", "a"]}}, "data.items"),
    ({"data": {"total": 12}}, "data.items"),
    ({"data": {"total": 12, "items": ["a", "b"], "extra": 0}}, "data.extra"),
    ({"data": {"total": 12.0, "items": ["a", "b"]}}, "data.total"),
    ({"data": {"total": "12", "items": ["a", "b"]}}, "data.total"),
    ({"data": {}}, "data.items"),
    ({"recipient": {**WHO, "id": "c2"}}, "recipient.id"),
    ({"recipient": {**WHO, "email": "other@example.com"}}, "recipient.email"),
    ({"expires_at": NOW + 86_400}, "expires_at"),
    ({"due_at": NOW + 60}, "due_at"),
    ({"channels": ["email", "sms"]}, "channels"),
    ({"channels": ["sms"]}, "channels"),
])
def test_a_changed_field_is_named(change: dict[str, Any], field: str) -> None:
    assert differs(request(), request(**change)) == field


def test_the_phone_is_named_on_an_sms_channel() -> None:
    first = request(channels=["sms"])
    assert differs(first, request(channels=["sms"],
                                  recipient={**WHO, "phone": "+15550100999"})) == "recipient.phone"
    # The email is no part of an SMS intent: changing it is the same request.
    assert differs(first, request(channels=["sms"],
                                  recipient={**WHO, "email": "x@example.com"})) is None


def test_a_channel_is_addressed_by_kind_not_name() -> None:
    first = request(channels=["push"])
    assert differs(first, request(channels=["push"], recipient={
        **WHO, "email": "other@example.com"})) == "recipient.email"


def test_fewer_or_other_channels_than_held_is_a_conflict() -> None:
    first = request(channels=["email", "sms"])
    assert differs(first, request(channels=["email"])) == "channels"
    assert differs(first, request(channels=["push"])) == "channels"
    assert differs(first, request(channels=["email", "sms", "push"])) == "channels"


def test_expiry_given_then_left_out_is_a_conflict_both_ways() -> None:
    assert differs(request(expires_at=NOW + 7200), request(), later=60) == "expires_at"
    assert differs(request(), request(expires_at=NOW + 7200), later=60) == "expires_at"
    assert differs(request(expires_at=NOW + 7200), request(expires_at=NOW + 7200),
                   later=60) is None


# ---------------------------------------------------------------- due_at given or not


def test_due_left_out_means_now_whenever_it_is_asked() -> None:
    # First at NOW with no due time; again a day later with none: the same request.
    assert differs(request(), request(), later=86_400) is None


def test_due_left_out_does_not_match_an_intent_written_for_later() -> None:
    assert differs(request(due_at=NOW + 600), request(), later=1) == "due_at"


def test_due_given_must_be_the_same_instant() -> None:
    assert differs(request(due_at=NOW + 600), request(due_at=NOW + 600)) is None
    assert differs(request(due_at=NOW + 600), request(due_at=NOW + 601)) == "due_at"
    # Left out at first (due at NOW): given as NOW is the same, given as later is not.
    assert differs(request(), request(due_at=NOW), later=10) is None
    assert differs(request(), request(due_at=NOW + 10), later=10) == "due_at"


def test_a_due_time_message_says_both_times_and_never_the_data() -> None:
    with pytest.raises(KeyConflict) as caught:
        check_repeats([ask(request(data={"secret": "s3cr3t"}), now=NOW + 1)],
                      held_by(request(due_at=NOW + 600, data={"secret": "s3cr3t"})), now=NOW)
    assert caught.value.field == "due_at"
    assert "not given (now)" in caught.value.message
    message = str(caught.value)
    assert "s3cr3t" not in message and "order-1" in message


def test_a_data_conflict_message_names_key_and_field_not_values() -> None:
    with pytest.raises(KeyConflict) as caught:
        check_repeats([ask(request(data={"card": "4111-1111"}))],
                      held_by(request(data={"card": "5500-0000"})), now=NOW)
    error = caught.value
    assert isinstance(error, InvalidInput)
    assert (error.key, error.field) == ("order-1", "data.card")
    assert "4111" not in str(error) and "5500" not in str(error)


# ---------------------------------------------------------------- batches


def batch(*requests: NotifyRequest) -> list[Asked]:
    return asked_of_many(list(requests), known_channels=CHANNELS, now=NOW)


def test_two_requests_of_a_batch_under_one_key_that_differ_conflict() -> None:
    asked = batch(request(key="k-0"), request(), request(data={"total": 99, "items": ["a", "b"]}))
    with pytest.raises(KeyConflict) as caught:
        check_repeats(asked, {}, now=NOW)
    assert caught.value.field == "requests[2].data.total"
    assert caught.value.key == "order-1"


def test_two_equal_requests_of_a_batch_are_one_intent() -> None:
    asked = batch(request(), request(data={"items": ["a", "b"], "total": 12}))
    check_repeats(asked, {}, now=NOW)
    [first, second] = notified(asked, created=["order-1:email"])
    assert (first.created, first.existing) == (("order-1:email",), ())
    assert (second.created, second.existing) == ((), ("order-1:email",))


def test_a_batch_conflicts_on_channels_with_an_earlier_request_of_it() -> None:
    asked = batch(request(channels=["email", "sms"]), request(channels=["email"]))
    with pytest.raises(KeyConflict) as caught:
        check_repeats(asked, {}, now=NOW)
    assert caught.value.field == "requests[1].channels"


def test_the_guard_reads_every_declared_channels_key() -> None:
    guard = guard_for(batch(request(), request(key="order-2", channels=["sms"])), now=NOW)
    assert set(guard.keys) == {f"{k}:{c}" for k in ("order-1", "order-2") for c in CHANNELS}
    assert len(guard.keys) == len(set(guard.keys))
    guard.check({})
    with pytest.raises(KeyConflict):
        guard.check(held_by(request(key="order-2", template="other/v1")))


# ---------------------------------------------------------------- Notified


def test_notified_is_a_list_with_created_and_existing_in_channel_order() -> None:
    answer = Notified(["k:sms", "k:email"], created=["k:email"])
    assert answer == ["k:sms", "k:email"] and isinstance(answer, list)
    assert answer.created == ("k:email",) and answer.existing == ("k:sms",)
    assert json.dumps(answer) == '["k:sms", "k:email"]'
    assert "created=['k:email']" in repr(answer)
    assert Notified().created == () and Notified() == []


def test_notified_attributes_each_created_key_to_one_request() -> None:
    asked = batch(request(channels=["email", "sms"]), request(key="order-2"),
                  request(channels=["sms", "email"]))
    answers = notified(asked, created=["order-1:email", "order-1:sms"])
    assert [list(a) for a in answers] == [["order-1:email", "order-1:sms"], ["order-2:email"],
                                          ["order-1:sms", "order-1:email"]]
    assert [a.created for a in answers] == [("order-1:email", "order-1:sms"), (), ()]
    assert [a.existing for a in answers] == [(), ("order-2:email",),
                                             ("order-1:sms", "order-1:email")]


# ---------------------------------------------------------------- fuzzed

#: Text a store holds (no NUL, no lone surrogate; notify refuses those, tested apart).
CHARS = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
JSON_LEAF = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
             | st.floats(allow_nan=False, allow_infinity=False) | st.text(CHARS, max_size=8))
JSON_VALUE = st.recursive(
    JSON_LEAF, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(CHARS, max_size=5), inner, max_size=3), max_leaves=8)
NAMES = st.text(CHARS, min_size=1, max_size=6)
DATA = st.dictionaries(NAMES, JSON_VALUE, min_size=1, max_size=6)


def reordered(value: Any, order: list[int]) -> Any:
    """``value`` with every object's members in another order (same JSON)."""
    if isinstance(value, Mapping):
        items = list(value.items())
        if items:
            shift = order[0] % len(items) if order else 0
            items = items[shift:] + items[:shift]
            items.reverse()
        return {k: reordered(v, order[1:]) for k, v in items}
    if isinstance(value, list):
        return [reordered(v, order) for v in value]
    return value


@settings(max_examples=150, deadline=None)
@given(DATA, st.lists(st.integers(0, 10), max_size=4))
def test_fuzz_the_same_data_in_any_order_never_conflicts(data: dict[str, Any],
                                                          order: list[int]) -> None:
    again = reordered(data, order)
    assert again == data
    first, then = request(data=data), request(data=again)
    assert differs(first, then) is None
    check_repeats(batch(first, then), {}, now=NOW)


@settings(max_examples=150, deadline=None)
@given(DATA, st.data())
def test_fuzz_a_changed_top_level_value_names_it(data: dict[str, Any],
                                                 draw: st.DataObject) -> None:
    name = draw.draw(st.sampled_from(sorted(data)))
    value = draw.draw(JSON_VALUE)
    assume(canonical_json(value) != canonical_json(data[name]))
    changed = {**data, name: value}
    assert differs(request(data=data), request(data=changed)) == f"data.{name}"
    with pytest.raises(KeyConflict) as caught:
        check_repeats(batch(request(data=data), request(data=changed)), {}, now=NOW)
    assert caught.value.field == f"requests[1].data.{name}"


@settings(max_examples=100, deadline=None)
@given(DATA, NAMES, JSON_VALUE)
def test_fuzz_an_added_or_removed_name_is_named(data: dict[str, Any], name: str,
                                                value: Any) -> None:
    assume(name not in data)
    assert differs(request(data=data), request(data={**data, name: value})) == f"data.{name}"
    assert differs(request(data={**data, name: value}), request(data=data)) == f"data.{name}"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8),
       st.lists(st.integers(0, 2), min_size=8, max_size=8))
def test_fuzz_a_batch_conflicts_exactly_when_two_requests_of_one_key_differ(
        keys: list[str], totals: list[int]) -> None:
    requests = [request(key=k, data={"total": totals[i]}) for i, k in enumerate(keys)]
    first_total: dict[str, int] = {}
    expected = None
    for i, k in enumerate(keys):
        if first_total.setdefault(k, totals[i]) != totals[i]:
            expected = f"requests[{i}].data.total"
            break
    asked = batch(*requests)
    if expected is None:
        check_repeats(asked, {}, now=NOW)
        created = [f"{k}:email" for k in dict.fromkeys(keys)]
        answers = notified(asked, created)
        assert sum(len(a.created) for a in answers) == len(created)
        assert all(len(a) == len(a.created) + len(a.existing) for a in answers)
    else:
        with pytest.raises(KeyConflict) as caught:
            check_repeats(asked, {}, now=NOW)
        assert caught.value.field == expected
