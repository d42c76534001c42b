"""Input the API can never deliver is refused with a 422 naming the field, in the one
error shape, before anything is written: text no store can hold (NUL, lone
surrogates), dates outside the scheduler's range, templates that do not exist,
addresses no send can use, and booleans or integers that are something else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from apikit import DAY, Api, open_api, publish_body, publish_headers

from tidings.admission.publish_intake import sendable
from tidings.core.clock import FakeClock
from tidings.core.model import IntentDraft
from tidings.delivery.compose import Composer
from tidings.delivery.templates import TemplateSet

URL = "/v1/queue/publish"
NUL, LONE = "\x00", "\ud800"


def write_templates(root: Path) -> Path:
    for template_id, files in {
        "weekly-digest/v3": {"subject.txt": "Your digest", "body.txt": "Hello {{ first }}",
                             "sms.txt": "Digest ready"},
        "receipt/v2": {"subject.txt": "Receipt", "body.txt": "Thanks", "sms.txt": "Thanks"},
    }.items():
        folder = root / template_id
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    return root


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """Channels with kinds and templates: the worker checks addresses and renders."""
    templates = str(write_templates(tmp_path / "templates"))
    twin = {"kind": "sandbox-twin"}
    channels = {"email": {"quota": "10/s", "kind": "email", "templates": templates,
                          "provider": twin},
                "sms": {"quota": "5/s", "kind": "sms", "templates": templates,
                        "provider": twin}}
    async with open_api(tmp_path, members=5, channels=channels) as opened:
        yield opened


def raw(obj: object) -> bytes:
    # ensure_ascii: NUL and lone surrogates travel as \u escapes, which is valid JSON.
    return json.dumps(obj, ensure_ascii=True).encode()


async def publish(api: Api, body: object, key: str = "k") -> httpx.Response:
    return await api.client.post(URL, content=raw(body), headers=publish_headers(api, key))


def json_auth(api: Api, scope: str) -> dict[str, str]:
    return {**api.auth(scope), "Content-Type": "application/json"}


def refused(response: httpx.Response, status: int, field: str) -> dict[str, Any]:
    """The answer is ``status`` in the API's error shape, naming ``field``."""
    assert response.status_code == status, response.text
    answer: dict[str, Any] = response.json()
    assert set(answer) >= {"error", "field", "message"}
    assert answer["field"] == field, answer
    assert answer["message"]
    return answer


# ---------------------------------------------------------------- text no store can hold


@pytest.mark.parametrize(("body", "field"), [
    (publish_body(f"cust{NUL}1"), "body.payload.customer_id"),
    (publish_body(f"cust{LONE}1"), "body.payload.customer_id"),
    (publish_body("cust\x071"), "body.payload.customer_id"),  # a control character
    (publish_body(email=f"a{NUL}@example.com"), "body.payload.email"),
    (publish_body(phone=f"+1555{LONE}0001"), "body.payload.phone"),
    (publish_body(template=f"weekly{NUL}-digest-v3"), "body.payload.template"),
    (publish_body(queue=f"weekly{NUL}-digest"), "body.queue"),
    (publish_body(data={"note": f"a{NUL}b"}), "body.payload.data.note"),
    (publish_body(data={"items": ["ok", f"{LONE}"]}), "body.payload.data.items[1]"),
    (publish_body(data={f"k{NUL}": 1}), "body.payload.data['k\\x00']"),
    (publish_body(data={LONE: 1}), "body.payload.data['\\ud800']"),
    (publish_body(note=f"x{NUL}"), "body.payload.note"),  # an extra field is data too
])
async def test_text_no_store_can_hold_is_refused_naming_the_field(
        api: Api, body: object, field: str) -> None:
    response = await publish(api, body)

    refused(response, 422, field)
    assert await api.intents() == 0
    assert await api.runtime.store.api_idempotency_get("k") is None


