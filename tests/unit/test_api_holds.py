"""Holds and bulk actions over the API and the dashboard: operator scope, every input
refused with the field it names, the caller's token named in the audit trail, and the
dashboard's forms behind CSRF."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import DAY, Api, open_api
from test_api_ui import FRAGMENT, HTML, session

from tidings.core.states import State

KEY = f"weekly-digest/{DAY}/cust_0001/email/v3"
HOLD = {"campaign": "weekly-digest", "reason": "template bug"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """Given the digest admitted for five customers (five emails, three SMS), served over
    https (the dashboard's cookies are Secure)."""
    async with open_api(tmp_path, members=5, base_url="https://tidings.test") as opened:
        response = await opened.client.post("/v1/trigger/weekly-digest",
                                            headers=opened.auth("trigger"))
        assert response.status_code == 200
        yield opened


async def token_id(api: Api, scope: str) -> str:
    return api.tokens[scope].split("_")[1]


async def states(api: Api, channel: str = "email") -> dict[str, int]:
    return (await api.runtime.store.intent_counts())[channel]


async def test_a_hold_over_the_api_parks_the_campaign_and_names_the_token(api: Api) -> None:
    response = await api.client.post("/v1/holds", headers=api.auth("operator"), json=HOLD)

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["scope"], body["name"], body["held"]) == ("campaign", "weekly-digest", True)
    assert body["by"].startswith("token operator token (")
    [event] = await api.runtime.store.events_for("hold/campaign/weekly-digest")
    assert (event.type, event.worker, event.detail) == ("hold", body["by"], "template bug")

    # a worker parks what the hold covers, unsent
    await api.runtime.worker("email").run_once()
    assert await states(api) == {"parked": 5}
    listed = await api.client.get("/v1/holds", headers=api.auth("viewer"))
    assert listed.json()["active"][0]["parked"] == 5
    status = await api.client.get("/v1/status", headers=api.auth("viewer"))
    assert status.json()["holds"]["active"][0]["by"] == body["by"]
    # parked work is backlog still to drain (the plan weighs it against its deadline)
    assert status.json()["campaigns"]["weekly-digest"]["channels"]["email"]["backlog"] == 5

    metrics = (await api.client.get("/metrics", headers=api.auth("viewer"))).text
    assert 'tidings_hold_parked{name="weekly-digest",scope="campaign"} 5.0' in metrics
    assert "tidings_expired_while_held_total 0.0" in metrics

    # and the release republishes them all
    released = await api.client.post("/v1/holds/release", headers=api.auth("operator"),
                                      json={"campaign": "weekly-digest"})
    assert released.status_code == 200, released.text
    assert (released.json()["was_held"], released.json()["republished"]) == (True, 5)
    assert await states(api) == {"enqueued": 5}
    trail = await api.runtime.store.events_for("hold/campaign/weekly-digest")
    assert [e.type for e in trail] == ["hold", "hold_released"]


async def test_holds_need_the_operator_scope(api: Api) -> None:
    for path in ("/v1/holds", "/v1/holds/release", "/v1/bulk/cancel"):
        refused = await api.client.post(path, headers=api.auth("viewer"), json=HOLD)
        assert refused.status_code == 403, path
    assert await api.runtime.store.hold_all() == []


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"campaign": "nope"}, 404, "body.campaign"),
    ({"channel": "fax"}, 404, "body.channel"),
    ({"occurrence": "weekly-digest/1999-01-01"}, 404, "body.occurrence"),
    ({"campaign": "weekly-digest", "channel": "email"}, 422, "body.campaign"),
    ({}, 422, "body.campaign"),
    ({"campaign": "weekly-digest", "reason": "bad\u0000"}, 422, "body.reason"),
    ({"occurrence": "has space"}, 422, "body.occurrence"),
    ({"campaign": "weekly-digest", "until": 5}, 422, "body.until"),
], ids=["unknown-campaign", "unknown-channel", "unknown-occurrence", "two-targets",
        "no-target", "nul-reason", "space-in-occurrence", "extra-field"])
async def test_a_hold_refuses_bad_input_naming_the_field(
    api: Api, body: dict[str, object], status: int, field: str,
) -> None:
    response = await api.client.post("/v1/holds", headers=api.auth("operator"), json=body)
    assert (response.status_code, response.json()["field"]) == (status, field)
    assert await api.runtime.store.hold_all() == []


