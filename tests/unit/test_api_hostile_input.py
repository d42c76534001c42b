"""What callers with a bug (or no credentials at all) can send that once answered 500: a
timestamp no float holds, an id whose digits are not ASCII, a time zone that is a
folder of the zone database, a form of a thousand fields, JSON nested past what the
parser reads. Each is now a 4xx naming the field, and nothing is written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from apikit import Api, open_api, publish_body, publish_headers
from hypothesis import given
from hypothesis import strategies as st

from tidings.admission.publish_intake import _predecessors
from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.keys import storable
from tidings.core.preferences import zone
from tidings.webhooks.parse import parse

HUGE = "9" * 400


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=5) as opened:
        yield opened


def refused(response: httpx.Response, status: int, field: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


async def test_a_trigger_timestamp_no_float_holds_is_a_401_without_credentials(api: Api) -> None:
    response = await api.client.post("/v1/trigger/weekly-digest", headers={
        "X-Tidings-Timestamp": HUGE, "X-Tidings-Signature": "sha256=00"})

    refused(response, 401, "header.X-Tidings-Timestamp")
    assert "tolerance" in response.json()["message"]
    assert await api.occurrences() == 0


@pytest.mark.parametrize("customer", ["²", "¹⁰", "a\ue000", "x\U0001f600"])
async def test_a_customer_id_of_odd_characters_is_not_in_the_audience_never_a_500(
        api: Api, customer: str) -> None:
    response = await api.client.post("/v1/queue/publish", content=json.dumps(
        publish_body(customer)).encode(), headers=publish_headers(api, f"k-{ord(customer[-1])}"))

    assert response.status_code == 422, response.text
    assert response.json()["field"].startswith("body.payload.customer_id")
    assert await api.intents() == 0


@given(st.text(min_size=1, max_size=20).filter(storable))
def test_the_ids_an_audience_is_paged_from_are_text_every_store_holds(rid: str) -> None:
    for after in _predecessors(rid):
        assert storable(after)
        assert after < rid or after.isdigit()


async def test_a_time_zone_that_is_a_folder_of_the_zone_database_is_refused(api: Api) -> None:
    response = await api.client.put("/v1/preferences/cust_0001/email", content=json.dumps(
        {"timezone": "Europe"}).encode(), headers={**api.auth("publish"),
                                                  "Content-Type": "application/json"})

    refused(response, 422, "body.timezone")
    with pytest.raises(InvalidInput):
        zone("America")
    with pytest.raises(ConfigurationError, match="timezone"):
        Settings.parse({"channels": {"email": {}}, "campaigns": {"c": {
            "cron": "0 9 * * MON", "timezone": "Etc", "template": "t", "channels": ["email"],
            "audience": {"sql": {"url": "sqlite:///crm.db", "query": "SELECT 1"}}}}})


async def test_a_dashboard_form_of_a_thousand_fields_is_a_422(api: Api) -> None:
    response = await api.client.post("/ui/bulk", content="&".join(["a=1"] * 1000),
                                     headers={**api.auth("operator"), "Content-Type":
                                              "application/x-www-form-urlencoded"})

    refused(response, 422, "body")


async def test_a_bulk_delay_past_the_supported_dates_is_refused_from_the_form(api: Api) -> None:
    response = await api.client.post("/ui/bulk", data={
        "scope": "campaign", "name": "weekly-digest", "action": "delay",
        "until": "99999999w"}, headers={**api.auth("operator"), "Accept": "text/html"})

    assert response.status_code == 422
    assert "<strong>until</strong> is outside the supported dates" in response.text


@pytest.mark.parametrize(("body", "field"), [
    (b"[" * 3000 + b"]" * 3000, "body"),
    (json.dumps({"message_id": "m1", "event": "delivered", "at": int(HUGE)}).encode(),
     "body.at"),
])
def test_a_webhook_body_a_sender_got_wrong_is_invalid_input(body: bytes, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse("generic", body, now=1_780_000_000.0)
    assert caught.value.field == field