async def test_a_refused_key_is_shown_escaped_never_carried_into_the_answer(api: Api) -> None:
    response = await publish(api, publish_body(data={f"a{LONE}b": 1}))

    answer = refused(response, 422, "body.payload.data['a\\ud800b']")
    assert LONE not in response.text and "lone surrogate" in answer["message"]


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("PUT", "/v1/preferences/a%00b/email", {"opted_out": True}, "path.recipient_id"),
    ("DELETE", "/v1/preferences/a%00b/email", None, "path.recipient_id"),
    ("GET", "/v1/preferences/a%00b", None, "path.recipient_id"),
    ("PUT", "/v1/preferences/c/email", {"timezone": f"UT{NUL}C"}, "body.timezone"),
    ("PUT", "/v1/preferences/c/email", {"quiet_start": f"2{LONE}:00", "quiet_end": "07:00"},
     "body.quiet_start"),
    ("POST", "/v1/cancel", {"key": f"a{NUL}b"}, "body.key"),
    ("POST", "/v1/cancel", {"key": "a b"}, "body.key"),  # whitespace: never a key
    ("POST", "/v1/cancel", {"key": "ab", "reason": f"x{NUL}"}, "body.reason"),
    ("GET", "/v1/timeline?key=a%00b", None, "query.key"),
    ("GET", "/v1/timeline?recipient=a%00b", None, "query.recipient"),
    ("POST", "/v1/admission/pause", {"channel": f"s{NUL}ms"}, "body.channel"),
    ("POST", "/v1/admission/pause", {"campaign": f"w{NUL}"}, "body.campaign"),
    ("POST", "/v1/admission/pause", {"channel": "sms", "reason": f"x{NUL}"}, "body.reason"),
    ("GET", "/v1/dead-letters/e%00mail", None, "path.channel"),
    ("POST", "/v1/dead-letters/email/redrive", {"ids": [f"a{NUL}"]}, "body.ids[0]"),
    ("POST", "/v1/replay/weekly%00digest/2026-08-10", None, "path.campaign"),
    ("POST", "/v1/uncertain/resolve", {"as": "accepted", "keys": [f"a{NUL}b"]}, "body.keys[0]"),
    ("POST", "/v1/uncertain/resolve", {"as": "failed", "channel": f"e{NUL}"}, "body.channel"),
    ("POST", "/v1/uncertain/resolve", {"as": "failed", "keys": ["k"], "note": f"x{LONE}"},
     "body.note"),
    ("GET", "/v1/uncertain?channel=e%00mail", None, "query.channel"),
])
async def test_every_route_refuses_unstorable_text_naming_the_field(
        api: Api, method: str, path: str, body: object, field: str) -> None:
    scope = "publish" if path.startswith("/v1/preferences") and method != "GET" else "operator"

    response = await api.client.request(method, path, headers=json_auth(api, scope),
                                        content=None if body is None else raw(body))

    refused(response, 422, field)
    assert await api.runtime.store.switch_all() == []
    assert await api.runtime.preferences("c") == []


# ---------------------------------------------------------------- dates


@pytest.mark.parametrize("day", ["0001-01-01", "1970-01-01", "9999-12-31"])
async def test_a_day_outside_the_supported_dates_is_refused(api: Api, day: str) -> None:
    for queue in ("weekly-digest", "transactional-email"):
        response = await publish(api, publish_body(day=day, queue=queue, template="receipt-v2"
                                                   if queue != "weekly-digest" else None,
                                                   email="a@example.com"))

        answer = refused(response, 422, "body.payload.schedule_day")
        assert "1970-01-02 to 9998-12-31" in answer["message"]
    assert await api.intents() == 0


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31", "١٩٧٠-٠١-٠٥"])
async def test_a_replay_outside_the_supported_dates_is_refused(api: Api, day: str) -> None:
    response = await api.client.post(f"/v1/replay/weekly-digest/{day}",
                                     headers=api.auth("operator"))

    refused(response, 422, "path.date")
    assert await api.occurrences() == 0


# ---------------------------------------------------------------- what a worker would refuse


@pytest.mark.parametrize(("body", "field", "says"), [
    (publish_body(queue="transactional-email", template="nothere-v1", email="a@example.com"),
     "body.payload.template", "not found"),
    (publish_body(queue="transactional-email", template="receipt", email="a@example.com"),
     "body.payload.template", "NAME/vN"),
    (publish_body(queue="transactional-email", template="receipt-v2", email="not-an-address"),
     "body.payload.email", "invalid email address"),
    (publish_body(email="a@example.com", phone="5550001", first="Ada"), "body.payload.phone",
     "E.164"),
    (publish_body(email="a@example.com"), "body.payload.data.first",
     "template 'weekly-digest/v3' body.txt uses it in every message"),
])
async def test_what_no_worker_could_send_is_refused_at_publish(
        api: Api, body: object, field: str, says: str) -> None:
    response = await publish(api, body)

    assert says in refused(response, 422, field)["message"]
    assert await api.intents() == 0


