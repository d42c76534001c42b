"""Webhook evidence settles uncertain sends: a signed provider report that names the
delivery key settles a held or uncertain intent (accepted, with the report as
evidence, or dead when it failed), and evidence that came while the send was still in
flight is read by the reconciler when the send turns uncertain."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given
from hypothesis import strategies as st

from support.lost_answers import LostAnswers
from tidings.admission.intake import NotifyRequest
from tidings.api.errors import install
from tidings.api.webhooks import webhook_router
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime
from tidings.webhooks import signature_header, twilio_signature
from tidings.webhooks.parse import (
    KEY_FIELD,
    Evidence,
    parse_generic,
    parse_postmark,
    parse_sendgrid,
    parse_twilio,
)
from tidings.webhooks.verify import svix_signature

T0 = 1_786_698_005.0
BASE = "http://tidings.test"
TWILIO_TOKEN = "twilio-auth-token-1"
HOOK_SECRET = "generic-hook-secret"
RESEND_KEY = b"resend-signing-key"
ENV = {"TWILIO_AUTH_TOKEN": TWILIO_TOKEN, "TIDINGS_WEBHOOK_SECRETS": HOOK_SECRET,
       "RESEND_WEBHOOK_SECRET": "whsec_" + base64.b64encode(RESEND_KEY).decode()}
KEY = "shipment-4821:customer-73:sms"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


# ---------------------------------------------------------------- parsing (pure)


def test_the_key_field_is_where_the_adapters_put_it() -> None:
    from tidings.providers.postmark import metadata_for
    from tidings.providers.sendgrid import KEY_ARG

    assert KEY_ARG == KEY_FIELD and set(metadata_for("k")) == {KEY_FIELD}


@pytest.mark.parametrize(("event", "accepted"), [
    ("processed", True), ("deferred", True), ("delivered", True), ("bounce", True),
    ("open", True), ("dropped", False)])
def test_a_sendgrid_event_with_our_custom_arg_is_evidence(event: str, accepted: bool) -> None:
    parsed = parse_sendgrid(dumps([{"event": event, "sg_message_id": "abc.filter0001.1",
                                    "timestamp": T0, KEY_FIELD: KEY}]), now=T0)
    [evidence] = parsed.evidence
    assert (evidence.key, evidence.accepted, evidence.message_id) == (KEY, accepted, "abc")


def test_a_postmark_record_names_its_key_in_metadata_or_by_digest() -> None:
    long_key = "k" * 100
    digest = hashlib.sha256(long_key.encode()).hexdigest()
    plain = parse_postmark(dumps({"RecordType": "Delivery", "MessageID": "pm-1",
                                  "Metadata": {KEY_FIELD: KEY}}), now=T0)
    hashed = parse_postmark(dumps({"RecordType": "Open", "MessageID": "pm-2",
                                   "Metadata": {"tidings_key_sha256": digest}}), now=T0)
    assert plain.evidence == (Evidence(provider="postmark", accepted=True, message_id="pm-1",
                                       key=KEY, detail="Delivery"),)
    [opened] = hashed.evidence
    assert (opened.key, opened.key_sha256, hashed.ignored) == (None, digest, 1)


@pytest.mark.parametrize(("status", "accepted"), [
    ("queued", True), ("sent", True), ("delivered", True), ("undelivered", True),
    ("failed", False)])
def test_a_twilio_callback_names_its_key_in_the_url(status: str, accepted: bool) -> None:
    body = urlencode({"MessageSid": "SM1", "MessageStatus": status}).encode()
    url = f"{BASE}/v1/webhooks/twilio?{KEY_FIELD}={quote(KEY, safe='')}"
    [evidence] = parse_twilio(body, now=T0, url=url).evidence
    assert (evidence.key, evidence.accepted, evidence.message_id) == (KEY, accepted, "SM1")
    assert parse_twilio(body, now=T0, url=f"{BASE}/v1/webhooks/twilio").evidence == ()


def test_a_generic_report_names_its_key_in_a_field() -> None:
    parsed = parse_generic(dumps([{"message_id": "g1", "event": "failed", "key": KEY},
                                  {"message_id": "g2", "event": "delivered"}]), now=T0)
    assert [(e.key, e.accepted) for e in parsed.evidence] == [(KEY, False)]


@given(key=st.one_of(st.text(max_size=600), st.integers(), st.none(), st.lists(st.text())))
def test_whatever_the_key_field_holds_the_report_is_parsed(key: Any) -> None:
    parsed = parse_sendgrid(dumps([{"event": "processed", "sg_message_id": "m1",
                                    KEY_FIELD: key}]), now=T0)
    assert parsed.ignored == 1
    for evidence in parsed.evidence:
        assert evidence.key is not None and len(evidence.key) <= 512
        assert not any(c.isspace() for c in evidence.key)


# ---------------------------------------------------------------- over HTTP


@dataclass
class Hooks:
    runtime: Runtime
    client: httpx.AsyncClient
    clock: FakeClock
    provider: LostAnswers

    async def lost(self, *keys: str) -> None:
        """Given SMS sends of ``keys`` whose answers were lost."""
        await self.runtime.notify_many([NotifyRequest(
            key=k, recipient={"id": "c73", "phone": "+15550001111"}, channels=["sms"],
            template="shipped") for k in keys])
        worker = self.runtime.worker("sms", "w1")
        while await worker.run_once():
            pass

    async def reconcile(self) -> Any:
        self.clock.advance(2)
        return await self.runtime.reconciler().run_pass(now=self.clock.now())

    async def intent(self, key: str) -> Any:
        found = await self.runtime.store.intent_get(key)
        assert found is not None
        return found

    async def timeline(self, key: str) -> list[str]:
        return [e.type for e in await self.runtime.store.events_for(key)]

    async def twilio(self, key: str, sid: str, status: str) -> httpx.Response:
        params = {"AccountSid": "AC1", "MessageSid": sid, "MessageStatus": status}
        url = f"{BASE}/v1/webhooks/twilio?{KEY_FIELD}={quote(key, safe='')}"
        return await self.client.post(url, content=urlencode(params).encode(), headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": twilio_signature(TWILIO_TOKEN, url, params.items())})

    async def resend(self, body: Any) -> httpx.Response:
        raw, at = dumps(body), int(self.clock.now())
        return await self.client.post("/v1/webhooks/resend", content=raw, headers={
            "Content-Type": "application/json", "svix-id": "msg_9", "svix-timestamp": str(at),
            "svix-signature": "v1," + svix_signature(RESEND_KEY, "msg_9", at, raw)})

    async def generic(self, body: Any) -> httpx.Response:
        raw = dumps(body)
        return await self.client.post("/v1/webhooks/generic", content=raw, headers={
            "Content-Type": "application/json",
            "X-Tidings-Signature": signature_header(HOOK_SECRET, int(self.clock.now()), raw)})


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[Hooks]:
    clock = FakeClock(T0)
    provider = LostAnswers()
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'hooks.db'}",
                               "channels": {"sms": {}}})
    runtime = await build_runtime(settings, clock=clock, campaigns=[],
                                  providers={"sms": provider})
    app = FastAPI()
    install(app, lambda path, status, reason: None)
    app.include_router(webhook_router(runtime, env=ENV))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE) as client:
        try:
            yield Hooks(runtime=runtime, client=client, clock=clock, provider=provider)
        finally:
            await runtime.close()


async def test_a_delivery_report_naming_the_key_settles_a_held_send(hooks: Hooks) -> None:
    # given an SMS whose answer was lost, held (the provider cannot be asked)
    await hooks.lost("shipment-4821:customer-73")
    await hooks.reconcile()
    assert (await hooks.intent(KEY)).state is State.HELD

    # when Twilio's signed status callback for it arrives
    answer = await hooks.twilio(KEY, "SM42", "delivered")

    # then it is accepted with Twilio's sid as receipt, the report on its timeline
    # moving it on to delivered
    assert answer.status_code == 200, answer.text
    assert answer.json()["settled"] == 1 and answer.json()["orphaned"] == 0
    intent = await hooks.intent(KEY)
    assert (intent.state, intent.receipt) == (State.DELIVERED, "SM42")
    assert (await hooks.timeline(KEY))[-2:] == ["evidence_accepted", "provider_delivered"]
    assert hooks.provider.sent == [KEY]  # never resent

    # and a repeat of the report changes nothing
    again = await hooks.twilio(KEY, "SM42", "delivered")
    assert again.json()["settled"] == 0 and again.json()["duplicates"] == 1


async def test_a_resend_event_settles_a_held_send_by_the_digest_of_its_key(
        hooks: Hooks) -> None:
    # given a send whose answer was lost, held (Resend cannot be searched by our key)
    await hooks.lost("shipment-4821:customer-73")
    await hooks.reconcile()
    assert (await hooks.intent(KEY)).state is State.HELD

    # when Resend's signed email.sent event arrives, its tag the digest of our key
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    answer = await hooks.resend({"type": "email.sent", "created_at": "2026-08-14T09:00:00Z",
                                 "data": {"email_id": "re-42", "to": ["c73@example.com"],
                                          "tags": {"tidings_key_sha256": digest}}})

    # then it is accepted with Resend's id as its receipt, and never sent again
    assert answer.status_code == 200, answer.text
    assert answer.json()["settled"] == 1
    intent = await hooks.intent(KEY)
    assert (intent.state, intent.receipt) == (State.ACCEPTED, "re-42")
    assert hooks.provider.sent == [KEY]


async def test_a_failed_report_makes_the_send_dead_with_the_reason(hooks: Hooks) -> None:
    await hooks.lost("shipment-4821:customer-73")
    await hooks.reconcile()

    answer = await hooks.generic({"message_id": "g-1", "event": "failed", "key": KEY,
                                  "detail": "unreachable handset"})

    assert answer.json()["settled"] == 1
    intent = await hooks.intent(KEY)
    assert intent.state is State.DEAD
    assert "unreachable handset" in (intent.reason or "")


async def test_an_intermediate_status_is_evidence_too(hooks: Hooks) -> None:
    await hooks.lost("shipment-4821:customer-73")  # uncertain, not yet swept

    answer = await hooks.twilio(KEY, "SM7", "sent")

    assert answer.json()["settled"] == 1 and answer.json()["ignored"] == 1
    assert (await hooks.intent(KEY)).state is State.ACCEPTED


async def test_evidence_that_beat_the_timeout_is_read_when_the_send_turns_uncertain(
        hooks: Hooks) -> None:
    # given a send in flight (claimed) when the provider's report arrives
    await hooks.runtime.notify_many([NotifyRequest(
        key="shipment-9", recipient={"id": "c9", "phone": "+15550001112"}, channels=["sms"],
        template="shipped")])
    key = "shipment-9:sms"
    [claim] = await hooks.runtime.store.intent_claim_many([key], owner="w1", lease_s=30,
                                                          now=hooks.clock.now())
    assert claim.token is not None
    # (a send in flight was marked started right before its request left)
    assert await hooks.runtime.store.intent_mark_started(
        [(key, claim.token)], owner="w1", now=hooks.clock.now()) == {key}
    early = await hooks.twilio(key, "SM9", "queued")
    assert early.json()["settled"] == 0
    assert (await hooks.intent(key)).state is State.CLAIMED

    # when the worker dies, its lease expires and the reconciler sweeps twice
    hooks.clock.advance(31)
    await hooks.reconcile()
    result = await hooks.reconcile()

    # then the early evidence settled it: accepted, never held, never resent
    intent = await hooks.intent(key)
    assert (intent.state, intent.receipt) == (State.ACCEPTED, "SM9")
    assert result.uncertain_accepted == 1 and hooks.provider.sent == []
    assert "provider_evidence" in await hooks.timeline(key)


async def test_evidence_for_a_settled_send_changes_nothing(hooks: Hooks) -> None:
    await hooks.lost("shipment-4821:customer-73")
    await hooks.reconcile()
    await hooks.generic({"message_id": "g-1", "event": "delivered", "key": KEY})

    late = await hooks.generic({"message_id": "g-1", "event": "failed", "key": KEY})

    assert late.json()["settled"] == 0
    assert (await hooks.intent(KEY)).state is State.DELIVERED  # as the report left it
