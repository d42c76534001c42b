"""Postmark's batch endpoint: one request for many messages, an outcome each from its
own item of the answer; what is about the whole request is each message's outcome.
Over ``httpx.MockTransport``; the sandbox's dialect is the real-socket peer
(tests/integration/test_sandbox_dialects.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from tidings.core.clock import FakeClock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, Permanent, RateLimited, Transient, Uncertain
from tidings.providers import BatchProvider, batch_limit
from tidings.providers.postmark import PostmarkProvider

CONTENT = Content(subject="Digest", text="Three things.")
TOKEN = "pm-token"


def request(i: int, content: Content | None = CONTENT) -> SendRequest:
    return SendRequest(key=f"digest/{i}", channel="email", to=f"r{i}@example.com",
                       template="digest", data_json="{}", recipient_id=f"c{i}",
                       content=content)


def postmark(handler: httpx.MockTransport) -> PostmarkProvider:
    return PostmarkProvider(server_token=TOKEN, from_address="news@tidings.test",
                            channel="email", client=httpx.AsyncClient(transport=handler),
                            clock=FakeClock())


def test_postmark_is_a_batch_provider_of_500() -> None:
    provider = postmark(httpx.MockTransport(lambda r: httpx.Response(200)))
    assert isinstance(provider, BatchProvider)
    assert batch_limit(provider) == 500
    assert batch_limit(object()) == 1


async def test_one_request_carries_every_message_and_each_gets_its_own_result() -> None:
    seen: list[httpx.Request] = []

    def answer(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        return httpx.Response(200, json=[
            {"ErrorCode": 0, "Message": "OK", "MessageID": "pm-0", "To": "r0@example.com"},
            {"ErrorCode": 406, "Message": "You tried to send to inactive r1@example.com"},
            {"ErrorCode": 0, "Message": "OK", "MessageID": "pm-2", "To": "r2@example.com"},
            {"ErrorCode": 429, "Message": "Rate limit exceeded"},
            {"ErrorCode": 412, "Message": "Account pending"},
        ])

    outcomes = await postmark(httpx.MockTransport(answer)).send_batch(
        [request(i) for i in range(5)])

    (sent,) = seen
    assert str(sent.url) == "https://api.postmarkapp.com/email/batch"
    assert sent.headers["X-Postmark-Server-Token"] == TOKEN
    body = json.loads(sent.content)
    assert [m["To"] for m in body] == [f"r{i}@example.com" for i in range(5)]
    assert [m["Metadata"] for m in body] == [{"tidings_key": f"digest/{i}"} for i in range(5)]
    assert outcomes[0] == Accepted(receipt="pm-0")
    assert isinstance(outcomes[1], Permanent) and "ErrorCode 406" in outcomes[1].reason
    assert "r1@example.com" not in outcomes[1].reason  # redacted like a single send's
    assert outcomes[2] == Accepted(receipt="pm-2")
    assert isinstance(outcomes[3], RateLimited)
    assert isinstance(outcomes[4], Transient)


async def test_a_message_without_content_is_refused_alone_and_not_sent() -> None:
    seen: list[int] = []

    def answer(r: httpx.Request) -> httpx.Response:
        seen.append(len(json.loads(r.content)))
        return httpx.Response(200, json=[{"ErrorCode": 0, "MessageID": "pm-1"}])

    outcomes = await postmark(httpx.MockTransport(answer)).send_batch(
        [request(0, content=None), request(1)])
    assert seen == [1]
    assert isinstance(outcomes[0], Permanent)
    assert outcomes[1] == Accepted(receipt="pm-1")


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (httpx.Response(429, json={"ErrorCode": 429, "Message": "Rate limit exceeded"},
                        headers={"Retry-After": "3"}), RateLimited),
        (httpx.Response(401, json={"ErrorCode": 10, "Message": "Bad token pm-token"}),
         Transient),
        (httpx.Response(503, text="Service Unavailable"), Transient),
        (httpx.Response(422, json={"ErrorCode": 300, "Message": "Invalid request"}),
         Permanent),
        # a success that cannot be matched to the messages: any may have been accepted
        (httpx.Response(200, json=[{"ErrorCode": 0, "MessageID": "pm-0"}]), Uncertain),
        (httpx.Response(200, json={"ErrorCode": 0}), Uncertain),
        (httpx.Response(200, text="not json"), Uncertain),
    ],
)
async def test_what_is_about_the_whole_request_is_each_messages_outcome(
        response: httpx.Response, expected: type) -> None:
    outcomes = await postmark(httpx.MockTransport(lambda r: response)).send_batch(
        [request(i) for i in range(3)])
    assert len(outcomes) == 3
    assert all(type(o) is expected for o in outcomes), outcomes
    for outcome in outcomes:
        assert TOKEN not in str(outcome)
    if expected is RateLimited:
        assert all(o.retry_after_s == 3.0 for o in outcomes)  # type: ignore[union-attr]


async def test_a_lost_answer_is_uncertain_for_every_message_and_a_refused_connection_transient(
        ) -> None:
    def lost(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=r)

    def refused(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=r)

    uncertain = await postmark(httpx.MockTransport(lost)).send_batch(
        [request(i) for i in range(4)])
    transient = await postmark(httpx.MockTransport(refused)).send_batch(
        [request(i) for i in range(4)])
    assert [type(o) for o in uncertain] == [Uncertain] * 4
    assert [type(o) for o in transient] == [Transient] * 4