async def test_a_publish_naming_another_version_of_the_campaign_is_a_conflict(api: Api) -> None:
    # v4 for a campaign declared at v3 would be a new key for a customer and day already
    # sent at v3: a second send. Moving versions is a change of settings.
    for template in ("weekly-digest-v4", "weekly-digest-v2"):
        response = await publish(api, publish_body(template=template))

        message = refused(response, 409, "body.payload.template")["message"]
        assert "declared at v3" in message and f"names v{template[-1]}" in message
    assert await api.intents() == 0
    assert (await publish(api, publish_body(template="weekly-digest-v3"))).status_code == 202


async def test_a_publish_whose_key_would_be_over_the_limit_is_refused(tmp_path: Path) -> None:
    # A long queue name, and channels without templates (so any template name is a key
    # segment of its own): every part within its bound, the key over 512.
    queue = "q" * 150
    async with open_api(tmp_path, api={"queues": {queue: {"channel": "email"}}}) as plain:
        body = publish_body("c" * 200, queue=queue, template="t" * 200, email="a@example.com")

        response = await publish(plain, body)

        assert "the limit is 512" in refused(response, 422, "body.payload")["message"]
        assert await plain.intents() == 0


async def test_a_sendable_message_is_still_accepted(api: Api) -> None:
    campaign = await publish(api, publish_body("cust_0001"), key="a")
    channel = await publish(api, publish_body(queue="transactional-email", template="receipt-v2",
                                              email="a@example.com"), key="b")

    assert (campaign.status_code, channel.status_code) == (202, 202), campaign.text
    assert campaign.json()["keys"] == [f"weekly-digest/{DAY}/cust_0001/email/v3",
                                       f"weekly-digest/{DAY}/cust_0001/sms/v3"]
    assert await api.intents() == 3


async def test_an_unusable_address_from_the_audience_skips_its_channel(api: Api) -> None:
    templates = TemplateSet.from_mapping({"weekly-digest/v3": {"body.txt": "b",
                                                               "subject.txt": "s"}})
    composer = Composer(store=api.runtime.store, kinds={"email": "email"},
                        templates={"email": templates}, clock=FakeClock())
    draft = IntentDraft(key="weekly-digest/2026-08-14/c1/email/v3", channel="email",
                        recipient_id="c1", address="nobody", template="weekly-digest/v3",
                        due_at=0.0)
    skipped: dict[str, str] = {}

    kept = sendable(composer.draft_problem, [draft], skipped, from_payload=False,
                    template_field="queue", where="body.")

    assert kept == []
    assert skipped["email"].startswith("customer's address in the audience: invalid email")
    assert "nobody" not in skipped["email"]


# ---------------------------------------------------------------- types are types


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "1", None])
async def test_opted_out_takes_a_json_boolean_only(api: Api, value: object) -> None:
    response = await api.client.put("/v1/preferences/c/email", headers=json_auth(api, "publish"),
                                    content=raw({"opted_out": value}))

    refused(response, 422, "body.opted_out")
    assert await api.runtime.preferences("c") == []


@pytest.mark.parametrize("value", ["5", True, 5.0, 10**40])
async def test_a_redrive_limit_is_a_json_integer_in_range(api: Api, value: object) -> None:
    response = await api.client.post("/v1/dead-letters/email/redrive",
                                     headers=json_auth(api, "operator"),
                                     content=raw({"limit": value}))

    refused(response, 422, "body.limit")


async def test_data_nested_past_what_json_can_read_is_a_4xx_naming_the_body(api: Api) -> None:
    deep = '{"queue": "weekly-digest", "payload": {"customer_id": "cust_0001", ' \
           f'"schedule_day": "{DAY}", "data": {{"x": {"[" * 100_000}{"]" * 100_000}}}}}}}'

    response = await api.client.post(URL, content=deep.encode(), headers=publish_headers(api, "k"))

    assert 400 <= response.status_code < 500, response.text
    assert response.json()["field"] == "body"
    assert await api.intents() == 0
