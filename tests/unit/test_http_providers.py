"""The HTTP adapters' requests, exactly as each API expects them, and their special answers.

Every adapter here runs over ``httpx.MockTransport``; what the common scenarios map
to is the conformance suite's job (tests/conformance/test_provider.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from urllib.parse import parse_qs, quote

import httpx
import pytest
from pydantic import SecretStr

from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, Outcome, Permanent, RateLimited, Transient, Uncertain
from tidings.core.redaction import MAX_REASON_CHARS, redact
from tidings.providers.http import HttpJsonProvider
from tidings.providers.http_outcomes import NO_MESSAGE_ID, outcome_for_status
from tidings.providers.postmark import PostmarkProvider
from tidings.providers.sendgrid import SendGridProvider
from tidings.providers.twilio import TwilioProvider

KEY = "weekly-digest/2026-08-14/cust_1042/email/v3"
EMAIL = "ada@example.com"
PHONE = "+15551234567"
SID = "AC0123456789abcdef0123456789abcdef"
CONTENT = Content(subject="Digest", text="Three things.", html="<p>Three things.</p>")

Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A MockTransport handler that keeps each request and answers ``response``."""

    def __init__(self, response: httpx.Response | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.response = response or httpx.Response(200, json={"id": "m1"})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.response

    @property
    def only(self) -> httpx.Request:
        (request,) = self.requests
        return request


def client(handler: Handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def send_request(to: str = EMAIL, key: str = KEY, content: Content | None = CONTENT,
                 data_json: str = '{"items":[1,2]}') -> SendRequest:
    return SendRequest(key=key, channel="email", to=to, template="digest", data_json=data_json,
                       recipient_id="cust_1042", content=content)


# ---------------------------------------------------------------- the shared mapping


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Accepted(receipt="m1", request_id="r1")),
        (201, Accepted(receipt="m1", request_id="r1")),
        (429, RateLimited(retry_after_s=3.0, request_id="r1", reason="HTTP 429: slow")),
        (401, Transient(reason="HTTP 401: slow (credentials refused)", request_id="r1")),
        (408, Transient(reason="HTTP 408: slow", request_id="r1")),
        (409, Transient(reason="HTTP 409: slow", request_id="r1")),
        (425, Transient(reason="HTTP 425: slow", request_id="r1")),
        (400, Permanent(reason="HTTP 400: slow", request_id="r1")),
        (403, Permanent(reason="HTTP 403: slow", request_id="r1")),
        (422, Permanent(reason="HTTP 422: slow", request_id="r1")),
        (500, Transient(reason="HTTP 500: slow", request_id="r1")),
        (503, Transient(reason="HTTP 503: slow", request_id="r1")),
        (302, Transient(reason="HTTP 302: slow", request_id="r1")),
    ],
)
def test_status_to_outcome(status: int, expected: Outcome) -> None:
    assert outcome_for_status(status, receipt="m1", retry_after="3", reason="slow",
                              request_id="r1", now=0.0) == expected


def test_a_2xx_without_a_message_id_is_still_accepted() -> None:
    assert outcome_for_status(202, receipt=None, retry_after=None, reason=None,
                              request_id=None, now=0.0) == Accepted(receipt=NO_MESSAGE_ID)
    assert outcome_for_status(202, receipt=None, retry_after=None, reason=None,
                              request_id="r9", now=0.0) == Accepted(receipt="r9",
                                                                    request_id="r9")


def test_redact_removes_recipient_addresses_numbers_and_secrets() -> None:
    text = ("550 <Ada@Example.com> unknown; also bob@other.example and +44 20 7946 0958; "
            "number 15551234567 token=tok-12345")
    cleaned = redact(text, address=EMAIL, secrets=["tok-12345", "ab"])
    assert cleaned == ("550 <[recipient]> unknown; also [address] and [number]; "
                       "number 15551234567 token=[secret]")
    assert redact("call 15551234567", address=PHONE) == "call [recipient]"
    assert len(redact("x" * 1000)) == MAX_REASON_CHARS
    assert redact("a\r\n  b\tc") == "a b c"


# ---------------------------------------------------------------- Twilio


def twilio(handler: Handler, **options: object) -> TwilioProvider:
    settings: dict[str, object] = {"from_number": "+15550001111", **options}
    return TwilioProvider(account_sid=SID, auth_token="tw-token", channel="sms",
                          client=client(handler), clock=FakeClock(), **settings)  # type: ignore[arg-type]


