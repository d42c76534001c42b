"""The SMTP adapter: its reply mapping, its message, and its connection pool.

The server is aiosmtpd in the test's own event loop (``support.smtp_side``); the
subprocess server, TLS and the inbox witness are in tests/integration.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

from support.fake_http_providers import Scenario
from support.smtp_side import LocalSmtp, SmtpSide, serve_smtp
from tidings.core.clock import FakeClock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted, Outcome, Permanent, RateLimited, Transient
from tidings.providers.smtp import SmtpProvider, message_id, reply_outcome

EMAIL = "ada@example.com"
CONTENT = Content(subject="Digest", text="Three things.", html="<p>Three things.</p>")


@pytest.mark.parametrize(
    ("code", "text", "stage", "expected"),
    [
        (421, "4.7.0 Try again later", "MAIL",
         RateLimited(reason="SMTP 421 at MAIL: 4.7.0 Try again later")),
        (421, "", "connect", RateLimited(reason="SMTP 421 at connect")),
        (450, "4.2.1 receiving mail at a rate that prevents delivery", "RCPT", RateLimited),
        (451, "4.7.0 Too many messages, slow down", "DATA", RateLimited),
        (452, "4.5.3 Too many recipients", "RCPT", RateLimited),
        (450, "4.2.0 Mailbox busy", "RCPT", Transient),
        (451, "4.7.1 Greylisted, please try again later", "RCPT", Transient),
        (452, "4.3.1 Insufficient system storage", "DATA", Transient),
        (454, "4.7.0 TLS not available", "MAIL", Transient),
        (535, "5.7.8 Authentication credentials invalid", "connect", Transient),
        (530, "5.7.0 Authentication required", "MAIL", Transient),
        (550, "5.1.1 User unknown", "RCPT",
         Permanent(reason="SMTP 550 at RCPT: 5.1.1 User unknown")),
        (554, "5.7.1 Message rejected", "DATA", Permanent),
        (552, "5.3.4 Message size exceeds fixed limit", "DATA", Permanent),
        (354, "unexpected", "DATA", Transient),
    ],
)
def test_reply_codes_map_to_outcomes(code: int, text: str, stage: Any,
                                     expected: Outcome | type) -> None:
    outcome = reply_outcome(code, text, stage)
    if isinstance(expected, type):
        assert type(outcome) is expected
    else:
        assert outcome == expected


def test_the_message_id_is_stable_and_reveals_nothing_of_the_key() -> None:
    key = "weekly-digest/2026-08-14/cust_1042/email/v3"
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert message_id(key, "tidings.test") == f"<{digest}@tidings.test>"
    assert message_id(key, "tidings.test") == message_id(key, "tidings.test")
    assert "cust_1042" not in message_id(key, "tidings.test")


# ---------------------------------------------------------------- against a local server


@pytest.fixture
async def local() -> AsyncIterator[LocalSmtp]:
    served = await serve_smtp(SmtpSide())
    yield served
    await served.close()


def make(local: LocalSmtp, clock: FakeClock | None = None, **options: Any) -> SmtpProvider:
    return SmtpProvider(host="127.0.0.1", port=local.port, channel="email",
                        from_address="news@tidings.test", security="none",
                        clock=clock or FakeClock(), **options)


def request(key: str = "k1", to: str = EMAIL, content: Content | None = CONTENT) -> SendRequest:
    return SendRequest(key=key, channel="email", to=to, template="digest", data={},
                       recipient_id="cust_1042", content=content)


async def test_the_message_headers_and_parts(local: LocalSmtp) -> None:
    clock = FakeClock(start=1_786_698_000.0)  # 2026-08-14 09:00 UTC
    provider = make(local, clock, from_name="Tidings", reply_to="help@tidings.test",
                    message_id_domain="mail.tidings.test")
    assert isinstance(await provider.send(request(key="k/1")), Accepted)
    await provider.send(request(key="k/2", content=Content(text="Plain only, é.")))
    await provider.close()
    rich, plain = local.side.messages
    assert rich["From"] == "Tidings <news@tidings.test>"
    assert rich["Reply-To"] == "help@tidings.test"
    assert rich["Date"] == "Fri, 14 Aug 2026 09:00:00 +0000"
    assert rich["Message-ID"] == message_id("k/1", "mail.tidings.test")
    assert rich["X-Tidings-Key"] == "k/1"
    assert rich.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in rich.iter_parts()] == ["text/plain", "text/html"]
    assert plain.get_content_type() == "text/plain"
    assert plain["Subject"] is None
    assert plain.get_content().strip() == "Plain only, é."
    # 7-bit on the wire: no 8BITMIME needed from the server.
    assert plain["Content-Transfer-Encoding"] in ("quoted-printable", "base64")


async def test_one_connection_carries_many_messages_and_survives_a_refusal(
        local: LocalSmtp) -> None:
    provider = make(local)
    outcomes = [await provider.send(request(key=f"k{i}")) for i in range(5)]
    local.side.scenario = Scenario.REFUSE
    refused = await provider.send(request(key="k-refused"))
    local.side.scenario = Scenario.ACCEPT
    after = await provider.send(request(key="k-after"))
    await provider.close()
    assert all(isinstance(o, Accepted) for o in outcomes)
    assert isinstance(refused, Permanent) and isinstance(after, Accepted)
    assert len(local.side.peers) == 1  # RSET after the refusal, same connection


async def test_concurrent_sends_open_at_most_max_connections(local: LocalSmtp) -> None:
    provider = make(local, max_connections=2)
    outcomes = await asyncio.gather(*(provider.send(request(key=f"k{i}")) for i in range(12)))
    await provider.close()
    assert all(isinstance(o, Accepted) for o in outcomes)
    assert len(local.side.keys_received) == 12
    assert 1 <= len(local.side.peers) <= 2


async def test_a_421_drops_the_connection_and_the_next_send_opens_another(
        local: LocalSmtp) -> None:
    provider = make(local)
    local.side.scenario = Scenario.RATE_LIMITED_SECONDS
    assert isinstance(await provider.send(request(key="k1")), RateLimited)
    local.side.scenario = Scenario.ACCEPT
    assert isinstance(await provider.send(request(key="k2")), Accepted)
    await provider.close()
    assert len(local.side.peers) == 2


class DropsNextMail(SmtpSide):
    """Closes the connection instead of answering the next MAIL, as a server does to a
    connection it timed out while it sat idle in the client's pool."""

    def __init__(self) -> None:
        super().__init__()
        self.drop_next_mail = False

    async def handle_MAIL(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, mail_options: list[str]) -> str:
        if self.drop_next_mail:
            self.drop_next_mail = False
            assert isinstance(server.transport, asyncio.Transport)
            server.transport.abort()
            return "421 never heard"
        return await super().handle_MAIL(server, session, envelope, address, mail_options)


