"""The real adapters against the sandbox speaking their provider's dialect, over real
sockets, with deduplication off (a second send of a key would be counted twice) and
lost responses on: every lost answer is settled by lookup or webhook, and the
sandbox's own counts show no key accepted twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, LookupHint, LookupStatus, Uncertain
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.sandbox import SandboxConfig, serve
from tidings.sandbox.dialects import DialectSettings
from tidings.webhooks.verify import TwilioVerifier, WebhookRequest

TOKEN = "twilio-auth-token-1"
SID = "AC0123456789abcdef0123456789abcdef"
CONTENT = Content(subject="Shipped", text="Your order shipped.")
QUOTAS = {"email": 100_000, "sms": 100_000}


def provider_settings(dialect: str, url: str, hooks: str | None = None) -> dict[str, Any]:
    if dialect == "postmark":
        return {"kind": "postmark", "from_address": "news@tidings.test", "base_url": url,
                "timeout_s": 2.0}
    if dialect == "sendgrid":
        return {"kind": "sendgrid", "from_address": "news@tidings.test", "base_url": url,
                "timeout_s": 2.0}
    return {"kind": "twilio", "account_sid": SID, "from_number": "+15550001111",
            "base_url": url, "timeout_s": 2.0,
            **({"status_callback": hooks} if hooks else {})}


ENV = {"POSTMARK_SERVER_TOKEN": "pm-1", "SENDGRID_API_KEY": "SG.2", "TWILIO_AUTH_TOKEN": TOKEN}


@dataclass
class Hooks:
    """A local receiver for the sandbox's outbound webhooks."""

    url: str
    received: list[tuple[str, dict[str, str], bytes]]
    runner: web.AppRunner


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    received: list[tuple[str, dict[str, str], bytes]] = []

    async def take(request: web.Request) -> web.Response:
        # The URL as called, still percent-encoded (what Twilio signs).
        url = f"http://{request.host}{request.raw_path}"
        received.append((url, dict(request.headers), await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/{tail:.*}", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Hooks(url=f"http://127.0.0.1:{port}", received=received, runner=runner)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("dialect", ["postmark", "sendgrid", "twilio"])
async def test_the_adapter_sends_and_looks_up_in_its_providers_dialect(
        dialect: str, tmp_path: Path) -> None:
    from tidings.config.providers import (
        PostmarkProviderSettings,
        SendGridProviderSettings,
        TwilioProviderSettings,
    )
    from tidings.core.clock import SystemClock
    from tidings.providers.build import build_provider_from

    server = await serve(SandboxConfig(dedupe=False, lost_response=1.0, quotas=QUOTAS),
                         dialects=DialectSettings(dialects=(dialect,)))
    kind = {"postmark": PostmarkProviderSettings, "sendgrid": SendGridProviderSettings,
            "twilio": TwilioProviderSettings}[dialect]
    settings = kind.model_validate(provider_settings(dialect, server.url))
    channel = "sms" if dialect == "twilio" else "email"
    to = "+15557654321" if dialect == "twilio" else "ada@example.com"
    clock = SystemClock()
    provider = build_provider_from(settings, channel=channel, clock=clock, env=ENV)
    try:
        request = SendRequest(key="order-1", channel=channel, to=to, template="t/v1",
                              data={}, recipient_id="r1", content=CONTENT)
        lost = await provider.send(request)
        hint = LookupHint(to=to, sent_after=clock.now() - 60, sent_before=clock.now() + 60)
        found = await (provider.lookup("order-1", hint)  # type: ignore[call-arg]
                       if dialect == "twilio" else provider.lookup("order-1"))
        # (Twilio finds a send by recipient and time: another recipient's window)
        other = LookupHint(to="+15550009999", sent_after=hint.sent_after,
                           sent_before=hint.sent_before)
        missing = await (provider.lookup("order-2", other)  # type: ignore[call-arg]
                         if dialect == "twilio" else provider.lookup("order-2"))
        server.core.configure(SandboxConfig(dedupe=False, quotas=QUOTAS))
        sent = await provider.send(SendRequest(key="order-3", channel=channel, to=to,
                                               template="t/v1", data={},
                                               recipient_id="r1", content=CONTENT))
    finally:
        await provider.close()
        await server.close()

    assert isinstance(lost, Uncertain)
    assert found.status is LookupStatus.ACCEPTED
    assert found.receipt == server.core.lookup("order-1", channel)[1]  # type: ignore[index]
    assert missing.status is LookupStatus.NOT_FOUND
    assert isinstance(sent, Accepted) and sent.receipt == server.core.lookup("order-3")[1]  # type: ignore[index]


async def test_the_twilio_dialect_signs_its_status_callbacks(hooks: Hooks) -> None:
    from tidings.config.providers import TwilioProviderSettings
    from tidings.core.clock import SystemClock
    from tidings.providers.build import build_provider_from

    server = await serve(SandboxConfig(dedupe=False, quotas=QUOTAS), dialects=DialectSettings(
        dialects=("twilio",), twilio_auth_token=TOKEN, webhook_delay_s=0.0))
    settings = TwilioProviderSettings.model_validate(
        provider_settings("twilio", server.url, f"{hooks.url}/v1/webhooks/twilio"))
    provider = build_provider_from(settings, channel="sms", clock=SystemClock(), env=ENV)
    try:
        outcome = await provider.send(SendRequest(
            key="order/1", channel="sms", to="+15557654321", template="t/v1", data={},
            recipient_id="r1", content=CONTENT))
        for _ in range(100):
            if hooks.received:
                break
            await asyncio.sleep(0.05)
    finally:
        await provider.close()
        await server.close()

    assert isinstance(outcome, Accepted)
    [(url, headers, body)] = hooks.received
    assert "tidings_key=order%2F1" in url
    TwilioVerifier([TOKEN]).verify(WebhookRequest(url=url, headers=headers, body=body))
    assert f"MessageSid={outcome.receipt}".encode() in body


async def test_the_postmark_dialect_posts_delivery_records_with_metadata(hooks: Hooks) -> None:
    from tidings.config.providers import PostmarkProviderSettings
    from tidings.core.clock import SystemClock
    from tidings.providers.build import build_provider_from

    target = hooks.url.replace("http://", "http://hooks:pw@") + "/v1/webhooks/postmark"
    server = await serve(SandboxConfig(dedupe=False, lost_response=1.0, quotas=QUOTAS),
                         dialects=DialectSettings(dialects=("postmark",),
                                                  postmark_webhook=target,
                                                  webhook_delay_s=0.0))
    settings = PostmarkProviderSettings.model_validate(provider_settings("postmark",
                                                                         server.url))
    provider = build_provider_from(settings, channel="email", clock=SystemClock(), env=ENV)
    try:
        outcome = await provider.send(SendRequest(
            key="order-1", channel="email", to="ada@example.com", template="t/v1",
            data={}, recipient_id="r1", content=CONTENT))
        for _ in range(100):
            if hooks.received:
                break
            await asyncio.sleep(0.05)
    finally:
        await provider.close()
        await server.close()

    assert isinstance(outcome, Uncertain)  # the answer was lost; the webhook still comes
    [(url, headers, body)] = hooks.received
    assert headers["Authorization"].startswith("Basic ") and "hooks:pw" not in url
    assert b'"tidings_key": "order-1"' in body and b'"RecordType": "Delivery"' in body


@pytest.mark.parametrize("dialect", ["postmark", "sendgrid", "twilio"])
async def test_lost_answers_settle_with_no_key_accepted_twice(
        dialect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 120
    server = await serve(SandboxConfig(dedupe=False, lost_response=0.3, timeout=0.05,
                                       hang_s=3.0, quotas=QUOTAS),
                         dialects=DialectSettings(dialects=(dialect,)))
    channel = "sms" if dialect == "twilio" else "email"
    folder = tmp_path / "templates" / "shipped" / "v1"
    folder.mkdir(parents=True)
    for name, text in (("sms.txt", "Shipped."), ("subject.txt", "Shipped"),
                       ("body.txt", "Your order shipped.")):
        (folder / name).write_text(text)
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "reconciler": {"uncertain_after_s": 0.0},
        "channels": {channel: {"kind": channel, "templates": str(tmp_path / "templates"),
                               "lookup_settle_s": 0.0,
                               "provider": provider_settings(dialect, server.url)}},
    })
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    runtime = await build_runtime(settings)
    try:
        # one recipient each: Twilio's lookup by recipient and time is then unambiguous
        await runtime.notify_many([NotifyRequest(
            key=f"order-{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com",
                                         "phone": f"+1555{i:07d}"},
            channels=[channel], template="shipped/v1") for i in range(n)])
        worker = runtime.worker(channel)
        reconciler = runtime.reconciler()
        for _ in range(30):
            while await worker.run_once():
                pass
            await reconciler.run_pass(now=runtime.clock.now())
            counts = (await runtime.store.intent_counts())[channel]
            if counts == {State.ACCEPTED.value: n}:
                break
            await asyncio.sleep(0.1)
        stats = server.core.stats()["channels"][channel]
    finally:
        await runtime.close()
        await server.close()

    assert counts == {State.ACCEPTED.value: n}
    assert stats["lost_responses"] > 0  # the fault happened
    assert stats["accepted_keys"] == n
    assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]


