"""``/v1/uncertain``: held sends listed for a viewer, settled by an operator's audited
decision (by key or by selection), and counted in status, plan and ``/metrics``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import DAY, T0, Api, open_api

from tidings.core.states import State
from tidings.stores.base import Change, ClaimKind

KEYS = [f"weekly-digest/{DAY}/cust_000{i}/email/v3" for i in (1, 2, 3)]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=3) as opened:
        response = await opened.client.post("/v1/trigger/weekly-digest",
                                            headers=opened.auth("trigger"))
        assert response.status_code == 200
        yield opened


async def hold(api: Api, key: str, *, at: float) -> None:
    """Given a send of ``key`` whose answer was lost and that the reconciler held."""
    store = api.runtime.store
    [claim] = await store.intent_claim_many([key], owner="w1", lease_s=30, now=at)
    assert claim.kind is ClaimKind.CLAIMED
    assert await store.intent_apply_many([
        Change(key=key, from_state=State.CLAIMED, to_state=State.UNCERTAIN, event="uncertain",
               lease_token=claim.token, reason="no answer")], now=at) == [key]
    assert await store.intent_apply_many([
        Change(key=key, from_state=State.UNCERTAIN, to_state=State.HELD, event="held",
               reason="held")], now=at) == [key]


async def test_a_viewer_lists_held_sends_with_the_channel_policy(api: Api) -> None:
    await hold(api, KEYS[0], at=T0 + 1)
    await hold(api, KEYS[1], at=T0 + 7200)
    api.clock.advance(7300)

    listed = (await api.client.get("/v1/uncertain", headers=api.auth("viewer"),
                                   params={"older_than": "1h"})).json()

    assert [r["key"] for r in listed["uncertain"]] == [KEYS[0]]
    assert listed["uncertain"][0]["awaiting_operator"] is True
    # the sandbox twin can be asked by key: lookup is the default policy
    assert listed["channels"]["email"] == {
        "policy": "lookup", "default": True, "hold_s": 3600.0, "lookup_settle_s": 0.0,
        "uncertain": 0, "held": 2, "awaiting_operator": 1}
    assert "address" not in listed["uncertain"][0]


async def test_an_operator_resolves_by_key_and_the_event_names_the_token(api: Api) -> None:
    await hold(api, KEYS[0], at=T0 + 1)

    response = await api.client.post("/v1/uncertain/resolve", headers=api.auth("operator"),
                                     json={"keys": [KEYS[0], KEYS[1]], "as": "accepted",
                                           "note": "seen in the provider console"})

    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["key"] for r in body["resolved"]] == [KEYS[0]]
    assert body["skipped"] == [{"key": KEYS[1], "why": "is enqueued, not uncertain or held"}]
    token_id = api.tokens["operator"].split("_")[1]
    assert body["by"] == f"api:tid_{token_id} (operator token)"
    events = await api.runtime.store.events_for(KEYS[0])
    [decided] = [e for e in events if e.type == "operator_accepted"]
    assert decided.worker == f"operator:api:tid_{token_id} (operator token)"
    intent = await api.runtime.store.intent_get(KEYS[0])
    assert intent is not None and intent.state is State.ACCEPTED


async def test_an_operator_resends_a_selection_by_channel(api: Api) -> None:
    for key in KEYS:
        await hold(api, key, at=T0 + 1)

    response = await api.client.post("/v1/uncertain/resolve", headers=api.auth("operator"),
                                     json={"channel": "email", "as": "resend"})

    assert sorted(r["key"] for r in response.json()["resolved"]) == sorted(KEYS)
    for key in KEYS:
        intent = await api.runtime.store.intent_get(key)
        assert intent is not None and intent.state is State.RETRYABLE


async def test_a_viewer_cannot_decide(api: Api) -> None:
    await hold(api, KEYS[0], at=T0 + 1)
    response = await api.client.post("/v1/uncertain/resolve", headers=api.auth("viewer"),
                                     json={"keys": [KEYS[0]], "as": "resend"})
    assert response.status_code == 403
    intent = await api.runtime.store.intent_get(KEYS[0])
    assert intent is not None and intent.state is State.HELD


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"as": "resend"}, 422, "body.keys"),
    ({"keys": ["k"], "as": "maybe"}, 422, "body.as"),
    ({"channel": "fax", "as": "failed"}, 404, "body.channel"),
    ({"channel": "email", "older_than": "soon", "as": "failed"}, 422, "body.older_than"),
    ({"keys": ["k"], "channel": "email", "as": "failed"}, 422, "body.keys"),
])
async def test_a_bad_decision_names_its_field(api: Api, body: dict[str, object], status: int,
                                              field: str) -> None:
    response = await api.client.post("/v1/uncertain/resolve", headers=api.auth("operator"),
                                     json=body)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


async def test_status_plan_and_metrics_count_held_sends(api: Api) -> None:
    await hold(api, KEYS[0], at=T0 + 1)
    api.clock.advance(4000)

    status = (await api.client.get("/v1/status", headers=api.auth("viewer"))).json()
    plan = (await api.client.get("/v1/plan", headers=api.auth("viewer"))).json()
    metrics = (await api.client.get("/metrics", headers=api.auth("viewer"))).text
    dashboard = (await api.client.get("/ui", headers=api.auth("viewer"))).text

    assert status["channels"]["email"]["uncertain_sends"]["held"] == 1
    assert plan["uncertain"]["email"]["policy"] == "lookup"
    assert 'tidings_uncertain{channel="email",state="held"} 1.0' in metrics
    assert 'tidings_uncertain{channel="email",state="awaiting_operator"} 1.0' in metrics
    assert 'tidings_uncertain{channel="sms",state="uncertain"} 0.0' in metrics
    email_card = dashboard.split('data-channel="email"')[1].split("</article>")[0]
    assert 'data-metric="held" class="warn"' in email_card
