"""Every way onto the suppression list stops the next send, on both stores, judged by
the sandbox server's own counts (a process of its own, speaking Postmark's, SendGrid's
and Twilio's APIs to the real adapters): a verified bounce or complaint webhook from
each provider (SendGrid, Postmark, Twilio, the generic one), a Twilio 21610 answer (the
number replied STOP), and an operator's entry by the CLI and by the API. After each,
the next send to that address (an email address in other letter case: notify takes
a phone number in E.164 alone) ends ``suppressed`` and the sandbox sees no request
for it."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from support.cli_process import migrated, run
from tidings.api import create_app
from tidings.api.tokens import new_token
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime
from tidings.webhooks import signature_header, twilio_signature

BASE = "http://tidings.test"
TWILIO_SID = "AC0000000000000000000000000000suppr"
TWILIO_TOKEN = "twilio-auth-token-s"
HOOK_SECRET = "generic-hook-secret-s"
PM_USER, PM_PASSWORD = "postmark-hooks", "pm-password-s"
STOPPED = "+15550009999"
_SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
ENV = {
    # What the adapters send with (the sandbox checks they are there).
    "POSTMARK_SERVER_TOKEN": "pm-server-token", "SENDGRID_API_KEY": "SG.key",
    "TWILIO_AUTH_TOKEN": TWILIO_TOKEN,
    # What the webhook route verifies with.
    "TIDINGS_WEBHOOK_SECRETS": HOOK_SECRET,
    "SENDGRID_WEBHOOK_PUBLIC_KEY": base64.b64encode(_SENDGRID_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode(),
    "POSTMARK_WEBHOOK_USERNAME": PM_USER, "POSTMARK_WEBHOOK_PASSWORD": PM_PASSWORD,
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``tidings sandbox`` speaking the three dialects, with a number that replied STOP;
    its base URL."""
    folder = tmp_path_factory.mktemp("sandbox")
    config = folder / "sandbox.json"
    config.write_text(json.dumps({"quotas": {"email": 1000, "sms": 100, "mail": 1000},
                                  "stopped_addresses": [STOPPED]}))
    process = subprocess.Popen(
        [sys.executable, "-m", "tidings", "sandbox", "--port", "0", "--config", str(config),
         "--dialect", "postmark", "--dialect", "sendgrid", "--dialect", "twilio"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert "http://" in line, line
        yield line[line.index("http://"):].strip()
    finally:
        process.terminate()
        process.wait(timeout=20)
        process.stdout.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tidings.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def write_settings(folder: Path, store: str, sandbox: str) -> Path:
    templates = folder / "templates" / "notice" / "v1"
    templates.mkdir(parents=True)
    (templates / "subject.txt").write_text("A notice")
    (templates / "body.txt").write_text("Something happened.")
    (templates / "sms.txt").write_text("Something happened.")
    path = folder / "tidings.toml"
    path.write_text(f'''
store = "{store}"
[channels.pm]
kind = "email"
templates = "templates"
provider = {{ kind = "postmark", from_address = "news@example.com", base_url = "{sandbox}" }}
[channels.sg]
kind = "email"
templates = "templates"
provider = {{ kind = "sendgrid", from_address = "news@example.com", base_url = "{sandbox}" }}
[channels.sms]
kind = "sms"
templates = "templates"
[channels.sms.provider]
kind = "twilio"
account_sid = "{TWILIO_SID}"
from_number = "+15550100000"
base_url = "{sandbox}"
[channels.mail]
kind = "email"
templates = "templates"
provider = {{ kind = "sandbox", url = "{sandbox}" }}
''')
    return path


@dataclass
class Flow:
    config: Path
    runtime: Runtime
    client: httpx.AsyncClient
    sandbox: httpx.AsyncClient
    operator: str

    async def requests(self) -> int:
        """Every send request the sandbox has seen, refused ones too (its own count)."""
        stats = (await self.sandbox.get("/v1/stats")).json()
        return int(stats["total"]["requests"])

    async def send(self, key: str, channel: str, address: str) -> str:
        """Notify ``address`` on ``channel`` and work the channel; the intent's key."""
        field = "phone" if channel == "sms" else "email"
        [full] = await self.runtime.notify(key=key, recipient={"id": key, field: address},
                                           channels=[channel], template="notice/v1")
        worker = self.runtime.worker(channel, "w1")
        while await worker.run_once():
            pass
        return full

    async def receipt(self, key: str) -> str:
        intent = await self.runtime.store.intent_get(key)
        assert intent is not None and intent.state is State.ACCEPTED, intent
        assert intent.receipt is not None
        return intent.receipt

    async def then_the_next_send_is_suppressed(self, channel: str, address: str,
                                               reason: str) -> None:
        before = await self.requests()
        key = await self.send(f"next-{channel}-{reason}", channel, address)
        intent = await self.runtime.store.intent_get(key)
        assert intent is not None
        assert (intent.state, intent.reason) == (State.SUPPRESSED, reason), intent
        assert await self.requests() == before, "the sandbox saw a send to a suppressed address"


@pytest.fixture
async def flow(tmp_path: Path, store_url: str, sandbox: str,
               monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Flow]:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    config = write_settings(tmp_path, store_url, sandbox)
    migrated(config)
    runtime = await build_runtime(Settings.load(config))
    app = create_app(runtime, env=ENV)
    text, row = new_token(name="on-call", scopes=["operator"], now=runtime.clock.now())
    await runtime.store.api_token_insert(row)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE) as client, \
            httpx.AsyncClient(base_url=sandbox, timeout=10) as witness:
        try:
            yield Flow(config=config, runtime=runtime, client=client, sandbox=witness,
                       operator=text)
        finally:
            await app.state.ctx.admission.close()
            await runtime.close()


def iso_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def posted(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    assert answer.json()["suppressed"] == 1, answer.text


# ---------------------------------------------------------------- provider webhooks


@pytest.mark.parametrize(("event", "reason"), [
    ({"event": "bounce", "type": "bounce", "reason": "550 5.1.1 unknown user"},
     "hard_bounce"),
    ({"event": "spamreport"}, "complaint")])
async def test_a_sendgrid_report(flow: Flow, event: dict[str, Any], reason: str) -> None:
    first = await flow.send("first", "sg", "ann@example.com")
    receipt = await flow.receipt(first)
    body = json.dumps([{**event, "email": "ann@example.com", "timestamp": int(
        flow.runtime.clock.now()), "sg_message_id": f"{receipt}.filter0001.1.0"}]).encode()
    stamp = str(int(flow.runtime.clock.now()))
    signature = base64.b64encode(_SENDGRID_KEY.sign(stamp.encode() + body,
                                                    ec.ECDSA(hashes.SHA256()))).decode()

    await posted(await flow.client.post("/v1/webhooks/sendgrid", content=body, headers={
        "Content-Type": "application/json",
        "X-Twilio-Email-Event-Webhook-Signature": signature,
        "X-Twilio-Email-Event-Webhook-Timestamp": stamp}))

    await flow.then_the_next_send_is_suppressed("sg", "Ann@Example.COM", reason)


@pytest.mark.parametrize(("record", "reason"), [
    ({"RecordType": "Bounce", "Type": "HardBounce", "BouncedAt": "now",
      "Description": "The server was unable to deliver your message"}, "hard_bounce"),
    ({"RecordType": "SpamComplaint", "Type": "SpamComplaint", "BouncedAt": "now"},
     "complaint")])
async def test_a_postmark_report(flow: Flow, record: dict[str, Any], reason: str) -> None:
    first = await flow.send("first", "pm", "bea@example.com")
    receipt = await flow.receipt(first)
    body = {**record, "BouncedAt": iso_now(), "MessageID": receipt,
            "Email": "bea@example.com"}

    await posted(await flow.client.post("/v1/webhooks/postmark", json=body,
                                        auth=(PM_USER, PM_PASSWORD)))

    await flow.then_the_next_send_is_suppressed("pm", "BEA@example.com", reason)


async def test_a_twilio_undelivered_report(flow: Flow) -> None:
    first = await flow.send("first", "sms", "+15550001111")
    receipt = await flow.receipt(first)
    params = {"AccountSid": TWILIO_SID, "MessageSid": receipt, "MessageStatus": "undelivered",
              "ErrorCode": "30005", "To": "+15550001111", "ApiVersion": "2010-04-01"}
    url = f"{BASE}/v1/webhooks/twilio"

    await posted(await flow.client.post(url, content=urlencode(params).encode(), headers={
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": twilio_signature(TWILIO_TOKEN, url, params.items())}))

    await flow.then_the_next_send_is_suppressed("sms", "+15550001111", "hard_bounce")


@pytest.mark.parametrize(("event", "reason"), [
    ({"event": "bounced", "bounce": "hard"}, "hard_bounce"),
    ({"event": "complained"}, "complaint")])
async def test_a_generic_report(flow: Flow, event: dict[str, Any], reason: str) -> None:
    first = await flow.send("first", "mail", "cat@example.com")
    receipt = await flow.receipt(first)
    raw = json.dumps({**event, "message_id": receipt}).encode()

    await posted(await flow.client.post("/v1/webhooks/generic", content=raw, headers={
        "Content-Type": "application/json",
        "X-Tidings-Signature": signature_header(HOOK_SECRET, int(flow.runtime.clock.now()),
                                                raw)}))

    await flow.then_the_next_send_is_suppressed("mail", "Cat@example.com", reason)


# ---------------------------------------------------------------- a STOP answer


async def test_a_twilio_21610_answer(flow: Flow) -> None:
    before = await flow.requests()
    first = await flow.send("first", "sms", STOPPED)

    intent = await flow.runtime.store.intent_get(first)
    assert intent is not None and intent.state is State.REJECTED, intent
    assert intent.reason is not None and "21610" in intent.reason
    assert await flow.requests() == before + 1  # the sandbox refused it
    [entry] = (await flow.runtime.store.suppressions_for([(STOPPED, "sms")])).values()
    assert (entry.reason.value, entry.key) == ("sms_stop", first)

    await flow.then_the_next_send_is_suppressed("sms", STOPPED, "sms_stop")


# ---------------------------------------------------------------- an operator


async def test_an_operators_entry_by_the_cli(flow: Flow) -> None:
    added = await asyncio.to_thread(run, "suppression", "add", "email", "Dan@Example.com",
                                    "--by", "alice", "--json", "--config", str(flow.config))
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["added"] is True

    await flow.then_the_next_send_is_suppressed("mail", "dan@example.com", "manual")
    await flow.then_the_next_send_is_suppressed("pm", "DAN@example.com", "manual")


async def test_an_operators_entry_by_the_api(flow: Flow) -> None:
    answer = await flow.client.post("/v1/suppressions", json={
        "address": "+1 (555) 000-2222", "kind": "sms", "reason": "unsubscribe"},
        headers={"Authorization": f"Bearer {flow.operator}"})
    assert answer.status_code == 200 and answer.json()["added"] is True, answer.text

    await flow.then_the_next_send_is_suppressed("sms", "+15550002222", "unsubscribe")


async def test_an_address_taken_off_the_list_is_sent_to_again(flow: Flow) -> None:
    auth = {"Authorization": f"Bearer {flow.operator}"}
    await flow.client.post("/v1/suppressions", json={"address": "eve@example.com",
                                                     "kind": "email"}, headers=auth)
    await flow.then_the_next_send_is_suppressed("mail", "eve@example.com", "manual")
    removed = await flow.client.post("/v1/suppressions/remove", json={
        "address": "eve@example.com", "kind": "email", "note": "she asked"}, headers=auth)
    assert removed.json()["removed"] is not None

    before = await flow.requests()
    await flow.receipt(await flow.send("again", "mail", "Eve@example.com"))
    assert await flow.requests() == before + 1