async def test_a_lone_surrogate_is_refused_naming_the_field(api: Api) -> None:
    response = await api.client.post(
        "/v1/holds", content=b'{"campaign": "weekly\\ud800"}',
        headers={**api.auth("operator"), "Content-Type": "application/json"})
    assert (response.status_code, response.json()["field"]) == (422, "body.campaign")


async def test_an_occurrence_is_held_by_its_id(api: Api) -> None:
    occurrence = f"weekly-digest/{DAY}"
    response = await api.client.post("/v1/holds", headers=api.auth("operator"),
                                     json={"occurrence": occurrence})
    assert response.status_code == 200, response.text
    [hold] = await api.runtime.store.hold_all()
    assert (hold.scope, hold.name) == ("occurrence", occurrence)


async def test_a_bulk_dry_run_counts_then_the_action_names_the_token(api: Api) -> None:
    body = {"campaign": "weekly-digest", "channel": "email", "reason": "wrong list"}
    dry = await api.client.post("/v1/bulk/dead-letter", headers=api.auth("operator"),
                                json={**body, "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert (dry.json()["selected"], dry.json()["changed"]) == ({"enqueued": 5}, 0)
    assert await states(api) == {"enqueued": 5}

    done = await api.client.post("/v1/bulk/dead-letter", headers=api.auth("operator"),
                                 json=body)
    assert (done.json()["changed"], await states(api)) == (5, {"dead": 5})
    assert await states(api, "sms") == {"enqueued": 3}
    [event] = await api.runtime.store.events_for("bulk/dead-letter/weekly-digest")
    assert event.worker == done.json()["by"] and "wrong list" in (event.detail or "")
    assert (await api.runtime.store.intent_get(KEY)).state is State.DEAD  # type: ignore[union-attr]


async def test_a_bulk_action_on_an_unknown_occurrence_is_refused(api: Api) -> None:
    for occurrence in ("nosuch/x", ""):
        refused = await api.client.post("/v1/bulk/cancel", headers=api.auth("operator"),
                                        json={"occurrence": occurrence})
        assert refused.status_code in (404, 422), refused.text
        assert refused.json()["field"] == "body.occurrence"
    assert await states(api) == {"enqueued": 5}


async def test_a_bulk_delay_moves_the_next_attempt(api: Api) -> None:
    until = api.clock.now() + 7200
    done = await api.client.post("/v1/bulk/delay", headers=api.auth("operator"),
                                 json={"campaign": "weekly-digest", "until": until})
    assert done.status_code == 200, done.text
    assert done.json()["changed"] == 8
    intent = await api.runtime.store.intent_get(KEY)
    assert intent is not None and (intent.state, intent.next_attempt_at) == (
        State.RETRYABLE, until)


@pytest.mark.parametrize(("action", "body", "status", "field"), [
    ("purge", {"campaign": "weekly-digest"}, 422, "path.action"),
    ("cancel", {}, 422, "body.campaign"),
    ("cancel", {"campaign": "nope"}, 404, "body.campaign"),
    ("cancel", {"campaign": "weekly-digest", "states": ["accepted"]}, 422, "body.states"),
    ("cancel", {"campaign": "weekly-digest", "states": ["x\u0000"]}, 422, "body.states[0]"),
    ("cancel", {"campaign": "weekly-digest", "older_than_s": -1}, 422, "body.older_than_s"),
    ("cancel", {"campaign": "weekly-digest", "dry_run": "yes"}, 422, "body.dry_run"),
    ("delay", {"campaign": "weekly-digest"}, 422, "body.until"),
    ("delay", {"campaign": "weekly-digest", "until": 1000}, 422, "body.until"),
    ("cancel", {"campaign": "weekly-digest", "until": 2e9}, 422, "body.until"),
], ids=["unknown-action", "no-selection", "unknown-campaign", "finished-state", "nul-state",
        "negative-age", "loose-boolean", "delay-without-time", "delay-into-the-past",
        "time-on-a-cancel"])
async def test_a_bulk_action_refuses_bad_input_naming_the_field(
    api: Api, action: str, body: dict[str, object], status: int, field: str,
) -> None:
    response = await api.client.post(f"/v1/bulk/{action}", headers=api.auth("operator"),
                                     json=body)
    assert (response.status_code, response.json()["field"]) == (status, field), response.text
    assert await states(api) == {"enqueued": 5}


# ---------------------------------------------------------------- the dashboard


async def test_holding_from_the_dashboard_needs_the_csrf_token(api: Api) -> None:
    csrf = await session(api, "operator")
    form = {"scope": "campaign", "name": "weekly-digest", "reason": "template bug"}

    wrong = await api.client.post("/ui/holds/hold", headers=FRAGMENT,
                                  data={**form, "csrf": "0" * 64})
    assert (wrong.status_code, wrong.json()["field"]) == (403, "form.csrf")
    assert await api.runtime.store.hold_all() == []

    done = await api.client.post("/ui/holds/hold", headers=HTML, data={**form, "csrf": csrf})
    assert done.status_code == 303
    [hold] = await api.runtime.store.hold_all()
    assert hold.held_by.startswith("token operator token (")
    page = (await api.client.get(done.headers["location"], headers=HTML)).text
    assert "Delivery held for campaign weekly-digest." in page
    assert 'data-hold="campaign:weekly-digest"' in page and "template bug" in page

    released = await api.client.post("/ui/holds/release", headers=HTML, data={
        "scope": "campaign", "name": "weekly-digest", "csrf": csrf})
    assert released.status_code == 303
    assert await api.runtime.store.hold_all() == []


async def test_a_dashboard_bulk_action_is_a_dry_run_unless_unchecked(api: Api) -> None:
    csrf = await session(api, "operator")
    form = {"action": "cancel", "scope": "campaign", "name": "weekly-digest", "csrf": csrf}

    dry = await api.client.post("/ui/bulk", headers=HTML, data={**form, "dry_run": "1"})
    assert dry.status_code == 303
    page = (await api.client.get(dry.headers["location"], headers=HTML)).text
    assert "Dry run of cancel: 8 intents selected; nothing changed." in page
    assert await states(api) == {"enqueued": 5}

    done = await api.client.post("/ui/bulk", headers=HTML, data=form)
    page = (await api.client.get(done.headers["location"], headers=HTML)).text
    assert "cancel: 8 intents selected, 8 changed." in page
    assert await states(api) == {"cancelled": 5}

    bad = await api.client.post("/ui/bulk", headers=FRAGMENT,
                                data={**form, "states": "accepted"})
    assert (bad.status_code, bad.json()["field"]) == (422, "form.state")
    unknown = await api.client.post("/ui/bulk", headers=FRAGMENT,
                                    data={**form, "name": "nope"})
    assert (unknown.status_code, unknown.json()["field"]) == (404, "form.name")


async def test_a_dashboard_delay_takes_a_time_as_well_as_a_duration(api: Api) -> None:
    from datetime import UTC, datetime

    csrf = await session(api, "operator")
    at = datetime.fromtimestamp(api.clock.now() + 7200, tz=UTC).strftime("%Y-%m-%dT%H:%M")
    form = {"action": "delay", "scope": "campaign", "name": "weekly-digest", "csrf": csrf}
    done = await api.client.post("/ui/bulk", headers=HTML, data={**form, "until": at})
    assert done.status_code == 303, done.text
    intent = await api.runtime.store.intent_get(KEY)
    assert intent is not None and intent.state is State.RETRYABLE
    assert intent.next_attempt_at == datetime.fromisoformat(at).replace(
        tzinfo=UTC).timestamp()
    bad = await api.client.post("/ui/bulk", headers=FRAGMENT,
                                data={**form, "until": "2026-13-45"})
    assert (bad.status_code, bad.json()["field"]) == (422, "form.until")


async def test_a_viewer_sees_the_holds_but_no_form(api: Api) -> None:
    await session(api, "viewer")
    page = (await api.client.get("/ui", headers=HTML)).text
    assert 'data-hold="campaign:weekly-digest"' in page
    assert 'action="/ui/holds/hold"' not in page and 'action="/ui/bulk"' not in page
    refused = await api.client.post("/ui/bulk", headers=FRAGMENT, data={"action": "cancel"})
    assert refused.status_code == 403
