"""Provider payloads to normalized events: what each provider's reports become, which are
ignored, and malformed payloads refused naming the field."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest

from tidings.core.errors import InvalidInput
from tidings.stores.base import ProviderEvent, ProviderEventType
from tidings.webhooks.parse import (
    parse,
    parse_generic,
    parse_postmark,
    parse_resend,
    parse_sendgrid,
    parse_twilio,
    sendgrid_message_id,
)

NOW = 1_780_000_000.0
D, B, C, F = (ProviderEventType.DELIVERED, ProviderEventType.BOUNCED,
              ProviderEventType.COMPLAINED, ProviderEventType.FAILED)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def twilio_form(**fields: str) -> bytes:
    base = {"AccountSid": "AC123", "From": "+15550001111", "To": "+15557654321",
            "ApiVersion": "2010-04-01"}
    return urlencode({**base, **fields}).encode()


# ---------------------------------------------------------------- twilio


@pytest.mark.parametrize(("status", "kind", "detail", "bounce"), [
    ("delivered", D, "delivered", None),
    ("undelivered", B, "undelivered: ErrorCode 30003", "soft"),
    ("failed", F, "failed: ErrorCode 30003", None),
])
def test_a_twilio_final_status_becomes_an_event_at_the_time_received(
    status: str, kind: ProviderEventType, detail: str, bounce: str | None,
) -> None:
    code = "" if status == "delivered" else "30003"
    parsed = parse_twilio(twilio_form(MessageSid="SM0001", MessageStatus=status,
                                      ErrorCode=code), now=NOW)

    assert parsed.events == (ProviderEvent(provider="twilio", message_id="SM0001", type=kind,
                                           at=NOW, detail=detail, bounce=bounce),)
    assert parsed.ignored == 0


@pytest.mark.parametrize(("code", "bounce"), [("30005", "hard"), ("30006", "hard"),
                                              ("30003", "soft"), ("30008", "soft"),
                                              ("", "soft")])
def test_a_twilio_undelivered_status_is_classed_by_its_error_code(code: str,
                                                                  bounce: str) -> None:
    [event] = parse_twilio(twilio_form(MessageSid="SM0001", MessageStatus="undelivered",
                                       ErrorCode=code), now=NOW).events

    assert event.bounce == bounce


@pytest.mark.parametrize("status", ["queued", "sending", "sent", "accepted", "read"])
def test_a_twilio_intermediate_status_is_ignored_and_counted(status: str) -> None:
    parsed = parse_twilio(twilio_form(MessageSid="SM0001", MessageStatus=status), now=NOW)

    assert (parsed.events, parsed.ignored, parsed.ignored_kinds) == ((), 1, (status,))


def test_a_twilio_callback_with_only_the_older_names_is_understood() -> None:
    parsed = parse_twilio(urlencode({"SmsSid": "SM0002", "SmsStatus": "delivered"}).encode(),
                          now=NOW)

    assert [(e.message_id, e.type) for e in parsed.events] == [("SM0002", D)]


def test_a_twilio_json_callback_is_understood() -> None:
    parsed = parse_twilio(dumps({"MessageSid": "SM0003", "MessageStatus": "failed"}), now=NOW)

    assert [(e.message_id, e.type) for e in parsed.events] == [("SM0003", F)]


@pytest.mark.parametrize(("body", "field"), [
    (twilio_form(MessageSid="SM1"), "body.MessageStatus"),
    (twilio_form(MessageStatus="delivered"), "body.MessageSid"),
    (twilio_form(MessageSid="", MessageStatus="delivered"), "body.MessageSid"),
    (twilio_form(MessageSid="S M", MessageStatus="delivered"), "body.MessageSid"),
    (twilio_form(MessageSid="S" * 300, MessageStatus="delivered"), "body.MessageSid"),
    (b"\xff\xfe", "body"),
    (b'{"MessageSid": ', "body"),
])
def test_a_malformed_twilio_callback_names_the_field(body: bytes, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_twilio(body, now=NOW)

    assert refused.value.field == field


# ---------------------------------------------------------------- sendgrid


@pytest.mark.parametrize(("sg_message_id", "message_id"), [
    ("14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0", "14c5d75ce93.dfd.64b469"),
    ("W86EgYT6SQKk0lRflfLRsA.filterdrecv-p3las1-5bf99c48d-wvxn9-18-5C1D1D5C-1.0",
     "W86EgYT6SQKk0lRflfLRsA"),
    ("LRzXl66ZT2u7sw7gs_3tLg.recvd-5f54b5d587-ndlkm-1-5F32DE3C-1D.0", "LRzXl66ZT2u7sw7gs_3tLg"),
    ("W86EgYT6SQKk0lRflfLRsA", "W86EgYT6SQKk0lRflfLRsA"),
    ("filter.only", "filter.only"),
])
def test_the_sendgrid_message_id_is_the_x_message_id_prefix(sg_message_id: str,
                                                             message_id: str) -> None:
    assert sendgrid_message_id(sg_message_id) == message_id


def test_a_sendgrid_batch_maps_each_kind_and_ignores_the_rest() -> None:
    sg = "W86EgYT6SQKk0lRflfLRsA.filterdrecv-p3las1-1.0"
    body = dumps([
        {"email": "ada@example.com", "timestamp": 1780000100, "event": "processed",
         "sg_message_id": sg},
        {"email": "ada@example.com", "timestamp": 1780000101, "event": "delivered",
         "sg_message_id": sg, "response": "250 OK queued as <x@mx.example.net>"},
        {"email": "ada@example.com", "timestamp": 1780000102, "event": "open",
         "sg_message_id": sg},
        {"email": "bob@example.com", "timestamp": 1780000103, "event": "bounce", "type": "bounce",
         "status": "5.1.1", "reason": "550 5.1.1 <bob@example.com>: user unknown",
         "sg_message_id": "other.filter1"},
        {"email": "cy@example.com", "timestamp": 1780000104, "event": "dropped",
         "reason": "Bounced Address", "sg_message_id": "third.filter2"},
        {"email": "dee@example.com", "timestamp": 1780000105, "event": "spamreport",
         "sg_message_id": "fourth.filter3"},
        {"email": "ada@example.com", "timestamp": 1780000106, "event": "click",
         "sg_message_id": sg},
    ])

    parsed = parse_sendgrid(body, now=NOW)

    assert parsed.events == (
        ProviderEvent(provider="sendgrid", message_id="W86EgYT6SQKk0lRflfLRsA", type=D,
                      at=1780000101, detail="delivered: 250 OK queued as <[address]>"),
        ProviderEvent(provider="sendgrid", message_id="other", type=B, at=1780000103,
                      detail="bounce (bounce): 5.1.1: 550 5.1.1 <[address]>: user unknown",
                      bounce="hard"),
        ProviderEvent(provider="sendgrid", message_id="third", type=F, at=1780000104,
                      detail="dropped: Bounced Address"),
        ProviderEvent(provider="sendgrid", message_id="fourth", type=C, at=1780000105,
                      detail="spamreport"),
    )
    assert (parsed.ignored, parsed.ignored_kinds) == (3, ("click", "open", "processed"))


def test_no_sendgrid_detail_carries_an_address_or_a_number() -> None:
    body = dumps([{"event": "bounce", "sg_message_id": "m.filter", "timestamp": 1780000101,
                   "reason": "550 mailbox ada@example.com full, call +1 555 000 1111",
                   "type": "blocked"}])

    [event] = parse_sendgrid(body, now=NOW).events

    assert event.detail == "bounce (blocked): 550 mailbox [address] full, call [number]"
    assert event.bounce == "soft"  # a block is for now: it counts toward the threshold


@pytest.mark.parametrize(("payload", "field"), [
    ({"event": "delivered"}, "body"),
    ([{"event": "delivered", "sg_message_id": "m"}, "x"], "body[1]"),
    ([{"sg_message_id": "m"}], "body[0].event"),
    ([{"event": "delivered"}], "body[0].sg_message_id"),
    ([{"event": "delivered", "sg_message_id": 42}], "body[0].sg_message_id"),
    ([{"event": "bounce", "sg_message_id": "m", "timestamp": "yesterday"}],
     "body[0].timestamp"),
])
def test_a_malformed_sendgrid_batch_names_the_field(payload: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_sendgrid(dumps(payload), now=NOW)

    assert refused.value.field == field


def test_a_sendgrid_body_that_is_not_json_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_sendgrid(b"[{", now=NOW)

    assert (refused.value.field, refused.value.message[:11]) == ("body", "is not JSON")


# ---------------------------------------------------------------- postmark

POSTMARK_DELIVERY = {
    "RecordType": "Delivery", "ServerID": 23, "MessageStream": "outbound",
    "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483", "Recipient": "john@example.com",
    "Tag": "welcome-email", "DeliveredAt": "2019-11-05T16:33:54.9070259Z",
    "Details": "Test delivery webhook details", "Metadata": {"tidings_key": "k"},
}
POSTMARK_BOUNCE = {
    "RecordType": "Bounce", "ID": 42, "Type": "HardBounce", "TypeCode": 1,
    "Name": "Hard bounce", "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
    "Description": "The server was unable to deliver your message (ex: unknown user).",
    "Details": "smtp;550 5.1.1 <john@example.com>: user unknown",
    "Email": "john@example.com", "From": "sender@example.com",
    "BouncedAt": "2019-11-05T16:33:54.9070259Z",
}
POSTMARK_SPAM = {
    "RecordType": "SpamComplaint", "ID": 43, "Type": "SpamComplaint",
    "MessageID": "00000000-0000-0000-0000-000000000001", "Email": "john@example.com",
    "BouncedAt": "2014-08-01T13:28:10.2735393-04:00",
}


def test_postmark_delivery_bounce_and_complaint_records_map_to_events() -> None:
    delivered = parse_postmark(dumps(POSTMARK_DELIVERY), now=NOW).events
    bounced = parse_postmark(dumps(POSTMARK_BOUNCE), now=NOW).events
    complained = parse_postmark(dumps(POSTMARK_SPAM), now=NOW).events

    at = 1572971634.907025  # 2019-11-05T16:33:54.907025Z
    assert delivered == (ProviderEvent(
        provider="postmark", message_id="883953f4-6105-42a2-a16a-77a8eac79483", type=D,
        at=at, detail="Delivery: Test delivery webhook details"),)
    assert bounced == (ProviderEvent(
        provider="postmark", message_id="883953f4-6105-42a2-a16a-77a8eac79483", type=B,
        at=at, detail="Bounce: HardBounce: The server was unable to deliver your message "
                      "(ex: unknown user).", bounce="hard"),)
    assert [(e.message_id, e.type, e.at) for e in complained] == [
        ("00000000-0000-0000-0000-000000000001", C, 1406914090.273539)]
    assert all("john" not in (e.detail or "") for e in (*delivered, *bounced, *complained))


@pytest.mark.parametrize(("type_", "bounce"), [
    ("HardBounce", "hard"), ("BadEmailAddress", "hard"), ("SoftBounce", "soft"),
    ("Transient", "soft"), ("DnsError", "soft"), ("AutoResponder", "other"),
    ("AddressChange", "other")])
def test_a_postmark_bounce_is_classed_by_its_type(type_: str, bounce: str) -> None:
    [event] = parse_postmark(dumps({**POSTMARK_BOUNCE, "Type": type_}), now=NOW).events

    assert event.bounce == bounce


@pytest.mark.parametrize(("bounce", "expected"), [(None, None), ("soft", "soft"),
                                                  ("hard", "hard")])
def test_a_generic_bounce_may_say_how_it_is_classed(bounce: str | None,
                                                    expected: str | None) -> None:
    item = {"message_id": "m", "event": "bounced"} | ({} if bounce is None
                                                      else {"bounce": bounce})

    [event] = parse_generic(dumps(item), now=NOW).events

    assert event.bounce == expected


@pytest.mark.parametrize("item", [{"message_id": "m", "event": "bounced", "bounce": "maybe"},
                                  {"message_id": "m", "event": "bounced", "bounce": [1]},
                                  {"message_id": "m", "event": "delivered", "bounce": "hard"}])
def test_a_generic_bounce_class_that_is_not_one_is_refused_naming_it(
        item: dict[str, object]) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_generic(dumps(item), now=NOW)

    assert refused.value.field == "body.bounce"


@pytest.mark.parametrize("record", ["Open", "Click", "SubscriptionChange"])
def test_other_postmark_records_are_ignored(record: str) -> None:
    parsed = parse_postmark(dumps({"RecordType": record, "MessageID": "m"}), now=NOW)

    assert (parsed.events, parsed.ignored, parsed.ignored_kinds) == ((), 1, (record,))


@pytest.mark.parametrize(("payload", "field"), [
    ([POSTMARK_DELIVERY], "body"),
    ({"MessageID": "m"}, "body.RecordType"),
    ({"RecordType": "Bounce"}, "body.MessageID"),
    ({**POSTMARK_DELIVERY, "DeliveredAt": "last tuesday"}, "body.DeliveredAt"),
    ({**POSTMARK_BOUNCE, "BouncedAt": 1572971634}, "body.BouncedAt"),
])
def test_a_malformed_postmark_record_names_the_field(payload: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_postmark(dumps(payload), now=NOW)

    assert refused.value.field == field


# ---------------------------------------------------------------- generic


def test_a_generic_report_or_batch_maps_each_event() -> None:
    one = parse_generic(dumps({"message_id": "m-1", "event": "delivered", "at": 1780000001}),
                        now=NOW)
    batch = parse_generic(dumps([
        {"message_id": "m-2", "event": "bounced", "at": "2026-05-28T20:26:40Z",
         "detail": "mailbox full for ada@example.com"},
        {"message_id": "m-3", "event": "complained"},
        {"message_id": "m-4", "event": "failed", "at": 1780000002.5},
        {"message_id": "m-5", "event": "opened"},
    ]), now=NOW)

    assert one.events == (ProviderEvent(provider="generic", message_id="m-1", type=D,
                                        at=1780000001.0),)
    assert [(e.message_id, e.type, e.at, e.detail) for e in batch.events] == [
        ("m-2", B, 1780000000.0, "mailbox full for [address]"),
        ("m-3", C, NOW, None),
        ("m-4", F, 1780000002.5, None),
    ]
    assert (batch.ignored, batch.ignored_kinds) == (1, ("opened",))


@pytest.mark.parametrize(("payload", "field"), [
    ("delivered", "body"),
    ([{"message_id": "m", "event": "delivered"}, []], "body[1]"),
    ({"event": "delivered"}, "body.message_id"),
    ({"message_id": "m"}, "body.event"),
    ({"message_id": "m", "event": "bounced", "at": True}, "body.at"),
    ({"message_id": "m", "event": "bounced", "at": "soon"}, "body.at"),
    ([{"message_id": "m", "event": "failed", "detail": 7}], "body[0].detail"),
])
def test_a_malformed_generic_report_names_the_field(payload: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_generic(dumps(payload), now=NOW)

    assert refused.value.field == field


def test_parse_dispatches_by_provider_and_refuses_an_unknown_one() -> None:
    body = dumps({"message_id": "m", "event": "delivered"})

    assert parse("generic", body, now=NOW) == parse_generic(body, now=NOW)
    with pytest.raises(InvalidInput) as refused:
        parse("mailgun", body, now=NOW)
    assert refused.value.field == "provider"


# ---------------------------------------------------------------- resend

RESEND_BOUNCE = {
    "type": "email.bounced", "created_at": "2026-08-14T09:00:10.000Z",
    "data": {"email_id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
             "to": ["jane@example.com"], "subject": "Your receipt for jane@example.com",
             "bounce": {"message": "550 5.1.1 jane@example.com: no such user",
                        "subType": "Suppressed", "type": "Permanent"},
             "tags": {"tidings_key_sha256": "a" * 64}}}


@pytest.mark.parametrize(("kind", "bounce"), [("Permanent", "hard"), ("Transient", "soft"),
                                              ("Undetermined", "other")])
def test_a_resend_bounce_is_classed_by_its_type_and_names_no_address(
        kind: str, bounce: str) -> None:
    body = {**RESEND_BOUNCE, "data": {**RESEND_BOUNCE["data"],  # type: ignore[dict-item]
                                      "bounce": {"type": kind, "message": "jane@example.com"}}}
    parsed = parse_resend(dumps(body), now=NOW)
    [event] = parsed.events
    assert (event.provider, event.message_id, event.type, event.bounce) == (
        "resend", "4ef9a417-02e9-4d39-ad75-9611e0fcc33c", B, bounce)
    assert event.at == 1786698010.0 and "jane" not in (event.detail or "")
    # the key's digest, from the tag every send carries, witnesses the acceptance
    [evidence] = parsed.evidence
    assert evidence.key_sha256 == "a" * 64 and evidence.accepted


def test_resend_sends_opens_and_failures_only_witness_the_key() -> None:
    for kind, accepted in (("email.sent", True), ("email.opened", True),
                           ("email.failed", False)):
        parsed = parse_resend(dumps({**RESEND_BOUNCE, "type": kind}), now=NOW)
        assert parsed.events == () and parsed.ignored_kinds == (kind,)
        assert [e.accepted for e in parsed.evidence] == [accepted]


@pytest.mark.parametrize(("payload", "field"), [
    ([], "body"), ({"data": {}}, "body.type"), ({"type": "email.bounced"}, "body.data"),
    ({"type": "email.delivered", "data": {}}, "body.data.email_id")])
def test_a_malformed_resend_event_names_the_field(payload: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_resend(dumps(payload), now=NOW)
    assert caught.value.field == field
