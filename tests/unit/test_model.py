"""Value types: keys, payload limits and the queue message format."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.errors import InvalidInput, MessageDecodeError
from tidings.core.keys import (
    campaign_key,
    campaign_key_maker,
    campaign_key_parts,
    check_recipient_ids,
)
from tidings.core.model import (
    MAX_PAYLOAD_BYTES,
    DraftPage,
    IntentDraft,
    Message,
    encode_data,
    message_body,
    message_body_parts,
    plain_keys,
)

_KEY_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
                    min_size=1, max_size=512).filter(lambda k: not any(c.isspace() for c in k))


@given(_KEY_TEXT)
def test_message_body_is_exactly_the_json_of_the_message(key: str) -> None:
    expected = json.dumps({"v": 1, "key": key}, separators=(",", ":"))
    assert message_body(key) == expected == Message(key=key).encode()
    assert Message.decode(message_body(key)).key == key
    head, tail = message_body_parts()
    assert head + json.dumps(key) + tail == expected


@given(st.lists(_KEY_TEXT, min_size=1, max_size=5))
def test_plain_keys_are_those_whose_bodies_quote_the_key_as_it_is(keys: list[str]) -> None:
    """What a store that builds bodies in SQL relies on: for plain keys the body is the
    head, the key in double quotes, the tail."""
    head, tail = message_body_parts()
    as_is = all(message_body(k) == f'{head}"{k}"{tail}' for k in keys)
    assert plain_keys(keys) == as_is
    assert plain_keys(["a/1/email/v1", 'b"q']) is False
    assert plain_keys(["a/1/email/v1", "b/2/sms/v1"]) is True


@pytest.mark.parametrize(("body", "problem"), [
    ("not json", "not JSON"),
    ("[1, 2]", "a JSON list, not an object"),
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


@pytest.mark.parametrize("bad", ["", "a/b", "a b", "a\tb", "x\n", "a\x00b", "\ud800", "a\x7f"])
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


_HOSTILE_BODIES = [
    "[" * 100_000 + "]" * 100_000,
    '{"v":1,"key":' + "[" * 5_000 + "]" * 5_000 + "}",
    '{"v":1,"key":"a\\u0000b"}',
    '{"v":1,"key":"\\ud800"}',
    '{"v":1,"key":"a\\u0007b"}',
    '{"v":1,"key":"a b"}',
    '{"v":1,"key":""}',
    '{"v":1,"key":"' + "k" * 513 + '"}',
    '{"v":true,"key":"k"}',
    '{"v":1.0,"key":"k"}',
    '{"v":1e999,"key":"k"}',
    '{"v":' + "9" * 5_000 + ',"key":"k"}',
    '{"v":1,"key":7}',
    '{"v":1,"key":null}',
    '{"v":1,"key":["k"]}',
    "null", "7", '"k"', "", "{",
    b"\xff\xfe{}",
    b'{"v":1,"key":"\xc3"}',
]


@pytest.mark.parametrize("body", _HOSTILE_BODIES)
def test_a_hostile_body_is_a_decode_error_with_a_reason(body: str | bytes) -> None:
    with pytest.raises(MessageDecodeError) as caught:
        Message.decode(body)

    assert str(caught.value) and str(caught.value).isprintable()


@given(st.one_of(st.binary(max_size=300), st.text(max_size=300),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                              | st.text(max_size=20),
                              lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(st.sampled_from(["v", "key", "x"]), inner,
                                                max_size=3)).map(json.dumps)))
def test_any_body_decodes_or_is_refused_with_a_printable_reason(body: str | bytes) -> None:
    try:
        message = Message.decode(body)
    except MessageDecodeError as exc:
        assert str(exc).isprintable()
    else:
        assert message.version == 1 and message.key