async def test_twilio_posts_the_messages_api_form_with_basic_auth() -> None:
    recorder = Recorder(httpx.Response(201, json={"sid": "SM123", "status": "queued"},
                                       headers={"Twilio-Request-Id": "RQabc"}))
    outcome = await twilio(recorder, status_callback="https://hooks.test/twilio").send(
        send_request(to=PHONE))
    assert outcome == Accepted(receipt="SM123", request_id="RQabc")
    sent = recorder.only
    assert sent.method == "POST"
    assert str(sent.url) == f"https://api.twilio.com/2010-04-01/Accounts/{SID}/Messages.json"
    assert sent.headers["Authorization"] == "Basic " + base64.b64encode(
        f"{SID}:tw-token".encode()).decode()
    assert sent.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert sent.headers["I-Twilio-Idempotency-Token"] == KEY
    assert parse_qs(sent.content.decode()) == {
        "To": [PHONE], "From": ["+15550001111"], "Body": ["Three things."],
        # the status callback names the key: Twilio echoes it, signed, on every status
        "StatusCallback": [f"https://hooks.test/twilio?tidings_key={quote(KEY, safe='')}"]}


async def test_twilio_messaging_service_and_api_key() -> None:
    recorder = Recorder(httpx.Response(201, json={"sid": "SM1"}))
    provider = twilio(recorder, from_number=None, messaging_service_sid="MG42",
                      api_key_sid="SK9", base_url="http://127.0.0.1:9/")
    await provider.send(send_request(to=PHONE))
    sent = recorder.only
    assert str(sent.url) == f"http://127.0.0.1:9/2010-04-01/Accounts/{SID}/Messages.json"
    assert sent.headers["Authorization"] == "Basic " + base64.b64encode(b"SK9:tw-token").decode()
    assert parse_qs(sent.content.decode()) == {"To": [PHONE], "MessagingServiceSid": ["MG42"],
                                               "Body": ["Three things."]}


async def test_twilio_needs_a_sender() -> None:
    with pytest.raises(ConfigurationError) as caught:
        twilio(Recorder(), from_number=None)
    assert caught.value.field == "from_number"


async def test_twilio_queue_overflow_is_rate_limited_and_a_bad_number_permanent() -> None:
    full = await twilio(lambda r: httpx.Response(400, json={
        "code": 21611, "message": f"This 'From' number has exceeded the queue, to {PHONE}",
        "status": 400})).send(send_request(to=PHONE))
    assert full == RateLimited(reason="HTTP 400: Twilio error 21611: This 'From' number has "
                                      "exceeded the queue, to [recipient]")
    bad = await twilio(lambda r: httpx.Response(400, json={
        "code": 21211, "message": f"The 'To' number {PHONE} is not a valid phone number.",
        "status": 400})).send(send_request(to=PHONE))
    assert bad == Permanent(reason="HTTP 400: Twilio error 21211: The 'To' number "
                                   "[recipient] is not a valid phone number.")


async def test_twilio_stop_is_permanent_with_the_code_the_worker_suppresses_on() -> None:
    from tidings.core.outcomes import RECIPIENT_STOPPED

    stopped = await twilio(lambda r: httpx.Response(400, json={
        "code": 21610, "message": f"Attempt to send to unsubscribed recipient {PHONE}",
        "status": 400}, headers={"Twilio-Request-Id": "RQ1"})).send(send_request(to=PHONE))

    assert stopped == Permanent(
        reason="HTTP 400: Twilio error 21610: Attempt to send to unsubscribed recipient "
               "[recipient]", request_id="RQ1", code=RECIPIENT_STOPPED)


async def test_twilio_percent_encodes_a_key_that_is_not_plain_ascii() -> None:
    recorder = Recorder(httpx.Response(201, json={"sid": "SM1"}))
    await twilio(recorder).send(send_request(to=PHONE, key="café:100%:sms"))
    assert recorder.only.headers["I-Twilio-Idempotency-Token"] == "caf%C3%A9:100%25:sms"


# ---------------------------------------------------------------- SendGrid


def sendgrid(handler: Handler, **options: object) -> SendGridProvider:
    return SendGridProvider(api_key=SecretStr("SG.key"), from_address="news@tidings.test",
                            channel="email", client=client(handler), clock=FakeClock(),
                            **options)  # type: ignore[arg-type]


async def test_sendgrid_posts_v3_mail_send_with_the_key_in_custom_args_and_a_header() -> None:
    recorder = Recorder(httpx.Response(202, headers={"X-Message-Id": "sg-77"}))
    provider = sendgrid(recorder, from_name="Tidings", reply_to="help@tidings.test")
    outcome = await provider.send(send_request())
    assert outcome == Accepted(receipt="sg-77")
    sent = recorder.only
    assert str(sent.url) == "https://api.sendgrid.com/v3/mail/send"
    assert sent.headers["Authorization"] == "Bearer SG.key"
    assert sent.headers["Content-Type"] == "application/json"
    assert "Idempotency-Key" not in sent.headers  # SendGrid has none
    assert json.loads(sent.content) == {
        "personalizations": [{"to": [{"email": EMAIL}]}],
        "from": {"email": "news@tidings.test", "name": "Tidings"},
        "reply_to": {"email": "help@tidings.test"},
        "subject": "Digest",
        "content": [{"type": "text/plain", "value": "Three things."},
                    {"type": "text/html", "value": "<p>Three things.</p>"}],
        "custom_args": {"tidings_key": KEY},
        "headers": {"X-Tidings-Key": KEY},
    }


