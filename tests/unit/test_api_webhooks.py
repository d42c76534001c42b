"""``POST /v1/webhooks/{provider}`` over HTTP: a delivery sent through the sandbox twin
and accepted, then signed provider reports posted to the route. The timeline shows
``accepted`` then ``provider_delivered``; a bad signature is a 401 that records
nothing; a replay is a duplicate; an unknown message id is an orphan answered 200."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tidings.api.errors import install
from tidings.api.webhooks import webhook_router
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.runtime import Runtime, build_runtime
from tidings.webhooks import signature_header, twilio_signature
from tidings.webhooks.metrics import WebhookMetrics, provider_event_families
from tidings.webhooks.verify import svix_signature

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

T0 = 1_786_698_005.0
BASE = "http://tidings.test"
TWILIO_TOKEN = "twilio-auth-token-1"
HOOK_SECRET = "generic-hook-secret"
PM_USER, PM_PASSWORD = "postmark-hooks", "pm-password-1"
_SENDGRID_PRIVATE = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(_SENDGRID_PRIVATE.public_key().public_bytes(
    serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
RESEND_KEY = b"resend-signing-key-1"
RESEND_SECRET = "whsec_" + base64.b64encode(RESEND_KEY).decode()
ENV = {"TWILIO_AUTH_TOKEN": TWILIO_TOKEN, "TIDINGS_WEBHOOK_SECRETS": HOOK_SECRET,
       "SENDGRID_WEBHOOK_PUBLIC_KEY": SENDGRID_PUBLIC,
       "POSTMARK_WEBHOOK_USERNAME": PM_USER, "POSTMARK_WEBHOOK_PASSWORD": PM_PASSWORD,
       "RESEND_WEBHOOK_SECRET": RESEND_SECRET}
SECRETS = (TWILIO_TOKEN, HOOK_SECRET, PM_PASSWORD)


@dataclass
class Hooks:
    runtime: Runtime
    client: httpx.AsyncClient
    clock: FakeClock
    registry: CollectorRegistry

    async def send(self, key: str, channel: str) -> str:
        """Given a delivery sent through the sandbox twin and accepted: its receipt."""
        [full_key] = await self.runtime.notify(
            key=key, recipient={"id": "customer-73", "email": "c73@example.com",
                                "phone": "+15550001111"},
            channels=[channel], template="shipped")
        worker = self.runtime.worker(channel, "w1")
        while await worker.run_once():
            pass
        intent = await self.runtime.store.intent_get(full_key)
        assert intent is not None and intent.receipt is not None, intent
        return intent.receipt

    async def timeline(self, key: str) -> list[str]:
        return [e.type for e in await self.runtime.store.events_for(key)]

    async def stored(self) -> int:
        return sum(c.total for c in await self.runtime.store.provider_event_counts())

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[Hooks]:
    clock = FakeClock(T0)
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 'hooks.db'}",
        "channels": {"email": TWIN, "sms": TWIN},
        "webhooks": {"max_body_bytes": 4096},
    })
    runtime = await build_runtime(settings, clock=clock, campaigns=[])
    registry = CollectorRegistry()
    app = FastAPI()
    install(app, lambda path, status, reason: None)
    app.include_router(webhook_router(runtime, env=ENV, metrics=WebhookMetrics(registry)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE) as client:
        try:
            yield Hooks(runtime=runtime, client=client, clock=clock, registry=registry)
        finally:
            await runtime.close()


def twilio_post(sid: str, status: str, *, token: str = TWILIO_TOKEN,
                query: str = "") -> dict[str, Any]:
    """A Twilio status callback for ``sid``, signed as Twilio signs it."""
    params = {"AccountSid": "AC1", "MessageSid": sid, "MessageStatus": status,
              "To": "+15550001111", "ApiVersion": "2010-04-01"}
    url = f"{BASE}/v1/webhooks/twilio{query}"
    return {"url": url, "content": urlencode(params).encode(),
            "headers": {"Content-Type": "application/x-www-form-urlencoded",
                        "X-Twilio-Signature": twilio_signature(token, url, params.items())}}


def generic_post(body: Any, *, at: float = T0, secret: str = HOOK_SECRET) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    return {"url": "/v1/webhooks/generic", "content": raw,
            "headers": {"Content-Type": "application/json",
                        "X-Tidings-Signature": signature_header(secret, int(at), raw)}}


# ---------------------------------------------------------------- the scenario


async def test_a_signed_delivery_report_lands_beside_accepted_once_and_moves_it_on(
        hooks: Hooks) -> None:
    receipt = await hooks.send("shipment-4821:customer-73", "sms")
    key = "shipment-4821:customer-73:sms"

    answer = await hooks.client.post(**twilio_post(receipt, "delivered"))
    replay = await hooks.client.post(**twilio_post(receipt, "delivered"))

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"provider": "twilio", "recorded": 1, "duplicates": 0,
                             "orphaned": 0, "ignored": 0, "settled": 0, "moved": 1,
                             "suppressed": 0}
    assert replay.status_code == 200
    assert replay.json()["duplicates"] == 1 and replay.json()["recorded"] == 0
    timeline = await hooks.timeline(key)
    assert timeline[-2:] == ["accepted", "provider_delivered"]
    assert timeline.count("provider_delivered") == 1
    intent = await hooks.runtime.store.intent_get(key)
    assert intent is not None and intent.state.value == "delivered"
    assert replay.json()["moved"] == 0
    assert hooks.metric("tidings_webhook_requests_total", provider="twilio",
                        outcome="ok") == 2
    assert hooks.metric("tidings_webhook_events_total", provider="twilio",
                        result="duplicate") == 1


async def test_a_bad_or_missing_signature_is_401_and_records_nothing(
    hooks: Hooks, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    receipt = await hooks.send("shipment-1:c", "sms")
    forged = twilio_post(receipt, "delivered", token="a-guess")
    unsigned = twilio_post(receipt, "delivered")
    del unsigned["headers"]["X-Twilio-Signature"]
    elsewhere = twilio_post(receipt, "delivered", query="?copied=1")
    elsewhere["url"] = f"{BASE}/v1/webhooks/twilio"  # signed for another URL

    answers = [await hooks.client.post(**post) for post in (forged, unsigned, elsewhere)]

    assert [a.status_code for a in answers] == [401, 401, 401]
    assert [a.json()["field"] for a in answers] == ["header.X-Twilio-Signature"] * 3
    assert answers[1].json()["message"] == "is missing"
    assert all(secret not in a.text for a in answers for secret in SECRETS)
    assert "webhook refused: provider=twilio header.X-Twilio-Signature" in caplog.text
    assert not any(secret in caplog.text for secret in SECRETS)
    assert await hooks.stored() == 0
    assert "provider_delivered" not in await hooks.timeline("shipment-1:c:sms")
    assert hooks.metric("tidings_webhook_requests_total", provider="twilio",
                        outcome="unauthorized") == 3


async def test_verification_comes_before_parsing(hooks: Hooks) -> None:
    forged = generic_post([{"event": "delivered"}], secret="a-guess")  # malformed, too

    answer = await hooks.client.post(**forged)

    assert answer.status_code == 401
    assert answer.json()["field"] == "header.X-Tidings-Signature"


async def test_a_report_for_an_unknown_message_id_is_an_orphan_not_an_error(
    hooks: Hooks,
) -> None:
    answer = await hooks.client.post(**twilio_post("SM-not-ours", "undelivered"))

    assert answer.status_code == 200
    assert answer.json()["orphaned"] == 1
    [orphan] = await hooks.runtime.store.provider_events_orphaned()
    assert (orphan.message_id, orphan.type.value, orphan.key) == ("SM-not-ours", "bounced",
                                                                   None)


async def test_an_intermediate_status_is_ignored_and_counted(hooks: Hooks) -> None:
    receipt = await hooks.send("shipment-2:c", "sms")

    answer = await hooks.client.post(**twilio_post(receipt, "sent"))

    assert answer.json() == {"provider": "twilio", "recorded": 0, "duplicates": 0,
                             "orphaned": 0, "ignored": 1, "settled": 0, "moved": 0,
                             "suppressed": 0}
    assert hooks.metric("tidings_webhook_events_total", provider="twilio",
                        result="ignored") == 1


# ---------------------------------------------------------------- each provider


async def test_a_signed_generic_batch_and_a_stale_signature(hooks: Hooks) -> None:
    receipt = await hooks.send("order-9:c", "email")
    batch = [{"message_id": receipt, "event": "delivered"},
             {"message_id": receipt, "event": "complained", "at": T0 + 60}]

    answer = await hooks.client.post(**generic_post(batch))
    hooks.clock.advance(301)
    stale = await hooks.client.post(**generic_post(batch, at=T0))

    assert answer.json()["recorded"] == 2
    assert answer.json()["suppressed"] == 1  # the complaint
    assert (await hooks.timeline("order-9:c:email"))[-4:] == [
        "accepted", "provider_delivered", "provider_complained", "address_suppressed"]
    assert stale.status_code == 401
    assert stale.json()["message"].startswith("is 301 s from the server's clock")


async def test_a_signed_sendgrid_batch_matches_the_receipt_by_prefix(hooks: Hooks) -> None:
    receipt = await hooks.send("order-10:c", "email")
    body = json.dumps([{"email": "c73@example.com", "event": "bounce", "type": "bounce",
                        "reason": "550 unknown user c73@example.com",
                        "timestamp": int(T0), "sg_message_id": f"{receipt}.filter0001.1.0"},
                       {"event": "open", "sg_message_id": f"{receipt}.filter0001.1.0"}]).encode()
    timestamp = str(int(T0))
    signature = base64.b64encode(_SENDGRID_PRIVATE.sign(
        timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))).decode()

    answer = await hooks.client.post("/v1/webhooks/sendgrid", content=body, headers={
        "Content-Type": "application/json",
        "X-Twilio-Email-Event-Webhook-Signature": signature,
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp})

    assert answer.json() == {"provider": "sendgrid", "recorded": 1, "duplicates": 0,
                             "orphaned": 0, "ignored": 1, "settled": 0, "moved": 1,
                             "suppressed": 1}
    report, suppressed = (await hooks.runtime.store.events_for("order-10:c:email"))[-2:]
    assert report.type == "provider_bounced"
    assert report.detail == "sendgrid: bounce (bounce): 550 unknown user [address]"
    assert (suppressed.type, suppressed.state) == ("address_suppressed", "bounced")
    assert suppressed.detail == "hard_bounce: bounce (bounce): 550 unknown user [address]"


async def test_postmark_is_verified_by_basic_auth(hooks: Hooks) -> None:
    receipt = await hooks.send("order-11:c", "email")
    body = {"RecordType": "Delivery", "MessageID": receipt, "Recipient": "c73@example.com",
            "DeliveredAt": "2026-08-14T09:00:10Z", "Details": "smtp;250 2.0.0 OK"}

    wrong = await hooks.client.post("/v1/webhooks/postmark", json=body,
                                    auth=(PM_USER, "nope"))
    right = await hooks.client.post("/v1/webhooks/postmark", json=body,
                                    auth=(PM_USER, PM_PASSWORD))

    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"] == 'Basic realm="tidings webhooks"'
    assert right.json()["recorded"] == 1
    assert (await hooks.timeline("order-11:c:email"))[-1] == "provider_delivered"


def resend_post(body: Any, *, at: float = T0, key: bytes = RESEND_KEY) -> dict[str, Any]:
    """A Resend event, signed as Resend (Svix) signs it."""
    raw = json.dumps(body).encode()
    return {"url": "/v1/webhooks/resend", "content": raw,
            "headers": {"Content-Type": "application/json", "svix-id": "msg_1",
                        "svix-timestamp": str(int(at)),
                        "svix-signature": "v1," + svix_signature(key, "msg_1", int(at), raw)}}


async def test_resend_is_verified_the_svix_way_and_its_events_recorded(hooks: Hooks) -> None:
    receipt = await hooks.send("order-12:c", "email")
    key = "order-12:c:email"
    body = {"type": "email.delivered", "created_at": "2026-08-14T09:00:10.000Z",
            "data": {"email_id": receipt, "to": ["c73@example.com"], "subject": "Shipped",
                     "tags": {"tidings_key_sha256": hashlib.sha256(key.encode()).hexdigest()}}}

    forged = await hooks.client.post(**resend_post(body, key=b"someone-else"))
    stale = await hooks.client.post(**resend_post(body, at=T0 - 3600))
    right = await hooks.client.post(**resend_post(body))

    assert forged.status_code == 401 and "svix-signature" in forged.text
    assert stale.status_code == 401 and "svix-timestamp" in stale.text
    assert right.status_code == 200, right.text
    assert right.json()["recorded"] == 1
    assert (await hooks.timeline(key))[-1] == "provider_delivered"


# ---------------------------------------------------------------- refusals


async def test_a_malformed_payload_is_422_naming_the_field(hooks: Hooks) -> None:
    answer = await hooks.client.post(**generic_post([{"event": "delivered"}]))

    assert answer.status_code == 422
    assert answer.json()["field"] == "body[0].message_id"
    assert await hooks.stored() == 0


async def test_an_oversized_body_is_413_before_it_is_verified(hooks: Hooks) -> None:
    answer = await hooks.client.post(**generic_post([{"message_id": "m" * 200,
                                                      "event": "delivered"}] * 30))

    assert answer.status_code == 413
    assert answer.json()["field"] == "body"
    assert hooks.metric("tidings_webhook_requests_total", provider="generic",
                        outcome="too_large") == 1


async def test_an_unknown_provider_is_404(hooks: Hooks) -> None:
    answer = await hooks.client.post("/v1/webhooks/mailgun", content=b"{}")

    assert answer.status_code == 404
    assert answer.json()["field"] == "path.provider"
    assert hooks.metric("tidings_webhook_requests_total", provider="unknown",
                        outcome="not_found") == 1


async def test_a_provider_without_secrets_refuses_naming_the_variable(
    tmp_path: Path,
) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'bare.db'}",
                               "channels": {"sms": TWIN}})
    runtime = await build_runtime(settings, clock=FakeClock(T0), campaigns=[])
    app = FastAPI()
    install(app, lambda path, status, reason: None)
    app.include_router(webhook_router(runtime, env={}))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=BASE) as client:
            answer = await client.post(**twilio_post("SM1", "delivered"))
    finally:
        await runtime.close()

    assert answer.status_code == 401
    assert answer.json()["message"] == ("twilio webhooks are not configured "
                                        "(set TWILIO_AUTH_TOKEN)")


async def test_the_stores_counts_render_as_prometheus_families(hooks: Hooks) -> None:
    receipt = await hooks.send("order-12:c", "email")
    await hooks.client.post(**generic_post([{"message_id": receipt, "event": "delivered"},
                                            {"message_id": "gone", "event": "bounced"}]))
    registry = CollectorRegistry()
    counts = await hooks.runtime.store.provider_event_counts()

    class Reading(Collector):
        def collect(self) -> Iterator[Metric]:
            return provider_event_families(counts)

    registry.register(Reading())
    text = generate_latest(registry).decode()

    assert 'tidings_provider_events_total{provider="generic",type="delivered"} 1.0' in text
    assert ('tidings_provider_events_orphaned{provider="generic",type="bounced"} 1.0'
            in text)
