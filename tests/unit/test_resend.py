"""Resend: one email per request under its idempotency key, or up to 100 in a batch
(permissive validation: the valid ones take the ids in order, the refused ones their
index); what is about the whole request is each message's outcome. Over
``httpx.MockTransport``; the conformance suite runs the single send against a fake of
Resend's API over real sockets too."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, Permanent, RateLimited, Transient, Uncertain
from tidings.providers import BatchProvider, batch_limit
from tidings.providers.resend import ResendProvider, idempotency_key_for
from tidings.runtime import build_runtime

CONTENT = Content(subject="Digest", text="Three things.", html="<p>Three things.</p>")
API_KEY = "re_secret"


def request(i: int, content: Content | None = CONTENT, key: str | None = None) -> SendRequest:
    return SendRequest(key=key or f"digest/2026-12-07/cust_{i}:email", channel="email",
                       to=f"r{i}@example.com", template="digest", data_json="{}",
                       recipient_id=f"c{i}", content=content)


def resend(answer: Any, seen: list[httpx.Request] | None = None) -> ResendProvider:
    def handler(r: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(r)
        result: httpx.Response = answer(r)
        return result

    return ResendProvider(api_key=API_KEY, from_address="news@tidings.test", from_name="News",
                          channel="email", clock=FakeClock(),
                          client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def error(status: int, name: str, message: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"statusCode": status, "name": name,
                                        "message": message}, headers=headers)


async def test_one_email_carries_its_key_three_ways_and_takes_resends_id() -> None:
    seen: list[httpx.Request] = []
    provider = resend(lambda r: httpx.Response(200, json={"id": "re-1"}), seen)

    outcome = await provider.send(request(1))

    assert outcome == Accepted(receipt="re-1")
    (sent,) = seen
    assert str(sent.url) == "https://api.resend.com/emails"
    assert sent.headers["Authorization"] == f"Bearer {API_KEY}"
    assert sent.headers["Idempotency-Key"] == "digest/2026-12-07/cust_1:email"
    body = json.loads(sent.content)
    assert body["from"] == "News <news@tidings.test>" and body["to"] == ["r1@example.com"]
    assert (body["subject"], body["text"], body["html"]) == (
        "Digest", "Three things.", "<p>Three things.</p>")
    assert body["headers"]["X-Tidings-Key"] == "digest/2026-12-07/cust_1:email"
    digest = hashlib.sha256(b"digest/2026-12-07/cust_1:email").hexdigest()
    assert body["tags"] == [{"name": "tidings_key_sha256", "value": digest}]


def test_a_key_longer_than_resend_takes_goes_in_by_its_digest() -> None:
    long_key = "k" * 300
    assert idempotency_key_for(long_key) == hashlib.sha256(long_key.encode()).hexdigest()
    assert idempotency_key_for("short:key") == "short:key"


@pytest.mark.parametrize(("answer", "kind", "words"), [
    (error(429, "rate_limit_exceeded", "Too many requests", **{"retry-after": "3"}),
     RateLimited, "rate_limit_exceeded"),
    (error(422, "validation_error", "Invalid `to` field: r1@example.com."), Permanent,
     "validation_error"),
    (error(401, "missing_api_key", "Missing API key"), Transient, "credentials refused"),
    (error(403, "validation_error", "The tidings.test domain is not verified"), Transient,
     "domain was refused"),
    (error(409, "concurrent_idempotent_requests", "Same key in progress"), Transient, "409"),
    (error(409, "invalid_idempotent_request", "Same key, another payload"), Uncertain,
     "another payload"),
    (error(500, "application_error", "An unexpected error occurred."), Transient, "500"),
    (httpx.Response(200, json={}), Uncertain, "no email id"),
])
async def test_each_refusal_maps_to_its_outcome_and_never_names_the_address(
        answer: httpx.Response, kind: type, words: str) -> None:
    outcome = await resend(lambda r: answer).send(request(1))
    assert isinstance(outcome, kind), outcome
    assert words in str(outcome.reason)  # type: ignore[union-attr]
    assert "r1@example.com" not in str(outcome.reason)  # type: ignore[union-attr]
    if isinstance(outcome, RateLimited):
        assert outcome.retry_after_s == 3


def test_resend_is_a_batch_provider_of_100_that_deduplicates_single_sends_for_a_day() -> None:
    provider = resend(lambda r: httpx.Response(200))
    assert isinstance(provider, BatchProvider) and batch_limit(provider) == 100
    assert provider.deduplicates and provider.dedupe_window_s == 24 * 3600
    assert provider.supports_lookup is False
    assert provider.batch_deduplicates is False


async def test_a_batch_matches_ids_to_the_emails_it_did_not_refuse_in_order() -> None:
    seen: list[httpx.Request] = []

    def answer(r: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={
            "data": [{"id": "re-0"}, {"id": "re-2"}, {"id": "re-4"}],
            "errors": [{"index": 1, "message": "Invalid `to` field: r1@example.com."},
                       {"index": 3, "message": "The `subject` field is missing."}]})

    outcomes = await resend(answer, seen).send_batch([request(i) for i in range(5)])

    (sent,) = seen
    assert str(sent.url) == "https://api.resend.com/emails/batch"
    assert sent.headers["x-batch-validation"] == "permissive"
    assert "Idempotency-Key" not in sent.headers  # a batch is never sent again as is
    body = json.loads(sent.content)
    assert [m["to"] for m in body] == [[f"r{i}@example.com"] for i in range(5)]
    assert [m["headers"]["X-Tidings-Key"] for m in body] == [
        f"digest/2026-12-07/cust_{i}:email" for i in range(5)]
    assert [outcomes[i] for i in (0, 2, 4)] == [Accepted(receipt=f"re-{i}") for i in (0, 2, 4)]
    assert isinstance(outcomes[1], Permanent) and "r1@example.com" not in outcomes[1].reason
    assert isinstance(outcomes[3], Permanent) and "subject" in outcomes[3].reason


async def test_a_batch_answer_that_cannot_be_matched_leaves_each_email_uncertain() -> None:
    def answer(r: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": "re-0"}], "errors": []})

    outcomes = await resend(answer).send_batch([request(i) for i in range(3)])
    assert all(isinstance(o, Uncertain) for o in outcomes)


async def test_a_batch_answered_with_another_success_leaves_each_email_uncertain() -> None:
    # a 202 names no email: never Accepted without a receipt for each
    outcomes = await resend(lambda r: httpx.Response(202)).send_batch(
        [request(i) for i in range(3)])
    assert all(isinstance(o, Uncertain) for o in outcomes), outcomes


async def test_what_is_about_the_whole_batch_is_each_emails_outcome() -> None:
    limited = await resend(lambda r: error(429, "rate_limit_exceeded", "slow down",
                                           **{"retry-after": "2"})).send_batch(
        [request(i) for i in range(3)])
    assert all(isinstance(o, RateLimited) and o.retry_after_s == 2 for o in limited)

    def lost(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset", request=r)

    uncertain = await resend(lost).send_batch([request(i) for i in range(3)])
    assert all(isinstance(o, Uncertain) for o in uncertain)


async def test_an_email_without_content_is_refused_alone_and_not_sent() -> None:
    seen: list[httpx.Request] = []
    outcomes = await resend(lambda r: httpx.Response(200, json={"data": [{"id": "re-1"}]}),
                            seen).send_batch([request(0, content=None), request(1)])
    assert outcomes == [Permanent(reason="no rendered content"), Accepted(receipt="re-1")]
    assert len(json.loads(seen[0].content)) == 1


async def test_a_batch_table_refuses_resending_an_uncertain_send(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Resend deduplicates a single send on its key, but a batch carries no key per
    # message: an uncertain batch member sent again alone could arrive twice.
    path = tmp_path / "tidings.toml"
    path.write_text(f'''
store = "sqlite:///{tmp_path / 't.db'}"
[channels.email]
provider = {{ kind = "resend", from_address = "news@tidings.test" }}
batch = {{ max_messages = 100 }}
uncertain = "resend"
''')
    monkeypatch.setenv("RESEND_API_KEY", API_KEY)
    runtime = await build_runtime(Settings.load(path))
    try:
        with pytest.raises(ConfigurationError, match=r"channels\.email\.uncertain"):
            runtime.worker("email", "w1")
    finally:
        await runtime.close()