async def test_sendgrid_text_only_and_its_error_list() -> None:
    recorder = Recorder(httpx.Response(400, json={"errors": [
        {"message": f"Does not contain a valid address: {EMAIL}", "field": "x"},
        {"message": "The subject is required", "field": "subject"}]}))
    outcome = await sendgrid(recorder).send(send_request(content=Content(text="hi")))
    body = json.loads(recorder.only.content)
    assert "subject" not in body
    assert body["content"] == [{"type": "text/plain", "value": "hi"}]
    assert outcome == Permanent(reason="HTTP 400: Does not contain a valid address: "
                                       "[recipient]; The subject is required")


# ---------------------------------------------------------------- Postmark


def postmark(handler: Handler, **options: object) -> PostmarkProvider:
    return PostmarkProvider(server_token="pm-token", from_address="news@tidings.test",
                            channel="email", client=client(handler), clock=FakeClock(),
                            **options)  # type: ignore[arg-type]


async def test_postmark_posts_email_with_the_server_token_and_metadata() -> None:
    recorder = Recorder(httpx.Response(200, json={"MessageID": "pm-1", "ErrorCode": 0,
                                                  "Message": "OK"}))
    provider = postmark(recorder, from_name="Tidings", message_stream="digests",
                        reply_to="help@tidings.test")
    assert await provider.send(send_request()) == Accepted(receipt="pm-1")
    sent = recorder.only
    assert str(sent.url) == "https://api.postmarkapp.com/email"
    assert sent.headers["X-Postmark-Server-Token"] == "pm-token"
    assert sent.headers["Accept"] == "application/json"
    assert json.loads(sent.content) == {
        "From": "Tidings <news@tidings.test>", "To": EMAIL, "Subject": "Digest",
        "TextBody": "Three things.", "HtmlBody": "<p>Three things.</p>",
        "MessageStream": "digests", "ReplyTo": "help@tidings.test",
        "Metadata": {"tidings_key": KEY},
        "Headers": [{"Name": "X-Tidings-Key", "Value": KEY}],
    }


async def test_postmark_metadata_holds_a_long_key_by_its_digest() -> None:
    recorder = Recorder(httpx.Response(200, json={"MessageID": "pm-1", "ErrorCode": 0}))
    key = "k" * 200
    await postmark(recorder).send(send_request(key=key))
    body = json.loads(recorder.only.content)
    assert body["Metadata"] == {"tidings_key_sha256": hashlib.sha256(key.encode()).hexdigest()}
    assert body["Headers"] == [{"Name": "X-Tidings-Key", "Value": key}]


@pytest.mark.parametrize(
    ("status", "code", "outcome_type"),
    [
        (422, 406, Permanent),    # inactive recipient
        (422, 300, Permanent),    # invalid email request
        (422, 405, Transient),    # the account may not send (credits): fix, then redrive
        (422, 412, Transient),
        (401, 10, Transient),     # bad server token
        (429, 429, RateLimited),
        (200, 406, Permanent),    # an error code on a 2xx is still an error
    ],
)
async def test_postmark_error_codes(status: int, code: int, outcome_type: type) -> None:
    words = f"Found inactive addresses: {EMAIL}. Token pm-token."
    outcome = await postmark(lambda r: httpx.Response(
        status, json={"ErrorCode": code, "Message": words},
        headers={"Retry-After": "7"})).send(send_request())
    assert type(outcome) is outcome_type
    assert isinstance(outcome, Permanent | Transient | RateLimited)
    assert outcome.reason.startswith(f"HTTP {status}: Postmark ErrorCode {code}: ")
    assert EMAIL not in outcome.reason and "pm-token" not in outcome.reason
    if isinstance(outcome, RateLimited):
        assert outcome.retry_after_s == 7.0


async def test_postmark_non_json_errors_map_by_status() -> None:
    outcome = await postmark(lambda r: httpx.Response(503, text="Service Unavailable")).send(
        send_request())
    assert outcome == Transient(reason="HTTP 503: Service Unavailable")


# ---------------------------------------------------------------- generic JSON


def generic(handler: Handler, **options: object) -> HttpJsonProvider:
    settings: dict[str, object] = {
        "url": "https://mailer.test/v2/send",
        "body": {"message.to": "to", "message.subject": "subject", "message.text": "text",
                 "message.html": "html", "meta.key": "key", "meta.vars": "data"},
        **options}
    return HttpJsonProvider(channel="email", client=client(handler), clock=FakeClock(),
                            **settings)  # type: ignore[arg-type]