async def test_the_sendgrid_dialect_signs_its_event_webhook(hooks: Hooks) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    from tidings.config.providers import SendGridProviderSettings
    from tidings.core.clock import SystemClock
    from tidings.providers.build import build_provider_from
    from tidings.webhooks.parse import parse_sendgrid
    from tidings.webhooks.verify import SendGridVerifier

    key = ec.generate_private_key(ec.SECP256R1())
    server = await serve(SandboxConfig(dedupe=False, lost_response=1.0, quotas=QUOTAS),
                         dialects=DialectSettings(dialects=("sendgrid",),
                                                  sendgrid_webhook=f"{hooks.url}/sg",
                                                  sendgrid_signing_key=key,
                                                  webhook_delay_s=0.0))
    settings = SendGridProviderSettings.model_validate(provider_settings("sendgrid",
                                                                         server.url))
    provider = build_provider_from(settings, channel="email", clock=SystemClock(), env=ENV)
    try:
        outcome = await provider.send(SendRequest(
            key="order-1", channel="email", to="ada@example.com", template="t/v1",
            data={}, recipient_id="r1", content=CONTENT))
        for _ in range(100):
            if hooks.received:
                break
            await asyncio.sleep(0.05)
    finally:
        await provider.close()
        await server.close()

    assert isinstance(outcome, Uncertain)
    [(url, headers, body)] = hooks.received
    SendGridVerifier([key.public_key()], clock=SystemClock()).verify(
        WebhookRequest(url=url, headers=headers, body=body))
    [evidence] = parse_sendgrid(body, now=0.0).evidence
    assert (evidence.key, evidence.accepted) == ("order-1", True)


