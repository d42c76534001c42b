"""Value types: keys, payload limits and the queue message format."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.errors import InvalidInput, MessageDecodeError
from tidings.model import (
    MAX_PAYLOAD_BYTES,
    DraftPage,
    IntentDraft,
    Message,
    campaign_key,
    campaign_key_maker,
    campaign_key_parts,
    check_recipient_ids,
    encode_data,
    message_body,
    message_body_parts,
)


@given(st.text(min_size=1))
def test_message_body_is_exactly_the_json_of_the_message(key: str) -> None:
    expected = json.dumps({"v": 1, "key": key}, separators=(",", ":"))
    assert message_body(key) == expected == Message(key=key).encode()
    assert Message.decode(message_body(key)).key == key
    head, tail = message_body_parts()
    assert head + json.dumps(key) + tail == expected


@pytest.mark.parametrize(("body", "problem"), [
    ("not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"v": 2, "key": "k"}', "v: unknown message version 2"),
    ('{"v": 1}', "key: missing"),
])
def test_a_foreign_message_is_refused_naming_the_problem(body: str, problem: str) -> None:
    with pytest.raises(MessageDecodeError, match=problem):
        Message.decode(body)


def test_campaign_keys_carry_the_whole_identity() -> None:
    assert campaign_key("weekly-digest", "2026-08-14", "cust_1042", "email", 3) == \
        "weekly-digest/2026-08-14/cust_1042/email/v3"
    make = campaign_key_maker("weekly-digest", "2026-08-14", "email", 3)
    assert make("cust_1042") == campaign_key("weekly-digest", "2026-08-14", "cust_1042",
                                             "email", 3)
    with pytest.raises(InvalidInput) as err:
        make("has space")
    assert err.value.field == "recipient.id"


def test_payload_over_256_kb_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        encode_data({"blob": "x" * MAX_PAYLOAD_BYTES}, "data")
    assert err.value.field == "data" and "limit is 262144" in err.value.message
    assert encode_data({}) == "{}"
    assert encode_data({"b": 1, "a": 2}) == '{"a":2,"b":1}'


@pytest.mark.parametrize("bad", ["", "a/b", "a b", "a\tb", "x\n"])
def test_a_recipient_id_that_cannot_be_in_a_key_is_named(bad: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_recipient_ids(["ok-1", bad, "ok-2"])

    assert caught.value.field == "recipient.id" and repr(bad) in caught.value.message


def test_good_recipient_ids_pass_in_one_scan() -> None:
    check_recipient_ids([f"cust_{i:06d}" for i in range(10_000)] + ["ünï", "a:b", "x@y"])
    check_recipient_ids([])


def test_a_draft_page_is_the_sequence_of_its_drafts() -> None:
    page = DraftPage(campaign="c", occurrence="c/2026-08-14", template="t/v2", due_at=5.0,
                     expires_at=None, channels=[
                         ("email", *campaign_key_parts("c", "2026-08-14", "email", 2)),
                         ("sms", *campaign_key_parts("c", "2026-08-14", "sms", 2))])
    page.rows += [(0, "r1", "r1@example.com", "{}"), (1, "r1", "+1555", '{"a":1}')]

    assert len(page) == 2
    assert page.keys() == [campaign_key("c", "2026-08-14", "r1", "email", 2),
                           campaign_key("c", "2026-08-14", "r1", "sms", 2)]
    assert page[1] == IntentDraft(key="c/2026-08-14/r1/sms/v2", channel="sms",
                                  recipient_id="r1", address="+1555", template="t/v2",
                                  data='{"a":1}', due_at=5.0, expires_at=None, campaign="c",
                                  occurrence="c/2026-08-14")
    assert list(page) == page[:] == [page[0], page[1]]
