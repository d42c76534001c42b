"""Value types: keys, payload limits and the queue message format."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.errors import InvalidInput, MessageDecodeError
from tidings.model import (
    MAX_PAYLOAD_BYTES,
    Message,
    campaign_key,
    campaign_key_maker,
    encode_data,
    message_body,
)


@given(st.text(min_size=1))
def test_message_body_is_exactly_the_json_of_the_message(key: str) -> None:
    expected = json.dumps({"v": 1, "key": key}, separators=(",", ":"))
    assert message_body(key) == expected == Message(key=key).encode()
    assert Message.decode(message_body(key)).key == key


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
