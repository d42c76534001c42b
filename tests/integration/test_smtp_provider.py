"""The SMTP adapter against a real SMTP server process, judged by the server's inbox.

``tests/support/smtp_server.py`` runs aiosmtpd in a subprocess and writes every
message it accepts to a maildir-like directory, with a log of which connection
carried it. Sending, scripted refusals, a server killed mid-DATA, STARTTLS and
implicit TLS with a certificate made for the test, and login are each checked by
what arrived there, not by what the adapter says about itself.
"""

from __future__ import annotations

import asyncio
import email.policy
import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest

from tidings.config.providers import SmtpProviderSettings
from tidings.core.clock import FakeClock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, Outcome, Permanent, RateLimited, Transient, Uncertain
from tidings.providers.build import build_provider_from
from tidings.providers.smtp import SmtpProvider, message_id

pytestmark = pytest.mark.slow

SERVER = Path(__file__).parents[1] / "support" / "smtp_server.py"
FROM = "digest@tidings.test"
CONTENT = Content(subject="Your weekly digest", text="Hello Ada,\nthree things happened.",
                  html="<p>Hello Ada,</p><p>three things happened.</p>")


@dataclass
class SmtpServer:
    process: asyncio.subprocess.Process
    port: int
    inbox: Path

    def messages(self) -> list[EmailMessage]:
        parser = BytesParser(policy=email.policy.default)
        found = []
        for path in sorted((self.inbox / "new").glob("*.eml")):
            parsed = parser.parsebytes(path.read_bytes())
            assert isinstance(parsed, EmailMessage)
            found.append(parsed)
        return found

    def log(self) -> list[dict[str, Any]]:
        path = self.inbox / "log.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    async def line(self) -> str:
        assert self.process.stdout is not None
        return (await asyncio.wait_for(self.process.stdout.readline(), 30)).decode().strip()


