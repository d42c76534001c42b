"""Any answer to a batch request, however malformed, becomes one outcome per message,
and never says a message was accepted, or refused, that the answer does not say so of:
Resend's and Postmark's batch answers fuzzed with hypothesis.

What is held for every answer: one outcome per message, in order, and no exception;
Accepted only under a 200, with a receipt the answer holds, never one receipt for two
messages (an id names one email); a message named refused (a Resend error index, a
Postmark ErrorCode) never Accepted; and a well-formed answer read exactly as the
provider means it."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.clock import FakeClock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, Outcome, Permanent
from tidings.providers.postmark import PostmarkProvider
from tidings.providers.resend import ResendProvider

CONTENT = Content(subject="Digest", text="Three things.")
NEVER = httpx.MockTransport(lambda r: httpx.Response(500))


def requests_of(n: int) -> list[SendRequest]:
    return [SendRequest(key=f"digest/2026-12-07/c{i}:email", channel="email",
                        to=f"r{i}@example.com", template="digest", data_json="{}",
                        recipient_id=f"c{i}", content=CONTENT) for i in range(n)]


def resend() -> ResendProvider:
    return ResendProvider(api_key="re_k", from_address="news@tidings.test", channel="email",
                          clock=FakeClock(), client=httpx.AsyncClient(transport=NEVER))


def postmark() -> PostmarkProvider:
    return PostmarkProvider(server_token="pm_k", from_address="news@tidings.test",
                            channel="email", clock=FakeClock(),
                            client=httpx.AsyncClient(transport=NEVER))


#: One of each: reading an answer uses no client.
RESEND = resend()
POSTMARK = postmark()


def answer(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"})


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 12) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(
        st.sampled_from(["id", "index", "message", "data", "errors", "ErrorCode", "Message",
                         "MessageID", "To", "name", "statusCode"]) | st.text(max_size=5),
        inner, max_size=5),
    max_leaves=25)
STATUS = st.sampled_from([200, 200, 200, 201, 202, 400, 401, 403, 409, 422, 429, 500, 503])


def ids_in(body: Any) -> set[str]:
    """Every string anywhere in ``body`` (a receipt must be one of them)."""
    if isinstance(body, str):
        return {body}
    if isinstance(body, list):
        return set().union(*(ids_in(v) for v in body)) if body else set()
    if isinstance(body, dict):
        return set().union(*(ids_in(v) for v in body.values())) if body else set()
    return set()


def held(outcomes: list[Outcome], n: int, status: int, body: Any) -> list[str]:
    """What every answer's outcomes must hold; the receipts accepted."""
    assert len(outcomes) == n
    accepted = [o.receipt for o in outcomes if isinstance(o, Accepted)]
    if status != 200:
        assert accepted == []
    assert all(isinstance(r, str) and r and r in ids_in(body) for r in accepted)
    assert len(set(accepted)) == len(accepted), f"one receipt for two messages: {accepted}"
    return [r for r in accepted if r is not None]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 6), status=STATUS,
       body=JSON | st.fixed_dictionaries({"data": JSON, "errors": JSON}) | st.fixed_dictionaries(
           {"data": st.lists(st.fixed_dictionaries({"id": st.text(max_size=3) | JSON}),
                             max_size=7),
            "errors": st.lists(st.fixed_dictionaries(
                {"index": st.integers(-1, 7) | st.booleans() | JSON, "message": JSON}),
                max_size=4)}))
def test_any_resend_batch_answer(n: int, status: int, body: Any) -> None:
    outcomes = RESEND._batch_outcomes(answer(status, body), requests_of(n))
    held(outcomes, n, status, body)
    errors = body.get("errors") if isinstance(body, dict) else None
    named = {e.get("index") for e in errors if isinstance(e, dict)
             and type(e.get("index")) is int} if isinstance(errors, list) else set()
    for i, outcome in enumerate(outcomes):
        if i in named:
            assert not isinstance(outcome, Accepted), (i, outcome)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 8), data=st.data())