def test_the_sendgrid_signing_key_must_be_a_p256_private_key() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from tidings.sandbox.dialects import signing_key_from

    def pem(key: ec.EllipticCurvePrivateKey) -> str:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()

    good = ec.generate_private_key(ec.SECP256R1())
    assert signing_key_from(pem(good)).public_key() == good.public_key()
    for bad in ("", "not a key", pem(ec.generate_private_key(ec.SECP384R1()))):
        with pytest.raises(ValueError):
            signing_key_from(bad)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_batched_sends_settle_every_lost_answer_with_no_key_accepted_twice(
        store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """Postmark's batch endpoint, with answers lost and requests hanging: each intent
    keeps its own outcome and receipt, a lost answer makes each of its messages
    uncertain and each is settled by lookup on its own key."""
    from tidings.sandbox.dialects import STATE_KEY

    n = 300
    server = await serve(SandboxConfig(dedupe=False, lost_response=0.01, timeout=0.005,
                                       hang_s=3.0, quotas=QUOTAS),
                         dialects=DialectSettings(dialects=("postmark",)))
    folder = tmp_path / "templates" / "shipped" / "v1"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Shipped")
    (folder / "body.txt").write_text("Your order shipped.")
    url = (f"sqlite:///{tmp_path / 't.db'}" if store == "sqlite"
           else str(request.getfixturevalue("pg_url")))
    settings = Settings.parse({
        "store": url,
        "reconciler": {"uncertain_after_s": 0.0},
        "channels": {"email": {"kind": "email", "templates": str(tmp_path / "templates"),
                               "lookup_settle_s": 0.0, "max_in_flight": 400,
                               "batch": {"max_messages": 100, "linger_s": 0.01},
                               "provider": provider_settings("postmark", server.url)}},
    })
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    runtime = await build_runtime(settings)
    try:
        await runtime.notify_many([NotifyRequest(
            key=f"order-{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com"},
            channels=["email"], template="shipped/v1") for i in range(n)])
        worker = runtime.worker("email")
        assert worker.batcher is not None and worker.batcher.max_messages == 100
        reconciler = runtime.reconciler()
        for _ in range(60):
            while await worker.run_once():
                pass
            await reconciler.run_pass(now=runtime.clock.now())
            counts = (await runtime.store.intent_counts())["email"]
            if counts == {State.ACCEPTED.value: n}:
                break
            await asyncio.sleep(0.1)
        receipts = {i.key: i.receipt for i in await runtime.store.intent_find(
            states=[State.ACCEPTED], limit=n + 1)}
        stats = server.core.stats()["channels"]["email"]
        batches = server.runner.app[STATE_KEY].batches
    finally:
        await runtime.close()
        await server.close()

    assert counts == {State.ACCEPTED.value: n}
    assert stats["lost_responses"] > 0 and stats["timeouts"] > 0  # the faults happened
    assert stats["accepted_keys"] == n
    assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
    # many messages per request (the sandbox's own record of what it was sent)
    assert len(batches) < n / 10 and max(batches) <= 100, batches
    # each intent's receipt is the one the sandbox issued for its own key
    assert len(set(receipts.values())) == n
    assert all(server.core.lookup(key, "email") == ("email", receipt)
               for key, receipt in receipts.items())