StartServer = Callable[..., Awaitable[SmtpServer]]


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[StartServer]:
    started: list[SmtpServer] = []

    async def start(*args: str) -> SmtpServer:
        inbox = tmp_path / f"inbox{len(started)}"
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(SERVER), "--dir", str(inbox), *args,
            stdout=asyncio.subprocess.PIPE)
        server = SmtpServer(process, 0, inbox)
        started.append(server)
        announced = await server.line()
        assert announced.startswith("listening on "), announced
        server.port = int(announced.rsplit(" ", 1)[1])
        return server

    yield start
    for server in started:
        if server.process.returncode is None:
            server.process.kill()
        await server.process.wait()


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1, made with openssl for this session."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("STARTTLS/TLS tests need the openssl command (cryptography is not "
                    "installed either) to make a self-signed certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60)
    return Certificate(cert, key)


def provider_for(server: SmtpServer, **options: Any) -> SmtpProvider:
    settings: dict[str, Any] = {"security": "none", "max_connections": 2, **options}
    return SmtpProvider(host="127.0.0.1", port=server.port, channel="email", from_address=FROM,
                        from_name="Tidings Digest", clock=FakeClock(), **settings)


def message(key: str, to: str = "ada@example.com") -> SendRequest:
    return SendRequest(key=key, channel="email", to=to, template="digest", data={},
                       recipient_id="cust_1042", content=CONTENT)


# ---------------------------------------------------------------- delivery


async def test_every_key_arrives_once_per_send_over_reused_connections(
        start_server: StartServer) -> None:
    server = await start_server()
    provider = provider_for(server, max_connections=3)
    once = [f"weekly-digest/2026-08-14/cust_{i:04d}/email/v3" for i in range(40)]
    repeated = once[:10]  # a retry of an earlier send
    try:
        outcomes = await asyncio.gather(*(provider.send(message(k)) for k in once))
        outcomes += await asyncio.gather(*(provider.send(message(k)) for k in repeated))
    finally:
        await provider.close()

    assert all(isinstance(o, Accepted) for o in outcomes)
    inbox = server.messages()
    per_key = Counter(str(m["X-Tidings-Key"]) for m in inbox)
    assert per_key == Counter(once + repeated)
    # The receipt is the server's own queue id, one per stored message.
    receipts = {o.receipt for o in outcomes if isinstance(o, Accepted)}
    assert receipts == {f"MX{n:06d}" for n in range(1, len(inbox) + 1)}
    # A repeat carries the same Message-ID, so a mail client can tell it is the same message.
    ids: dict[str, set[str]] = {}
    for m in inbox:
        ids.setdefault(str(m["X-Tidings-Key"]), set()).add(str(m["Message-ID"]))
    assert ids == {k: {message_id(k, "tidings.test")} for k in once}
    # 50 messages over at most 3 connections: reused, not one per message.
    peers = {tuple(entry["peer"]) for entry in server.log()}
    assert 1 <= len(peers) <= 3


async def test_the_message_is_multipart_text_and_html(start_server: StartServer) -> None:
    server = await start_server()
    provider = provider_for(server)
    key = "shipment-4821:customer-73:email"
    try:
        assert isinstance(await provider.send(message(key)), Accepted)
    finally:
        await provider.close()
    (received,) = server.messages()
    assert received.get_content_type() == "multipart/alternative"
    text, html = received.iter_parts()
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    assert (text.get_content_type(), html.get_content_type()) == ("text/plain", "text/html")
    assert text.get_content().replace("\r\n", "\n") == CONTENT.text + "\n"
    assert html.get_content().replace("\r\n", "\n") == (CONTENT.html or "") + "\n"
    assert received["Subject"] == CONTENT.subject
    assert received["From"] == f"Tidings Digest <{FROM}>"
    assert received["To"] == "ada@example.com"
    assert received["X-Tidings-Key"] == key
    assert received["Message-ID"] == message_id(key, "tidings.test")


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("to", "outcome_type"),
    [
        ("rcpt-421@example.com", RateLimited),   # the server closes the channel for everyone
        ("rcpt-450@example.com", RateLimited),   # "receiving mail too quickly"
        ("rcpt-451@example.com", Transient),     # greylisting: this message, later
        ("data-451@example.com", Transient),
        ("data-452@example.com", Transient),     # storage
        ("rcpt-550@example.com", Permanent),
        ("data-554@example.com", Permanent),
    ],
)
async def test_scripted_replies_map_to_the_documented_outcomes(
        start_server: StartServer, to: str, outcome_type: type) -> None:
    server = await start_server()
    provider = provider_for(server)
    try:
        outcome = await provider.send(message("k-refused", to=to))
        # The connection is still good (or replaced) for the next message.
        after = await provider.send(message("k-after"))
    finally:
        await provider.close()
    assert type(outcome) is outcome_type
    assert isinstance(outcome, RateLimited | Transient | Permanent)
    assert outcome.reason.startswith(f"SMTP {to[5:8]} at {to[:4].upper()}")
    assert to not in outcome.reason and "example.com" not in outcome.reason
    assert isinstance(after, Accepted)
    assert [str(m["X-Tidings-Key"]) for m in server.messages()] == ["k-after"]


async def test_a_server_killed_after_data_leaves_the_send_uncertain(
        start_server: StartServer) -> None:
    server = await start_server()
    provider = provider_for(server)
    try:
        sending = asyncio.create_task(provider.send(message("k-lost", to="hang@example.com")))
        assert await server.line() == "DATA k-lost"  # the whole message reached the server
        server.process.kill()
        outcome: Outcome = await sending
    finally:
        await provider.close()
    assert isinstance(outcome, Uncertain)
    assert "after DATA" in outcome.reason
    assert "hang@example.com" not in outcome.reason