async def test_a_pooled_connection_found_dead_is_replaced_without_failing_the_send() -> None:
    side = DropsNextMail()
    served = await serve_smtp(side)
    provider = make(served)
    try:
        assert isinstance(await provider.send(request(key="k1")), Accepted)
        side.drop_next_mail = True
        again = await provider.send(request(key="k2"))
    finally:
        await provider.close()
        await served.close()
    assert isinstance(again, Accepted)
    assert side.keys_received == ["k1", "k2"]
    assert len(side.peers) == 2


async def test_a_fresh_connection_dropped_at_mail_is_transient() -> None:
    side = DropsNextMail()
    side.drop_next_mail = True
    served = await serve_smtp(side)
    provider = make(served)
    try:
        outcome = await provider.send(request(key="k1"))
    finally:
        await provider.close()
        await served.close()
    assert isinstance(outcome, Transient)
    assert outcome.reason.startswith("connection lost at MAIL")
    assert side.keys_received == []


async def test_an_idle_connection_past_its_timeout_is_not_reused(local: LocalSmtp) -> None:
    clock = FakeClock()
    provider = make(local, clock, idle_timeout_s=30.0)
    await provider.send(request(key="k1"))
    clock.advance(10)
    await provider.send(request(key="k2"))
    clock.advance(31)
    await provider.send(request(key="k3"))
    await provider.close()
    assert len(local.side.peers) == 2


async def test_close_while_a_send_is_in_flight(local: LocalSmtp) -> None:
    class Held(SmtpSide):
        def __init__(self) -> None:
            super().__init__()
            self.arrived = asyncio.Event()

        async def handle_DATA(self, server: SMTP, session: Session,
                              envelope: Envelope) -> str:
            self.arrived.set()
            await self.release.wait()
            return await super().handle_DATA(server, session, envelope)

    side = Held()
    served = await serve_smtp(side)
    provider = make(served)
    try:
        sending = asyncio.create_task(provider.send(request(key="k1")))
        await side.arrived.wait()
        await provider.close()
        side.release.set()
        assert isinstance(await sending, Accepted)
        # The connection of the in-flight send was not put back: a new one is opened.
        assert isinstance(await provider.send(request(key="k2")), Accepted)
    finally:
        await provider.close()
        await served.close()
    assert len(side.peers) == 2


async def test_nothing_is_sent_for_an_unwritable_header(local: LocalSmtp) -> None:
    provider = make(local)
    outcome = await provider.send(request(to="ada@example.com\r\nBcc: eve@example.com"))
    await provider.close()
    assert isinstance(outcome, Permanent)
    assert outcome.reason.startswith("message cannot be built")
    assert "example.com" not in outcome.reason
    assert local.side.peers == []


@pytest.mark.parametrize("smtputf8", [True, False])
async def test_a_non_ascii_address_needs_smtputf8(smtputf8: bool) -> None:
    side = SmtpSide()
    served = await serve_smtp(side, enable_SMTPUTF8=smtputf8)
    provider = make(served)
    try:
        outcome = await provider.send(request(to="zoë@exämple.com"))
    finally:
        await provider.close()
        await served.close()
    if smtputf8:
        assert isinstance(outcome, Accepted)
        assert side.messages[0]["To"] == "zoë@exämple.com"
    else:
        assert outcome == Permanent(reason="non-ASCII address and the server has no SMTPUTF8")


async def test_login_is_checked_and_a_refusal_keeps_the_password_out() -> None:
    seen: list[tuple[str, str]] = []

    def authenticate(server: SMTP, session: Session, envelope: Envelope, mechanism: str,
                     auth_data: Any) -> AuthResult:
        login, password = (v.decode() if isinstance(v, bytes) else v for v in auth_data)
        seen.append((login, password))
        return AuthResult(success=password == "right-password", handled=False)

    side = SmtpSide()
    # AUTH offered without TLS, and not required (aiosmtpd warns about requiring it so).
    served = await serve_smtp(side, authenticator=authenticate, auth_require_tls=False)
    good = make(served, username="tidings", password="right-password")
    bad = make(served, username="tidings", password="wrong-password")
    try:
        accepted = await good.send(request(key="k1"))
        refused = await bad.send(request(key="k2"))
    finally:
        await good.close()
        await bad.close()
        await served.close()
    assert isinstance(accepted, Accepted)
    assert isinstance(refused, Transient)
    assert "535" in refused.reason and "wrong-password" not in refused.reason
    assert ("tidings", "right-password") in seen
    assert side.keys_received == ["k1"]
    assert "right-password" not in repr(good) and "right-password" not in str(vars(good))