async def test_generic_builds_the_configured_body_and_headers() -> None:
    recorder = Recorder(httpx.Response(200, json={"result": {"messages": [{"id": "g-1"}]}},
                                       headers={"X-Trace": "tr-5"}))
    provider = generic(recorder, method="put", static={"from": "news@tidings.test",
                                                       "meta.source": "tidings"},
                       headers={"Authorization": SecretStr("Bearer g-secret"),
                                "X-Account": "acct-1"},
                       idempotency_header="X-Idempotency", message_id_path="result.messages.0.id",
                       request_id_header="X-Trace")
    outcome = await provider.send(send_request())
    assert outcome == Accepted(receipt="g-1", request_id="tr-5")
    sent = recorder.only
    assert (sent.method, str(sent.url)) == ("PUT", "https://mailer.test/v2/send")
    assert sent.headers["Authorization"] == "Bearer g-secret"
    assert sent.headers["X-Account"] == "acct-1"
    assert sent.headers["X-Idempotency"] == KEY
    assert json.loads(sent.content) == {
        "from": "news@tidings.test",
        "message": {"to": EMAIL, "subject": "Digest", "text": "Three things.",
                    "html": "<p>Three things.</p>"},
        "meta": {"source": "tidings", "key": KEY, "vars": {"items": [1, 2]}},
    }
    assert "g-secret" not in repr(provider)


async def test_generic_static_objects_are_not_changed_by_a_send() -> None:
    recorder = Recorder()
    provider = generic(recorder, body={"meta.key": "key", "to": "to"},
                       static={"meta": {"source": "tidings"}})
    await provider.send(send_request(key="k1"))
    await provider.send(send_request(key="k2", to="bob@example.com"))
    first, second = (json.loads(r.content) for r in recorder.requests)
    assert first == {"meta": {"source": "tidings", "key": "k1"}, "to": EMAIL}
    assert second == {"meta": {"source": "tidings", "key": "k2"}, "to": "bob@example.com"}


async def test_generic_without_content_fields_sends_template_and_data() -> None:
    recorder = Recorder(httpx.Response(202, headers={"Location-Id": "loc-1"}))
    provider = generic(recorder, body={"to": "to", "template": "template", "vars": "data",
                                       "id": "recipient_id", "via": "channel"},
                       idempotency_header=None, message_id_path=None,
                       message_id_header="Location-Id")
    outcome = await provider.send(send_request(content=None))
    assert outcome == Accepted(receipt="loc-1")
    sent = recorder.only
    assert "Idempotency-Key" not in sent.headers
    assert json.loads(sent.content) == {"to": EMAIL, "template": "digest",
                                        "vars": {"items": [1, 2]}, "id": "cust_1042",
                                        "via": "email"}


async def test_generic_omits_absent_content_fields_and_needs_content_when_used() -> None:
    recorder = Recorder()
    provider = generic(recorder)
    await provider.send(send_request(content=Content(text="only text")))
    assert json.loads(recorder.only.content)["message"] == {"to": EMAIL, "text": "only text"}
    assert await provider.send(send_request(content=None)) == Permanent(
        reason="no rendered content")
    assert len(recorder.requests) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to": "recipient"}, "body.to"),
        ({"a": "to", "a.b": "key"}, "body.a.b"),
        ({"a.b": "key", "a": "to"}, "body.a"),
    ],
)
def test_generic_refuses_a_body_it_cannot_build(body: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        generic(Recorder(), body=body)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("error", "outcome_type"),
    [
        (httpx.ConnectError, Transient),
        (httpx.ConnectTimeout, Transient),
        (httpx.PoolTimeout, Transient),
        (httpx.ReadTimeout, Uncertain),
        (httpx.ReadError, Uncertain),
        (httpx.WriteError, Uncertain),
        (httpx.RemoteProtocolError, Uncertain),
    ],
)
async def test_transport_errors_split_on_whether_the_request_left(
        error: type[httpx.RequestError], outcome_type: type) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error(f"failed talking about {EMAIL}", request=request)

    outcome = await generic(handler).send(send_request())
    assert type(outcome) is outcome_type
    assert isinstance(outcome, Transient | Uncertain)
    assert error.__name__ in outcome.reason and EMAIL not in outcome.reason


async def test_an_injected_client_stays_open_after_close() -> None:
    async with client(Recorder()) as injected:
        provider = HttpJsonProvider(url="https://mailer.test/send", channel="email",
                                    body={"to": "to"}, client=injected, clock=FakeClock())
        await provider.close()
        assert not injected.is_closed
        assert isinstance(await provider.send(send_request()), Accepted)
