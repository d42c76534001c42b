"""The API's request log (route template, status, duration; never bodies or headers) and
error bodies that never echo an address or a phone number back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from apikit import Api, dumps, open_api, publish_body, publish_headers

from support.logcapture import json_logs, lines, restored_logging

ADDRESS = "ada.lovelace@example.com"
PHONE = "+15557654321"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=3) as opened:
        yield opened


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    with restored_logging():
        yield


async def test_each_request_is_logged_with_its_route_template_status_and_duration(
    api: Api,
) -> None:
    stream = json_logs("info")

    await api.client.get("/healthz")
    await api.client.post(f"/v1/trigger/{ADDRESS}", content=b"{}",
                          headers={"Authorization": f"Bearer {api.tokens['publish']}x"})
    await api.client.get(f"/no/such/{PHONE}?email={ADDRESS}")

    requests = [x for x in lines(stream) if x["event"] == "request"]
    assert [(x["method"], x["route"], x["status"]) for x in requests] == [
        ("GET", "/healthz", 200),
        ("POST", "/v1/trigger/{campaign}", 401),
        ("GET", "(unmatched)", 404),
    ]
    assert all(x["logger"] == "tidings.api.access" and x["level"] == "info"
               and x["duration_ms"] >= 0 for x in requests)
    text = stream.getvalue()
    for secret in (ADDRESS, PHONE, api.tokens["publish"]):
        assert secret not in text


async def test_a_refusal_by_the_body_limit_is_logged_too(tmp_path: Path) -> None:
    stream = json_logs("info")
    async with open_api(tmp_path, api={"max_body_bytes": 1024}) as small:
        answer = await small.client.post("/v1/queue/publish", content=b"x" * 2000,
                                         headers=publish_headers(small, "k1"))

    assert answer.status_code == 413
    (line,) = [x for x in lines(stream) if x["event"] == "request"]
    assert (line["route"], line["status"]) == ("(unmatched)", 413)


async def test_error_bodies_never_echo_an_address_or_a_phone_number(api: Api) -> None:
    body = publish_body(queue=ADDRESS, email=ADDRESS, phone=PHONE)
    unknown_queue = await api.client.post("/v1/queue/publish", content=dumps(body),
                                          headers=publish_headers(api, "k1"))
    odd_field = await api.client.post(
        "/v1/queue/publish", content=dumps({**publish_body(), ADDRESS: PHONE}),
        headers=publish_headers(api, "k2"))
    unknown_campaign = await api.client.post(f"/v1/trigger/{PHONE}", content=b"{}",
                                             headers=api.auth("trigger"))

    assert unknown_queue.status_code == 422
    assert unknown_queue.json()["message"].startswith("unknown queue '[address]'")
    assert odd_field.status_code == 422 and "[address]" in odd_field.json()["field"]
    assert unknown_campaign.status_code in (404, 422)
    for answer in (unknown_queue, odd_field, unknown_campaign):
        assert ADDRESS not in answer.text and PHONE not in answer.text
