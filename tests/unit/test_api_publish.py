"""``POST /v1/queue/publish`` as an existing managed-queue publisher uses it: bearer
token, JSON, a stable Idempotency-Key; any 2xx is done, a 429 is retried after
Retry-After with the same key, anything else is a rejection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from apikit import (
    DAY,
    T0,
    Api,
    dumps,
    open_api,
    publish_body,
    publish_headers,
    walk,
)

from tidings.core.policy import parse_retry_after

URL = "/v1/queue/publish"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=5) as opened:
        yield opened


async def post(api: Api, key: str, body: object, **headers: str) -> httpx.Response:
    return await api.client.post(URL, content=dumps(body),
                                 headers={**publish_headers(api, key), **headers})


# ---------------------------------------------------------------- idempotency


async def test_a_publish_maps_to_the_campaigns_intents_with_derived_keys(api: Api) -> None:
    response = await api.client.post(URL, content=dumps(publish_body("cust_0001")),
                                     headers=publish_headers(api, "pub-1"))

    assert response.status_code == 202
    answer = response.json()
    assert answer["keys"] == [f"weekly-digest/{DAY}/cust_0001/email/v3",
                              f"weekly-digest/{DAY}/cust_0001/sms/v3"]
    assert answer["new"] == 2 and answer["campaign"] == "weekly-digest"
    intent = await api.runtime.store.intent_get(answer["keys"][0])
    assert intent is not None
    assert (intent.address, intent.template) == ("c1@example.com", "weekly-digest/v3")
    assert json.loads(intent.data) == {"first": "C1"}  # the audience member's data
    assert intent.due_at == T0 - 5 and intent.expires_at == T0 - 5 + 6 * 3600


async def test_the_same_key_and_body_get_the_same_answer_and_one_set_of_intents(
    api: Api,
) -> None:
    body = publish_body("cust_0001")
    first = await api.client.post(URL, content=dumps(body), headers=publish_headers(api, "k"))
    api.clock.advance(60)
    # The same JSON with keys in another order and other spacing is the same request.
    reordered = json.dumps({"payload": dict(reversed(body["payload"].items())),
                            "queue": body["queue"]}, indent=2).encode()
    second = await api.client.post(URL, content=reordered, headers=publish_headers(api, "k"))

    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    assert second.headers["idempotent-replayed"] == "true"
    assert await api.intents() == 2


async def test_concurrent_publishes_share_transactions_and_each_gets_its_own_answer(
    tmp_path: Path,
) -> None:
    async with open_api(tmp_path, members=40) as api:
        first = await api.client.post(URL, content=dumps(publish_body("cust_0001")),
                                      headers=publish_headers(api, "first"))
        groups_before = api.app.state.ctx.publishes.groups
        requests = [(f"k{i}", publish_body(f"cust_{i:04d}")) for i in range(3, 40)]
        requests += [("first", publish_body("cust_0001")),   # a replay among them
                     ("bad", publish_body("cust_0002", template="other-v1")),  # a 422
                     ("twice", publish_body("cust_0002")),   # one key, two requests:
                     ("twice", publish_body("cust_0001"))]   # one is answered 409

        responses = await asyncio.gather(*(
            api.client.post(URL, content=dumps(body), headers=publish_headers(api, key))
            for key, body in requests))

        codes = [r.status_code for r in responses]
        assert codes[:38] == [202] * 38 and codes[38] == 422
        assert sorted(codes[39:]) == [202, 409]
        keys: list[str] = list(first.json()["keys"])
        for (_, body), response in zip(requests[:37], responses[:37], strict=True):
            customer = body["payload"]["customer_id"]
            answer = response.json()
            assert answer["keys"] and all(f"/{customer}/" in k for k in answer["keys"])
            assert answer["new"] == len(answer["keys"])  # its own intents, all new
            keys += answer["keys"]
        assert responses[37].json() == first.json()
        assert responses[37].headers["idempotent-replayed"] == "true"
        [won] = [r for r in responses[39:] if r.status_code == 202]
        keys += [k for k in won.json()["keys"] if k not in keys]
        assert await api.intents() == len(keys)
        # Coalesced: far fewer transactions than requests.
        assert api.app.state.ctx.publishes.groups - groups_before < len(requests) // 2


async def test_the_same_key_with_another_body_is_a_conflict_and_writes_nothing(
    api: Api,
) -> None:
    await api.client.post(URL, content=dumps(publish_body("cust_0001")),
                          headers=publish_headers(api, "k"))

    response = await api.client.post(URL, content=dumps(publish_body("cust_0003")),
                                     headers=publish_headers(api, "k"))

    assert response.status_code == 409
    assert response.json()["field"] == "header.Idempotency-Key"
    assert await api.intents() == 2


async def test_concurrent_retries_of_one_request_get_one_answer_and_one_set_of_intents(
    api: Api,
) -> None:
    body = dumps(publish_body("cust_0003"))

    responses = await asyncio.gather(*(
        api.client.post(URL, content=body, headers=publish_headers(api, "k"))
        for _ in range(6)))

    assert {r.status_code for r in responses} == {202}
    assert len({r.text for r in responses}) == 1
    assert await api.intents() == 2


async def test_a_publish_and_a_scheduled_run_of_the_same_day_share_their_keys(api: Api) -> None:
    await api.client.post("/v1/trigger/weekly-digest", headers=api.auth("trigger"))

    response = await api.client.post(URL, content=dumps(publish_body("cust_0001")),
                                     headers=publish_headers(api, "k"))

    assert response.status_code == 202
    assert response.json()["new"] == 0  # the scheduler wrote these very intents
    assert await api.intents() == 8


async def test_another_key_for_the_same_message_creates_no_second_intent(api: Api) -> None:
    body = dumps(publish_body("cust_0001"))
    await api.client.post(URL, content=body, headers=publish_headers(api, "k1"))

    again = await api.client.post(URL, content=body, headers=publish_headers(api, "k2"))

    assert again.status_code == 202 and again.json()["new"] == 0
    assert await api.intents() == 2


# ---------------------------------------------------------------- 429 and Retry-After


async def test_a_paused_campaign_answers_429_and_the_retry_with_the_same_key_succeeds(
    api: Api,
) -> None:
    await api.runtime.store.switch_set(scope="campaign", name="weekly-digest", paused=True,
                                       now=T0)
    body = dumps(publish_body("cust_0001"))

    refused = await api.client.post(URL, content=body, headers=publish_headers(api, "k"))

    assert refused.status_code == 429
    # A few seconds: a publisher that gives up after 30 s in all keeps waiting through a
    # short pause.
    assert parse_retry_after(refused.headers["retry-after"], T0) == 5
    assert "campaign 'weekly-digest'" in refused.json()["message"]
    assert await api.intents() == 0

    await api.runtime.store.switch_set(scope="campaign", name="weekly-digest", paused=False,
                                       now=T0 + 5)
    api.clock.advance(5)
    retried = await api.client.post(URL, content=body, headers=publish_headers(api, "k"))

    assert retried.status_code == 202
    assert await api.intents() == 2


async def test_a_paused_channel_answers_429(api: Api) -> None:
    await api.runtime.store.switch_set(scope="channel", name="sms", paused=True, now=T0)

    response = await post(api, "k", publish_body("cust_0001"))

    assert response.status_code == 429
    assert "channel 'sms'" in response.json()["message"]
    assert await api.intents() == 0


async def test_a_paused_campaigns_retry_after_is_configurable(tmp_path: Path) -> None:
    async with open_api(tmp_path, api={"paused_retry_after_s": 12.5}) as api:
        await api.runtime.store.switch_set(scope="campaign", name="weekly-digest",
                                           paused=True, now=T0)
        refused = await post(api, "k", publish_body("cust_0001"))

        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "13"  # whole seconds, never less


async def test_intake_over_its_rate_answers_429_with_retry_after(tmp_path: Path) -> None:
    async with open_api(tmp_path, api={"publish_rate": "1/s", "publish_burst": 1}) as api:
        ok = await post(api, "a", publish_body("cust_0001"))
        over = await post(api, "b", publish_body("cust_0003"))

        assert ok.status_code == 202
        assert over.status_code == 429
        assert over.headers["retry-after"] == "1"
        assert await api.intents() == 2

        api.clock.advance(1)
        later = await post(api, "b", publish_body("cust_0003"))

        assert later.status_code == 202
        assert await api.intents() == 4


async def test_a_replay_of_an_answered_request_is_not_rate_limited(tmp_path: Path) -> None:
    async with open_api(tmp_path, api={"publish_rate": "1/s", "publish_burst": 1}) as api:
        first = await post(api, "a", publish_body("cust_0001"))
        replay = await post(api, "a", publish_body("cust_0001"))

        assert first.status_code == replay.status_code == 202


# ---------------------------------------------------------------- channel queues


async def test_a_channel_queue_takes_the_address_and_template_from_the_payload(
    api: Api,
) -> None:
    body = publish_body("cust_9999", queue="transactional-email",
                        template="receipt-v2", email="x@example.com", order="A-17")

    response = await post(api, "k", body)

    assert response.status_code == 202
    [key] = response.json()["keys"]
    assert key == f"transactional-email/{DAY}/cust_9999/email/v2"
    intent = await api.runtime.store.intent_get(key)
    assert intent is not None and intent.template == "receipt/v2"
    assert json.loads(intent.data) == {"order": "A-17"}


async def test_a_second_message_under_a_channel_queue_key_is_named_existing_not_hidden(
    api: Api,
) -> None:
    # A channel queue holds one message per customer, template version and day: another
    # template of the same version that day is the same key, and the answer says so.
    first = await post(api, "k1", publish_body("cust_9999", queue="transactional-email",
                                               template="receipt-v2", email="x@example.com"))
    second = await post(api, "k2", publish_body(
        "cust_9999", queue="transactional-email", template="password-reset-v2",
        email="x@example.com"))

    key = f"transactional-email/{DAY}/cust_9999/email/v2"
    assert (first.json()["new"], first.json()["existing"]) == (1, [])
    assert (second.status_code, second.json()["new"], second.json()["existing"]) == (
        202, 0, [key])
    intent = await api.runtime.store.intent_get(key)
    assert intent is not None and intent.template == "receipt/v2"


async def test_a_versioned_template_may_use_a_slash(api: Api) -> None:
    response = await post(api, "k", publish_body("cust_0002", template="weekly-digest/v3"))

    assert response.status_code == 202
    assert response.json()["keys"] == [f"weekly-digest/{DAY}/cust_0002/email/v3"]


async def test_a_channel_queue_without_an_address_names_the_field(api: Api) -> None:
    body = publish_body("cust_9999", queue="transactional-email", template="receipt-v2")

    response = await post(api, "k", body)

    assert response.status_code == 422
    assert response.json()["field"] == "body.payload.email"


# ---------------------------------------------------------------- bad input names its field


@pytest.mark.parametrize(("body", "field"), [
    ({"queue": "weekly-digest"}, "body.payload"),
    (publish_body("cust 1"), "body.payload.customer_id"),
    (publish_body("a/b"), "body.payload.customer_id"),
    (publish_body(day="2026-02-30"), "body.payload.schedule_day"),
    (publish_body(day="14/08/2026"), "body.payload.schedule_day"),
    (publish_body(queue="nope"), "body.queue"),
    (publish_body(template="monthly-v3"), "body.payload.template"),
    (publish_body(template="weekly-digest"), "body.payload.template"),
    (publish_body(template="weekly digest-v3"), "body.payload.template"),
    (publish_body(template="a/b", queue="transactional-email", email="x@example.com"),
     "body.payload.template"),
    (publish_body("cust_0404"), "body.payload.customer_id"),  # not in the audience
    (publish_body(day="2026-08-01"), "body.payload.schedule_day"),  # past its freshness
    ({**publish_body(), "extra": 1}, "body.extra"),
    ([1, 2], "body"),
])
async def test_a_bad_body_is_refused_with_the_field_named(api: Api, body: object,
                                                          field: str) -> None:
    response = await post(api, "k", body)

    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert await api.intents() == 0
    # A refusal keeps no reservation: the corrected request may use the same key.
    fixed = await post(api, "k", publish_body("cust_0001"))
    assert fixed.status_code == 202


async def test_malformed_json_is_refused_naming_the_body(api: Api) -> None:
    response = await api.client.post(URL, content=b'{"queue": "weekly-digest", ',
                                     headers=publish_headers(api, "k"))

    assert response.status_code == 422
    assert response.json()["field"] == "body"


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded",
                                   "application/merge-patch+json"])
async def test_a_body_that_is_not_json_is_an_unsupported_media_type(api: Api, media: str
                                                                    ) -> None:
    headers = {**publish_headers(api, "k"), "Content-Type": media}

    response = await api.client.post(URL, content=dumps(publish_body()), headers=headers)

    assert response.status_code == 415
    assert response.json()["field"] == "header.Content-Type"
    assert await api.intents() == 0


async def test_json_with_a_charset_is_json(api: Api) -> None:
    headers = {**publish_headers(api, "k"), "Content-Type": "application/json; charset=utf-8"}

    response = await api.client.post(URL, content=dumps(publish_body()), headers=headers)

    assert response.status_code == 202


async def test_a_missing_idempotency_key_is_refused(api: Api) -> None:
    headers = publish_headers(api, "k")
    del headers["Idempotency-Key"]

    response = await api.client.post(URL, content=dumps(publish_body()), headers=headers)

    assert response.status_code == 422
    assert response.json()["field"] == "header.Idempotency-Key"


async def test_an_oversized_body_is_refused_before_anything_else(api: Api) -> None:
    huge = publish_body(data={"blob": "x" * 70_000})

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        yield b"{" + b" " * 40_000
        yield b" " * 40_000 + b"}"

    response = await post(api, "k", huge)
    streamed = await api.client.post(URL, content=chunks(), headers=publish_headers(api, "k2"))

    assert response.status_code == 413
    assert response.json()["field"] == "body"
    assert streamed.status_code == 413
    assert streamed.json()["field"] == "body"
    assert await api.intents() == 0


# ---------------------------------------------------------------- credentials


@pytest.mark.parametrize("scope", ["viewer", "operator", "trigger"])
async def test_a_token_without_the_publish_scope_is_forbidden(api: Api, scope: str) -> None:
    headers = {**publish_headers(api, "k"), **api.auth(scope)}

    response = await api.client.post(URL, content=dumps(publish_body()), headers=headers)

    assert response.status_code == 403
    assert await api.intents() == 0
    assert await api.runtime.store.api_idempotency_get("k") is None


async def test_a_revoked_publish_token_is_refused(api: Api) -> None:
    await api.runtime.store.api_token_revoke(api.tokens["publish"].split("_")[1], now=T0)

    response = await post(api, "k", publish_body())

    assert response.status_code == 401
    assert await api.intents() == 0


async def test_answers_never_carry_an_address(api: Api) -> None:
    response = await post(api, "k", publish_body("cust_0001"))

    values = [str(v) for _, v in walk(response.json())]
    assert not any("@example.com" in v or "+1555" in v for v in values)