def test_a_well_formed_resend_answer_is_read_as_resend_means_it(n: int,
                                                              data: st.DataObject) -> None:
    refused = data.draw(st.sets(st.integers(0, n - 1), max_size=n))
    valid = [i for i in range(n) if i not in refused]
    ids = data.draw(st.lists(st.text("abcdef0123456789-", min_size=1, max_size=12),
                             min_size=len(valid), max_size=len(valid), unique=True))
    body = {"data": [{"id": i} for i in ids],
            "errors": [{"index": i, "message": f"bad {i}"} for i in sorted(refused)]}
    outcomes = RESEND._batch_outcomes(answer(200, body), requests_of(n))
    for i in refused:
        assert isinstance(outcomes[i], Permanent) and f"bad {i}" in outcomes[i].reason
    assert [outcomes[i] for i in valid] == [Accepted(receipt=r) for r in ids]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 6), status=STATUS,
       body=JSON | st.lists(st.fixed_dictionaries(
           {"ErrorCode": st.integers(0, 3) | st.just(300) | st.just(406) | st.booleans() | JSON,
            "MessageID": st.sampled_from(["a", "b", "c"]) | st.text(max_size=3) | JSON,
            "Message": JSON}), max_size=7))
def test_any_postmark_batch_answer(n: int, status: int, body: Any) -> None:
    outcomes = POSTMARK._batch_outcomes(answer(status, body), requests_of(n))
    held(outcomes, n, status, body)
    if isinstance(body, list) and len(body) == n:
        for item, outcome in zip(body, outcomes, strict=True):
            code = item.get("ErrorCode") if isinstance(item, dict) else None
            if isinstance(item, dict) and "ErrorCode" in item and code != 0:
                # a refusal, or an ErrorCode that is no number: never taken as sent
                assert not isinstance(outcome, Accepted), (item, outcome)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 8), data=st.data())
def test_a_well_formed_postmark_answer_is_read_as_postmark_means_it(
        n: int, data: st.DataObject) -> None:
    refused = data.draw(st.sets(st.integers(0, n - 1), max_size=n))
    ids = data.draw(st.lists(st.text("abcdef0123456789-", min_size=1, max_size=12),
                             min_size=n, max_size=n, unique=True))
    body = [{"ErrorCode": 300, "Message": f"bad {i}"} if i in refused
            else {"ErrorCode": 0, "Message": "OK", "MessageID": ids[i], "To": f"r{i}@x"}
            for i in range(n)]
    outcomes = POSTMARK._batch_outcomes(answer(200, body), requests_of(n))
    for i in range(n):
        if i in refused:
            assert isinstance(outcomes[i], Permanent) and f"bad {i}" in outcomes[i].reason
        else:
            assert outcomes[i] == Accepted(receipt=ids[i])


def test_one_id_for_two_emails_leaves_each_uncertain() -> None:
    resend_out = RESEND._batch_outcomes(answer(200, {"data": [{"id": "a"}, {"id": "a"}]}),
                                          requests_of(2))
    postmark_out = POSTMARK._batch_outcomes(answer(200, [
        {"ErrorCode": 0, "MessageID": "a"}, {"ErrorCode": 0, "MessageID": "a"}]),
        requests_of(2))
    assert not [o for o in resend_out + postmark_out if isinstance(o, Accepted)]
    assert all("distinct" in o.reason for o in resend_out + postmark_out)


def test_a_true_is_no_index_nor_error_code() -> None:
    # Resend: a true index refuses nothing, so one id for two emails matches nothing
    out = RESEND._batch_outcomes(answer(200, {"data": [{"id": "a"}],
                                                "errors": [{"index": True}]}), requests_of(2))
    assert not [o for o in out if isinstance(o, Accepted | Permanent)]
    # Postmark: an ErrorCode of true or "406" is neither success nor a refusal
    out = POSTMARK._batch_outcomes(answer(200, [{"ErrorCode": True, "MessageID": "a"},
                                                  {"ErrorCode": "406", "MessageID": "b"}]),
                                     requests_of(2))
    assert not [o for o in out if isinstance(o, Accepted | Permanent)]
