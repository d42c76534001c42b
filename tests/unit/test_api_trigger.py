"""``POST /v1/trigger/{campaign}``: an external cron drives admission safely.

Signed (HMAC over the timestamp, method, path and body, two secrets during a
rotation) or with a ``trigger`` token; one bounded pass, an immediate answer, idempotent per
(campaign, logical date). Every refusal leaves nothing processed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import DAY, OLD_SECRET, SECRET, T0, Api, open_api, signed
from hypothesis import given
from hypothesis import strategies as st

from tidings.api.auth import request_target, sign, string_to_sign

URL = "/v1/trigger/weekly-digest"
BODY = b'{"campaign":"weekly-digest"}'


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=5) as opened:
        yield opened


async def nothing_processed(api: Api) -> None:
    assert await api.intents() == 0
    assert await api.occurrences() == 0
    assert await api.runtime.store.api_trigger_counts() == {}


# ---------------------------------------------------------------- signatures


async def test_a_signed_trigger_admits_the_occurrence_due_and_answers_with_counts(
    api: Api,
) -> None:
    response = await api.client.post(URL, content=BODY, headers=signed(BODY))

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["logical_date"] == DAY and answer["logical_at"] == T0 - 5
    # Five customers on email, the three odd ones have a phone for sms.
    assert answer["pass"] == {"members": 5, "admitted": 8, "skipped": 2, "published": 8}
    assert answer["more"] is False and answer["repeat"] is False
    assert answer["occurrence"]["status"] == "done"
    assert await api.intents() == 8


async def test_the_second_secret_of_a_rotation_is_accepted(api: Api) -> None:
    response = await api.client.post(URL, content=BODY, headers=signed(BODY, secret=OLD_SECRET))

    assert response.status_code == 200
    assert await api.intents() == 8


@pytest.mark.parametrize("tamper", ["wrong secret", "other body", "no prefix garbage",
                                    "missing signature value"])
async def test_a_bad_signature_is_refused_and_nothing_is_processed(api: Api, tamper: str
                                                                    ) -> None:
    headers = signed(BODY, secret="not-the-secret" if tamper == "wrong secret" else SECRET)
    content = b'{"campaign":"weekly-digest","x":1}' if tamper == "other body" else BODY
    if tamper == "no prefix garbage":
        headers["X-Tidings-Signature"] = "deadbeef"
    if tamper == "missing signature value":
        headers["X-Tidings-Signature"] = ""

    response = await api.client.post(URL, content=content, headers=headers)

    assert response.status_code == 401
    assert response.json()["field"] == "header.X-Tidings-Signature"
    await nothing_processed(api)


@pytest.mark.parametrize("offset", [-301, 301, -10_000])
async def test_a_timestamp_outside_the_tolerance_is_refused(api: Api, offset: int) -> None:
    response = await api.client.post(URL, content=BODY, headers=signed(BODY, timestamp=T0 + offset))

    assert response.status_code == 401
    assert response.json()["field"] == "header.X-Tidings-Timestamp"
    assert "tolerance is 300 s" in response.json()["message"]
    await nothing_processed(api)


async def test_a_timestamp_within_the_tolerance_is_accepted(api: Api) -> None:
    response = await api.client.post(URL, content=BODY, headers=signed(BODY, timestamp=T0 - 299))

    assert response.status_code == 200


async def test_a_malformed_timestamp_is_refused(api: Api) -> None:
    headers = signed(BODY)
    headers["X-Tidings-Timestamp"] = "yesterday"

    response = await api.client.post(URL, content=BODY, headers=headers)

    assert response.status_code == 401
    assert response.json()["field"] == "header.X-Tidings-Timestamp"
    await nothing_processed(api)


async def test_a_replayed_signed_request_is_a_conflict_and_processes_nothing_more(
    api: Api,
) -> None:
    headers = signed(BODY)
    first = await api.client.post(URL, content=BODY, headers=headers)
    assert first.status_code == 200
    occurrence = await api.runtime.store.occurrence_get(f"weekly-digest/{DAY}")

    api.clock.advance(30)
    replay = await api.client.post(URL, content=BODY, headers=headers)

    assert replay.status_code == 409
    assert replay.json()["field"] == "header.X-Tidings-Signature"
    assert await api.runtime.store.api_trigger_counts() == {"weekly-digest": 1}
    assert await api.runtime.store.occurrence_get(f"weekly-digest/{DAY}") == occurrence
    assert await api.intents() == 8


async def test_signed_triggers_are_refused_when_no_secret_is_configured(tmp_path: Path
                                                                        ) -> None:
    async with open_api(tmp_path, env={}) as api:
        response = await api.client.post(URL, content=BODY, headers=signed(BODY))

        assert response.status_code == 401
        assert "TIDINGS_TRIGGER_SECRETS" in response.json()["message"]
        await nothing_processed(api)


@pytest.mark.parametrize("body", [b"", BODY])
async def test_a_trigger_signed_for_another_campaign_is_refused(api: Api, body: bytes) -> None:
    # Triggers usually have an empty body: the path is what names the campaign.
    headers = signed(body, target="/v1/trigger/monthly-report")

    response = await api.client.post(URL, content=body, headers=headers)

    assert response.status_code == 401
    assert response.json()["field"] == "header.X-Tidings-Signature"
    assert "'/v1/trigger/weekly-digest'" in response.json()["message"]
    await nothing_processed(api)


async def test_a_trigger_signed_for_this_campaign_is_refused_on_another_one(api: Api) -> None:
    # Refused before the route looks at the campaign: a signature opens one door only.
    response = await api.client.post("/v1/trigger/monthly", headers=signed(b""))

    assert response.status_code == 401
    assert response.json()["field"] == "header.X-Tidings-Signature"
    await nothing_processed(api)


@pytest.mark.parametrize(("method", "signed_target", "sent_target", "status"), [
    ("GET", URL, URL, 401),                          # another method
    ("POST", URL + "?x=1", URL, 401),                # a query the request does not carry
    ("POST", URL, URL + "?x=1", 401),                # a query added after signing
    ("POST", URL + "?x=1", URL + "?x=2", 401),
    ("POST", URL + "?x=1", URL + "?x=1", 200),
    ("post", URL, URL, 200),                         # the method is signed in capitals
])
async def test_the_method_and_the_query_string_are_signed(
        api: Api, method: str, signed_target: str, sent_target: str, status: int) -> None:
    headers = signed(b"", method=method, target=signed_target)

    response = await api.client.post(sent_target, headers=headers)

    assert response.status_code == status, response.text


async def test_the_path_is_signed_as_sent_with_its_percent_encoding(api: Api) -> None:
    encoded = "/v1/trigger/weekly%2Ddigest"  # routes to weekly-digest once decoded

    decoded_signature = await api.client.post(encoded, headers=signed(b"", target=URL))
    as_sent = await api.client.post(encoded, headers=signed(b"", target=encoded))

    assert decoded_signature.status_code == 401
    assert as_sent.status_code == 200, as_sent.text


def test_the_string_to_sign_is_timestamp_method_target_and_body_on_lines() -> None:
    message = string_to_sign(timestamp=1786698000, method="post",
                             target="/v1/trigger/weekly-digest", body=b'{"a":1}')

    assert message == b'1786698000\nPOST\n/v1/trigger/weekly-digest\n{"a":1}'
    digest = hmac.new(b"k", message, hashlib.sha256).hexdigest()
    assert sign("k", timestamp="1786698000", method="POST", target="/v1/trigger/weekly-digest",
                body=b'{"a":1}') == f"sha256={digest}"


_TARGETS = st.text(st.characters(codec="ascii", exclude_characters="\n"), max_size=12)
_REQUESTS = st.tuples(st.integers(0, 2**40), st.sampled_from(["POST", "GET", "PUT"]),
                      _TARGETS.map(lambda t: "/v1/trigger/" + t), st.binary(max_size=12))


@given(_REQUESTS, _REQUESTS)
def test_two_different_requests_never_share_a_string_to_sign(
        a: tuple[int, str, str, bytes], b: tuple[int, str, str, bytes]) -> None:
    def text(r: tuple[int, str, str, bytes]) -> bytes:
        return string_to_sign(timestamp=r[0], method=r[1], target=r[2], body=r[3])

    assert (text(a) == text(b)) == (a == b)


@pytest.mark.parametrize(("scope", "target"), [
    ({"raw_path": b"/v1/trigger/a%2Fb", "query_string": b""}, "/v1/trigger/a%2Fb"),
    ({"raw_path": b"/v1/trigger/a", "query_string": b"x=1&y"}, "/v1/trigger/a?x=1&y"),
    # httpx's ASGI transport puts the query in raw_path as well.
    ({"raw_path": b"/v1/trigger/a?x=1", "query_string": b"x=1"}, "/v1/trigger/a?x=1"),
    ({"path": "/v1/trigger/a", "query_string": b""}, "/v1/trigger/a"),
])
def test_the_request_target_is_the_raw_path_and_query(scope: dict[str, object],
                                                       target: str) -> None:
    assert request_target(scope) == target


# ---------------------------------------------------------------- bearer tokens


async def test_a_cron_with_a_fixed_header_uses_a_trigger_token(api: Api) -> None:
    response = await api.client.post(URL, headers=api.auth("trigger"))

    assert response.status_code == 200
    assert response.json()["pass"]["admitted"] == 8


@pytest.mark.parametrize("scope", ["viewer", "operator", "publish"])
async def test_a_token_without_the_trigger_scope_is_forbidden(api: Api, scope: str) -> None:
    response = await api.client.post(URL, headers=api.auth(scope))

    assert response.status_code == 403
    await nothing_processed(api)


async def test_a_revoked_trigger_token_is_refused(api: Api) -> None:
    token_id = api.tokens["trigger"].split("_")[1]
    await api.runtime.store.api_token_revoke(token_id, now=T0)

    response = await api.client.post(URL, headers=api.auth("trigger"))

    assert response.status_code == 401
    await nothing_processed(api)


# ---------------------------------------------------------------- idempotency and timing


async def test_a_second_trigger_of_the_same_date_admits_nothing_new(api: Api) -> None:
    await api.client.post(URL, headers=api.auth("trigger"))
    api.clock.advance(7)  # a cron retry, a few seconds later

    again = await api.client.post(URL, headers=api.auth("trigger"))

    assert again.status_code == 200
    assert again.json()["repeat"] is True and again.json()["triggers"] == 2
    assert again.json()["pass"]["admitted"] == 0
    assert again.json()["occurrence"]["admitted"] == 8
    assert await api.intents() == 8


async def test_a_trigger_a_few_seconds_early_admits_the_imminent_occurrence(tmp_path: Path
                                                                            ) -> None:
    async with open_api(tmp_path, start=T0 - 5 - 12) as api:  # 08:59:48
        response = await api.client.post(URL, headers=api.auth("trigger"))

        assert response.json()["logical_date"] == DAY
        assert response.json()["pass"]["admitted"] == 8
        [one] = await api.runtime.store.intent_find_by_recipient("cust_0001", limit=1)
        assert one.due_at == T0 - 5  # still due at the occurrence's own time


async def test_a_trigger_long_after_the_grace_period_admits_nothing_and_says_missed(
    tmp_path: Path,
) -> None:
    async with open_api(tmp_path, start=T0 + 2 * 3600) as api:  # 11:00, grace is 1 h
        response = await api.client.post(URL, headers=api.auth("trigger"))

        assert response.status_code == 200
        assert response.json()["missed"] is True
        assert response.json()["occurrence"]["status"] == "skipped"
        assert await api.intents() == 0


async def test_a_paused_campaign_is_not_admitted_and_not_backfilled(api: Api) -> None:
    await api.runtime.store.switch_set(scope="campaign", name="weekly-digest", paused=True,
                                       now=T0 - 60)

    response = await api.client.post(URL, headers=api.auth("trigger"))

    assert response.json()["paused"] is True
    assert response.json()["occurrence"]["status"] == "skipped"
    assert await api.intents() == 0


async def test_a_large_occurrence_answers_after_one_bounded_pass_and_finishes_in_background(
    tmp_path: Path,
) -> None:
    async with open_api(tmp_path, members=25, page_size=4, max_pages=2) as api:
        response = await api.client.post(URL, headers=api.auth("trigger"))

        answer = response.json()
        assert answer["more"] is True and answer["continuing"] is True
        assert answer["pass"]["members"] == 8  # two pages of four, then the answer
        await api.app.state.ctx.admission.wait_idle()
        occurrence = await api.runtime.store.occurrence_get(f"weekly-digest/{DAY}")
        assert occurrence is not None and occurrence.status == "done"
        assert occurrence.members == 25
        assert await api.intents() == 25 + 13


async def test_an_unfinished_occurrence_is_resumed_when_the_api_starts(tmp_path: Path) -> None:
    async with open_api(tmp_path, members=25, page_size=4, max_pages=1) as api:
        await api.runtime.scheduler().run_pass(now=api.clock.now())  # one page, then stop
        assert await api.intents() < 25

        resumed = await api.app.state.ctx.admission.resume_unfinished()
        await api.app.state.ctx.admission.wait_idle()

        assert resumed == [f"weekly-digest/{DAY}"]
        assert await api.intents() == 25 + 13


# ---------------------------------------------------------------- bad input


async def test_an_unknown_campaign_is_not_found(api: Api) -> None:
    response = await api.client.post("/v1/trigger/monthly", headers=api.auth("trigger"))

    assert response.status_code == 404
    assert response.json()["field"] == "path.campaign"
    assert response.json()["message"].startswith("unknown campaign 'monthly'; declared: ")
    await nothing_processed(api)


async def test_a_body_naming_another_campaign_is_refused(api: Api) -> None:
    body = b'{"campaign":"monthly"}'

    response = await api.client.post(URL, content=body, headers=signed(body))

    assert response.status_code == 422
    assert response.json()["field"] == "body.campaign"
    await nothing_processed(api)


async def test_a_late_delivered_trigger_for_an_older_date_is_refused(api: Api) -> None:
    body = b'{"logical_date":"2026-08-13"}'

    response = await api.client.post(URL, content=body, headers=signed(body))

    assert response.status_code == 409
    assert response.json()["field"] == "body.logical_date"
    await nothing_processed(api)


@pytest.mark.parametrize(("body", "media"), [
    (b"{}", "application/octet-stream"),  # a managed cron's default content type
    (b"run the digest", "text/plain"),
    (b"", "application/json"),
    (b"[1, 2]", "application/json"),
])
async def test_a_fixed_body_of_any_kind_is_accepted_when_signed(api: Api, body: bytes,
                                                                 media: str) -> None:
    headers = {**signed(body), "Content-Type": media}

    response = await api.client.post(URL, content=body, headers=headers)

    assert response.status_code == 200, response.text
    assert response.json()["pass"]["admitted"] == 8


async def test_a_malformed_body_names_the_field(api: Api) -> None:
    response = await api.client.post(URL, content=b'{"logical_date": 14}',
                                     headers={**api.auth("trigger"),
                                              "Content-Type": "application/json"})

    assert response.status_code == 422
    assert response.json()["field"] == "body.logical_date"
    await nothing_processed(api)