def resend_runtime_settings(tmp_path: Path, url: str, **channel: Any) -> Settings:
    folder = tmp_path / "templates" / "shipped" / "v1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "subject.txt").write_text("Shipped")
    (folder / "body.txt").write_text("Your order shipped.")
    return Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "reconciler": {"uncertain_after_s": 0.0},
        "channels": {"email": {"kind": "email", "templates": str(tmp_path / "templates"),
                               "max_in_flight": 400, **channel,
                               "provider": {"kind": "resend", "from_address":
                                            "news@tidings.test", "base_url": url,
                                            "timeout_s": 2.0}}},
    })


async def drive(runtime: Any, n: int, settled: set[str]) -> dict[str, int]:
    """The worker and the reconciler until every intent is in a settled state."""
    worker = runtime.worker("email")
    reconciler = runtime.reconciler()
    counts: dict[str, int] = {}
    for _ in range(60):
        while await worker.run_once():
            pass
        await reconciler.run_pass(now=runtime.clock.now())
        counts = (await runtime.store.intent_counts())["email"]
        if set(counts) <= settled and sum(counts.values()) == n:
            break
        await asyncio.sleep(0.1)
    return counts


async def test_resends_idempotency_key_makes_resending_a_lost_answer_safe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Single sends through the Resend dialect, answers lost, the channel resending
    each uncertain send under its key: the sandbox, deduplicating on the key as Resend
    does for a day, accepts every key once; every intent ends accepted."""
    n = 120
    server = await serve(SandboxConfig(dedupe=True, lost_response=0.05, quotas=QUOTAS),
                         dialects=DialectSettings(dialects=("resend",)))
    monkeypatch.setenv("RESEND_API_KEY", "re_1")
    runtime = await build_runtime(resend_runtime_settings(tmp_path, server.url,
                                                          uncertain="resend"))
    try:
        await runtime.notify_many([NotifyRequest(
            key=f"order-{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com"},
            channels=["email"], template="shipped/v1") for i in range(n)])
        counts = await drive(runtime, n, {State.ACCEPTED.value})
        stats = server.core.stats()["channels"]["email"]
    finally:
        await runtime.close()
        await server.close()

    assert counts == {State.ACCEPTED.value: n}
    assert stats["lost_responses"] > 0 and stats["deduplicated"] > 0  # resent, deduplicated
    assert stats["accepted_keys"] == n and stats["keys_accepted_twice"] == 0


async def test_resend_batches_reject_alone_and_hold_what_a_lost_answer_hid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches through the Resend dialect, deduplication off (a batch carries no key
    per message), many answers lost, two addresses Resend refuses: a refused address
    whose answer came back is rejected alone, every other intent is accepted or held
    (no lookup settles a lost answer), a held one is one the sandbox did accept or
    refuse, and no key is accepted twice. The quota counts requests: one per batch."""
    n = 300
    refused = ("c7@example.com", "c77@example.com")
    refused_keys = {"order-7:email", "order-77:email"}
    from tidings.sandbox.dialects import STATE_KEY

    server = await serve(SandboxConfig(dedupe=False, lost_response=0.4, quotas=QUOTAS,
                                       reject_addresses=refused),
                         dialects=DialectSettings(dialects=("resend",)))
    monkeypatch.setenv("RESEND_API_KEY", "re_1")
    runtime = await build_runtime(resend_runtime_settings(
        tmp_path, server.url, batch={"max_messages": 25, "linger_s": 0.01}))
    try:
        await runtime.notify_many([NotifyRequest(
            key=f"order-{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com"},
            channels=["email"], template="shipped/v1") for i in range(n)])
        counts = await drive(runtime, n, {State.ACCEPTED.value, State.HELD.value,
                                          State.REJECTED.value})
        held = {i.key for i in await runtime.store.intent_find(states=[State.HELD],
                                                               limit=n)}
        rejected = {i.key for i in await runtime.store.intent_find(states=[State.REJECTED],
                                                                   limit=n)}
        stats = server.core.stats()["channels"]["email"]
        batches = server.runner.app[STATE_KEY].batches
    finally:
        await runtime.close()
        await server.close()

    assert sum(counts.values()) == n and set(counts) <= {
        State.ACCEPTED.value, State.HELD.value, State.REJECTED.value}, counts
    assert rejected and rejected <= refused_keys  # refused alone, the rest of its batch sent
    assert stats["lost_responses"] > 0 and held  # answers were lost, and their emails held
    assert all((server.core.lookup(key, "email") is not None) != (key in refused_keys)
               for key in held)
    assert stats["accepted_keys"] == n - 2 and stats["keys_accepted_twice"] == 0
    # the quota counted one request a batch, whatever it carried
    assert stats["requests"] == len(batches) and max(batches) <= 25 and sum(batches) >= n