async def test_a_reply_dropped_after_data_is_stored_and_uncertain_by_key(
        start_server: StartServer) -> None:
    # given a server that loses the reply to a third of the keys, once it stored them
    server = await start_server("--drop-after-data", "0.33", "--drop-seed", "7")
    provider = provider_for(server)
    keys = [f"k-{i:03d}" for i in range(60)]
    try:
        first = [await provider.send(message(k)) for k in keys]
        again = [await provider.send(message(k)) for k in keys]
    finally:
        await provider.close()

    # then every message is in the inbox, twice (each key was sent twice) ...
    assert Counter(str(m["X-Tidings-Key"]) for m in server.messages()) == Counter(keys * 2)
    # ... the log names the dropped ones, and the adapter could not know they arrived
    dropped = {e["key"] for e in server.log() if e.get("dropped")}
    assert 0 < len(dropped) < len(keys)
    uncertain = {k for k, o in zip(keys, first, strict=True) if isinstance(o, Uncertain)}
    assert uncertain == dropped
    assert all(isinstance(o, Accepted) for k, o in zip(keys, first, strict=True)
               if k not in dropped)
    # ... and the key alone decides: a second send of a key meets the same fate
    assert [type(o) for o in again] == [type(o) for o in first]


async def test_a_server_that_is_gone_is_transient(start_server: StartServer) -> None:
    server = await start_server()
    server.process.kill()
    await server.process.wait()
    provider = provider_for(server)
    try:
        outcome = await provider.send(message("k-nobody"))
    finally:
        await provider.close()
    assert isinstance(outcome, Transient)
    assert outcome.reason.startswith("not connected")


# ---------------------------------------------------------------- TLS and login


async def test_starttls_with_login_from_the_environment(start_server: StartServer,
                                                        certificate: Certificate) -> None:
    server = await start_server("--security", "starttls", "--cert", str(certificate.cert),
                                "--key", str(certificate.key), "--login", "tidings:s3cret-pw")
    settings = SmtpProviderSettings(
        host="127.0.0.1", port=server.port, security="starttls", from_address=FROM,
        username="tidings", password_env="SMTP_PASSWORD", ca_file=str(certificate.cert))
    provider = build_provider_from(settings, channel="email", clock=FakeClock(),
                                   env={"SMTP_PASSWORD": "s3cret-pw"})
    wrong = build_provider_from(settings, channel="email", clock=FakeClock(),
                                env={"SMTP_PASSWORD": "not-the-password"})
    try:
        accepted = await provider.send(message("k-tls-1"))
        again = await provider.send(message("k-tls-2"))
        refused = await wrong.send(message("k-tls-3"))
    finally:
        await provider.close()
        await wrong.close()
    assert isinstance(accepted, Accepted) and isinstance(again, Accepted)
    # A refused login is about the channel's settings, not the message: retryable.
    assert isinstance(refused, Transient)
    assert "535" in refused.reason and "not-the-password" not in refused.reason
    assert [str(m["X-Tidings-Key"]) for m in server.messages()] == ["k-tls-1", "k-tls-2"]
    assert len({tuple(e["peer"]) for e in server.log()}) == 1


async def test_starttls_refuses_an_untrusted_certificate(start_server: StartServer,
                                                         certificate: Certificate) -> None:
    server = await start_server("--security", "starttls", "--cert", str(certificate.cert),
                                "--key", str(certificate.key))
    provider = provider_for(server, security="starttls")  # the system's CAs only
    try:
        outcome = await provider.send(message("k-untrusted"))
    finally:
        await provider.close()
    assert isinstance(outcome, Transient)
    assert "CERTIFICATE_VERIFY_FAILED" in outcome.reason
    assert server.messages() == []


async def test_implicit_tls(start_server: StartServer, certificate: Certificate) -> None:
    server = await start_server("--security", "tls", "--cert", str(certificate.cert),
                                "--key", str(certificate.key))
    provider = provider_for(server, security="tls", ca_file=str(certificate.cert))
    try:
        outcome = await provider.send(message("k-implicit"))
    finally:
        await provider.close()
    assert isinstance(outcome, Accepted)
    assert [str(m["X-Tidings-Key"]) for m in server.messages()] == ["k-implicit"]
