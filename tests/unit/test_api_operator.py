"""Operator endpoints and ``/metrics``: the three questions about any customer, and
steering a campaign without a database console."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import DAY, T0, Api, dumps, open_api, publish_body, publish_headers, walk

from tidings.core.model import OutgoingMessage
from tidings.core.pacing import PaceLimits
from tidings.core.states import State
from tidings.core.surrogate import surrogate
from tidings.stores.base import Change, ClaimKind

KEY = f"weekly-digest/{DAY}/cust_0001/email/v3"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=5) as opened:
        response = await opened.client.post("/v1/trigger/weekly-digest",
                                            headers=opened.auth("trigger"))
        assert response.status_code == 200
        yield opened


async def settle(api: Api, key: str, state: State, *, at: float, reason: str = "r") -> int:
    """Given the intent claimed by a worker and moved to ``state``; returns its token."""
    [claim] = await api.runtime.store.intent_claim_many([key], owner="w1", lease_s=30,
                                                        now=at - 1)
    assert claim.kind is ClaimKind.CLAIMED and claim.token is not None
    intent = claim.intent
    assert intent is not None
    applied = await api.runtime.store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=state, event=state.value,
        lease_token=claim.token, reason=reason, receipt="rcpt-1",
        detail=surrogate(intent.recipient_id))], now=at)
    assert applied == [key]
    return claim.token


async def dead_letter(api: Api, key: str, *, at: float, reason: str) -> None:
    """Given the message of ``key`` moved to the email dead letters."""
    received = await api.runtime.transport.receive("email", max_messages=100, visibility_s=60,
                                                   now=at)
    [message] = [m for m in received if m.message_id == key]
    await api.runtime.transport.dead_letter("email", [(message.receipt, reason)], now=at)
    others = [(m.receipt, 0.0) for m in received if m.message_id != key]
    await api.runtime.transport.nack("email", others, now=at)


# ---------------------------------------------------------------- status and plan


async def test_status_answers_per_channel_and_campaign(api: Api) -> None:
    await settle(api, KEY, State.ACCEPTED, at=T0 + 10)
    api.clock.advance(20)

    status = (await api.client.get("/v1/status", headers=api.auth("viewer"))).json()

    email = status["channels"]["email"]
    assert (email["total"], email["backlog"], email["accepted"]) == (5, 4, 1)
    assert email["send_rate_per_s"] == pytest.approx(1 / 300, abs=1e-4)
    assert email["sli"] == 1.0 and email["queue"]["ready"] == 5
    assert email["oldest_age_s"] == pytest.approx(25)
    assert {"rate_limited", "retries", "dead_letters", "duplicates_suppressed",
            "in_flight", "attempts"} <= set(email)
    assert email["drain"]["rate_source"] == "observed"
    assert email["drain"]["drain_s"] == pytest.approx(4 * 300, rel=1e-3)
    assert email["drain"]["deadline_in_s"] == pytest.approx(6 * 3600 - 25)
    assert email["drain"]["verdict"] == "ok"
    campaign = status["campaigns"]["weekly-digest"]
    assert campaign["channels"]["email"]["drain"]["freshness_deadline_s"] == 6 * 3600
    assert campaign["latest_occurrence"]["logical_date"] == DAY
    assert campaign["channels"]["sms"]["backlog"] == 3
    assert campaign["paused"] is False


async def test_plan_compares_drain_time_with_the_freshness_deadline(api: Api) -> None:
    plan = (await api.client.get("/v1/plan", headers=api.auth("viewer"))).json()

    [email] = [x for x in plan["lines"] if x["channel"] == "email" and x["campaign"] is None]
    assert email["backlog"] == 5
    assert email["rate_source"] == "configured"
    paced = PaceLimits(quota_per_s=10).paced_per_s  # the pacer aims just under the quota
    assert paced is not None and paced < 10
    assert email["rate_per_s"] == pytest.approx(paced)
    assert email["drain_s"] == pytest.approx(5 / paced, abs=1e-3)
    assert email["deadline_in_s"] == pytest.approx(6 * 3600 - 5)
    assert email["verdict"] == "ok"


# ---------------------------------------------------------------- switches, replay, cancel


async def test_pause_and_resume_a_channel(api: Api) -> None:
    paused = await api.client.post("/v1/admission/pause", headers=api.auth("operator"),
                                   json={"channel": "sms", "reason": "provider incident"})
    assert paused.status_code == 200 and paused.json()["paused"] is True

    status = (await api.client.get("/v1/status", headers=api.auth("viewer"))).json()
    assert status["channels"]["sms"]["paused"] is True

    resumed = await api.client.post("/v1/admission/resume", headers=api.auth("operator"),
                                    json={"channel": "sms"})
    assert resumed.json()["paused"] is False


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"channel": "fax"}, 404, "body.channel"),
    ({"campaign": "monthly"}, 404, "body.campaign"),
    ({}, 422, "body.campaign"),
    ({"channel": "sms", "campaign": "weekly-digest"}, 422, "body.campaign"),
])
async def test_a_bad_switch_names_its_field(api: Api, body: dict[str, str], status: int,
                                            field: str) -> None:
    response = await api.client.post("/v1/admission/pause", headers=api.auth("operator"),
                                     json=body)

    assert response.status_code == status
    assert response.json()["field"] == field
    if status == 404:
        assert response.json()["message"].startswith("unknown ")
    assert await api.runtime.store.switch_all() == []


async def test_replay_admits_a_missed_date_as_its_own_admission(api: Api) -> None:
    # 2026-08-10's six-hour freshness deadline has passed: without a new one every
    # intent would expire unsent, so the replay is refused and says why.
    refused = await api.client.post("/v1/replay/weekly-digest/2026-08-10",
                                    headers=api.auth("operator"))
    assert (refused.status_code, refused.json()["field"]) == (422, "query.expires_in_s")
    assert "freshness deadline passed" in refused.json()["message"]
    assert await api.intents() == 8

    response = await api.client.post("/v1/replay/weekly-digest/2026-08-10",
                                     params={"expires_in_s": 3600},
                                     headers=api.auth("operator"))

    assert response.status_code == 200
    assert response.json()["occurrence"]["kind"] == "replay"
    assert response.json()["pass"]["admitted"] == 8
    assert await api.intents() == 16


async def test_replay_of_a_future_or_bad_date_names_the_field(api: Api) -> None:
    future = await api.client.post("/v1/replay/weekly-digest/2026-09-01",
                                   headers=api.auth("operator"))
    bad = await api.client.post("/v1/replay/weekly-digest/2026-13-01",
                                headers=api.auth("operator"))

    assert (future.status_code, future.json()["field"]) == (422, "path.date")
    assert (bad.status_code, bad.json()["field"]) == (422, "path.date")
    assert await api.intents() == 8


async def test_cancel_a_key_before_its_send(api: Api) -> None:
    response = await api.client.post("/v1/cancel", headers=api.auth("operator"),
                                     json={"key": KEY, "reason": "customer asked"})
    unknown = await api.client.post("/v1/cancel", headers=api.auth("operator"),
                                    json={"key": "nope"})

    assert response.json() == {"cancelled": {KEY: "cancelled"}}
    intent = await api.runtime.store.intent_get(KEY)
    assert intent is not None and intent.reason == "customer asked"
    assert (unknown.status_code, unknown.json()["field"]) == (404, "body.key")


# ---------------------------------------------------------------- dead letters


async def test_dead_letters_are_listed_with_their_intents_state(api: Api) -> None:
    await settle(api, KEY, State.DEAD, at=T0 + 10, reason="retry budget spent")
    await dead_letter(api, KEY, at=T0 + 11, reason="retry budget spent")

    response = await api.client.get("/v1/dead-letters/email", headers=api.auth("viewer"))

    [row] = response.json()["dead_letters"]
    assert (row["key"], row["intent_state"], row["reason"]) == (KEY, "dead",
                                                                "retry budget spent")


async def test_redrive_reopens_a_dead_intent_and_puts_its_message_back(api: Api) -> None:
    await settle(api, KEY, State.DEAD, at=T0 + 10)
    await dead_letter(api, KEY, at=T0 + 11, reason="retry budget spent")
    api.clock.advance(60)

    response = await api.client.post("/v1/dead-letters/email/redrive",
                                     headers=api.auth("operator"), json={})

    [row] = response.json()["redriven"]
    assert (row["key"], row["state_before"], row["reopened"]) == (KEY, "dead", True)
    intent = await api.runtime.store.intent_get(KEY)
    assert intent is not None and intent.state is State.RETRYABLE and intent.failures == 0
    assert await api.runtime.transport.contains("email", [KEY]) == {KEY}
    [claim] = await api.runtime.store.intent_claim_many([KEY], owner="w2", lease_s=30,
                                                        now=api.clock.now())
    assert claim.kind is ClaimKind.CLAIMED  # it will be sent again, once


async def test_a_redriven_message_whose_intent_was_accepted_is_not_sent_again(api: Api) -> None:
    await settle(api, KEY, State.ACCEPTED, at=T0 + 10)
    await dead_letter(api, KEY, at=T0 + 11, reason="received 51 times without progress")

    response = await api.client.post("/v1/dead-letters/email/redrive",
                                     headers=api.auth("operator"), json={"ids": None})

    [row] = response.json()["redriven"]
    assert (row["state_before"], row["reopened"]) == ("accepted", False)
    # The worker's claim is the ledger check before any send: a duplicate, no send.
    [claim] = await api.runtime.store.intent_claim_many([KEY], owner="w2", lease_s=30,
                                                        now=api.clock.now())
    assert claim.kind is ClaimKind.DONE
    assert "duplicate_observed" in [e.type for e in await api.runtime.store.events_for(KEY)]


async def test_redrive_of_unknown_ids_or_channel_names_the_field(api: Api) -> None:
    ids = await api.client.post("/v1/dead-letters/email/redrive",
                                headers=api.auth("operator"), json={"ids": ["999"]})
    channel = await api.client.post("/v1/dead-letters/fax/redrive",
                                    headers=api.auth("operator"), json={})

    assert (ids.status_code, ids.json()["field"]) == (422, "body.ids")
    assert (channel.status_code, channel.json()["field"]) == (404, "path.channel")


# ---------------------------------------------------------------- timelines


async def test_a_timeline_by_key_answers_the_three_questions(api: Api) -> None:
    await settle(api, KEY, State.ACCEPTED, at=T0 + 10)

    response = await api.client.get("/v1/timeline", params={"key": KEY},
                                    headers=api.auth("viewer"))

    [delivery] = response.json()["deliveries"]
    answers = delivery["answers"]
    assert (answers["selected"], answers["enqueued"], answers["accepted"]) == (True, True, True)
    assert answers["accepted_at"] == T0 + 10
    assert [e["type"] for e in delivery["events"]] == ["enqueued", "claimed", "accepted"]
    assert delivery["intent"]["recipient_surrogate"] == surrogate("cust_0001")
    assert not any("@example.com" in str(v) for _, v in walk(response.json()))


async def test_a_timeline_by_recipient_id_and_by_surrogate(api: Api) -> None:
    await settle(api, KEY, State.ACCEPTED, at=T0 + 10)

    by_id = await api.client.get("/v1/timeline", params={"recipient": "cust_0001"},
                                 headers=api.auth("viewer"))
    by_surrogate = await api.client.get("/v1/timeline",
                                        params={"recipient": surrogate("cust_0001")},
                                        headers=api.auth("viewer"))

    assert sorted(d["key"] for d in by_id.json()["deliveries"]) == [
        KEY, f"weekly-digest/{DAY}/cust_0001/sms/v3"]
    assert [d["key"] for d in by_surrogate.json()["deliveries"]] == [KEY]


async def test_a_timeline_of_nothing_is_not_found_and_needs_one_selector(api: Api) -> None:
    missing = await api.client.get("/v1/timeline", params={"key": "nope"},
                                   headers=api.auth("viewer"))
    neither = await api.client.get("/v1/timeline", headers=api.auth("viewer"))

    assert (missing.status_code, missing.json()["field"]) == (404, "query.key")
    assert (neither.status_code, neither.json()["field"]) == (422, "query.key")


# ---------------------------------------------------------------- metrics


async def test_metrics_expose_the_fleets_numbers_from_the_store(api: Api) -> None:
    await settle(api, KEY, State.ACCEPTED, at=T0 + 3)
    await api.client.post("/v1/queue/publish", content=dumps(publish_body("cust_0002")),
                          headers=publish_headers(api, "k"))
    await api.client.post("/v1/queue/publish", content=dumps(publish_body("cust_0003")),
                          headers=publish_headers(api, "k"))  # a 409

    text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text

    for line in (
        'tidings_trigger_success_total{campaign="weekly-digest"} 1.0',
        'tidings_admitted_total{campaign="weekly-digest",channel="email"} 5.0',
        'tidings_queue_depth{channel="email",state="ready"} 5.0',
        'tidings_attempts_total{channel="email"} 1.0',
        'tidings_duplicates_suppressed_total{channel="email"} 0.0',
        'tidings_rate_limited_total{channel="email"} 0.0',
        'tidings_dead_letters{channel="email"} 0.0',
        'tidings_delivery_latency_seconds_bucket{channel="email",le="1"} 0.0',
        'tidings_delivery_latency_seconds_bucket{channel="email",le="15"} 1.0',
        'tidings_delivery_latency_seconds_count{channel="email"} 1.0',
        'tidings_sli{channel="email"} 1.0',
        'tidings_publish_rejections_total{reason="idempotency_conflict"} 1.0',
        'tidings_publish_accepted_total 1.0',
    ):
        assert line in text, line
    assert "tidings_queue_oldest_age_seconds" in text and "tidings_drain_seconds" in text
    # The campaign's messages wait in the bulk lane, each lane named (tidings.core.lanes).
    assert 'tidings_queue_lane_ready{channel="email",lane="bulk"}' in text
    assert 'tidings_queue_lane_oldest_age_seconds{channel="email",lane="bulk"}' in text


async def test_status_and_metrics_name_the_groups_holding_the_most_messages(api: Api) -> None:
    # tenants' messages in the bulk lane of a channel that shares it (tidings.core.fair)
    await api.runtime.transport.publish("email", [
        OutgoingMessage(message_id=f"{tenant}-{n}", body="{}", lane=1, group=tenant)
        for tenant, count in (("acme", 3), ("globex", 1)) for n in range(count)],
        now=api.clock.now())

    status = (await api.client.get("/v1/status", headers=api.auth("viewer"))).json()
    text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text

    assert status["channels"]["email"]["queue"]["groups"] == [
        {"lane": "bulk", "group": "acme", "ready": 3, "total": 3},
        {"lane": "bulk", "group": "globex", "ready": 1, "total": 1}]
    assert 'tidings_queue_group_ready{channel="email",group="acme",lane="bulk"} 3.0' in text
    assert 'tidings_queue_group_messages{channel="email",group="globex",lane="bulk"} 1.0' \
        in text


async def test_metrics_say_which_provider_a_worker_said_is_out(api: Api) -> None:
    # as a worker of a channel with fallbacks records it (tidings.runtime.provider_said)
    await api.runtime.provider_said("email", "postmark", True, T0, "HTTP 503")
    await api.runtime.provider_said("email", "sendgrid", False, T0, "answered a probe")
    text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text
    assert 'tidings_provider_out{channel="email",provider="postmark"} 1.0' in text
    assert 'tidings_provider_out{channel="email",provider="sendgrid"} 0.0' in text


async def test_metrics_readings_are_cached_for_the_configured_interval(api: Api) -> None:
    async def admitted() -> str:
        text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text
        return next(line for line in text.splitlines()
                    if line.startswith('tidings_admitted_total{campaign="weekly-digest",'
                                       'channel="email"}'))

    before = await admitted()
    replayed = await api.client.post("/v1/replay/weekly-digest/2026-08-10",
                                     params={"expires_in_s": 3600}, headers=api.auth("operator"))
    assert replayed.status_code == 200
    cached = await admitted()
    api.clock.advance(5)
    fresh = await admitted()

    assert before == cached and before.endswith(" 5.0")
    assert fresh.endswith(" 10.0")


async def test_each_app_has_its_own_registry(tmp_path: Path, api: Api) -> None:
    (tmp_path / "other").mkdir()
    async with open_api(tmp_path / "other") as other:
        await other.client.post("/v1/queue/publish", content=b"{}",
                                headers=publish_headers(other, "k"))

        ours = (await api.client.get("/metrics", headers=api.auth("viewer"))).text
        theirs = (await other.client.get("/metrics", headers=other.auth("viewer"))).text

        assert 'tidings_publish_rejections_total{reason="invalid"} 1.0' in theirs
        assert 'reason="invalid"' not in ours
