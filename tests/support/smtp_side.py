"""An aiosmtpd server in the test's own event loop, answering on cue.

The provider side of the SMTP adapter in the conformance suite: ``SmtpSide.scenario``
says what the next transaction gets (the ``Scenario`` values of the HTTP fakes,
acted out in SMTP replies), and every message that reaches DATA is kept, parsed.
"""

from __future__ import annotations

import asyncio
import email.policy
from dataclasses import dataclass
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session

from support.fake_http_providers import Scenario

RATE_LIMIT_REPLY = "421 4.7.0 Too many messages from you, slow down"
TRY_LATER_REPLY = "451 4.3.0 Temporary lookup failure"


class SmtpSide:
    """An aiosmtpd handler whose answers follow ``scenario``."""

    has_retry_after = False
    has_request_id = False
    has_idempotency = False

    def __init__(self) -> None:
        self.scenario = Scenario.ACCEPT
        self.messages: list[EmailMessage] = []
        self.receipts: dict[str, str] = {}
        self.peers: list[Any] = []
        self.release = asyncio.Event()
        self._queued = 0

    async def handle_EHLO(self, server: SMTP, session: Session, envelope: Envelope,
                          hostname: str, responses: list[str]) -> list[str]:
        session.host_name = hostname
        if session.peer not in self.peers:
            self.peers.append(session.peer)
        return responses

    async def handle_MAIL(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, mail_options: list[str]) -> str:
        if self.scenario in (Scenario.RATE_LIMITED_SECONDS, Scenario.RATE_LIMITED_DATE):
            return RATE_LIMIT_REPLY
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 Ok"

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        if self.scenario is Scenario.REFUSE:
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        message = BytesParser(policy=email.policy.default).parsebytes(content)
        assert isinstance(message, EmailMessage)
        self.messages.append(message)
        if self.scenario is Scenario.TRY_LATER:
            return TRY_LATER_REPLY
        if self.scenario is Scenario.HANG_AFTER_SEND:
            await self.release.wait()
        if self.scenario in (Scenario.DROP_AFTER_SEND, Scenario.HANG_AFTER_SEND):
            assert isinstance(server.transport, asyncio.Transport)
            server.transport.abort()
            return "250 2.0.0 never heard"
        self._queued += 1
        queue_id = f"Q{self._queued:05d}"
        self.receipts[str(message["X-Tidings-Key"])] = queue_id
        if self.scenario is Scenario.ACCEPT_THEN_DROP:  # queued, and the reply lost
            assert isinstance(server.transport, asyncio.Transport)
            server.transport.abort()
        return f"250 2.0.0 Ok: queued as {queue_id}"

    @property
    def keys_received(self) -> list[str]:
        return [str(m["X-Tidings-Key"]) for m in self.messages]

    @property
    def idempotency_keys(self) -> list[str]:
        return []  # SMTP has no idempotency key

    @property
    def request_ids(self) -> list[str]:
        return []

    def receipt_of(self, key: str) -> str | None:
        return self.receipts.get(key)


@dataclass
class LocalSmtp:
    side: SmtpSide
    server: asyncio.Server
    port: int

    async def close(self) -> None:
        self.side.release.set()
        self.server.close()
        await self.server.wait_closed()


async def serve_smtp(side: SmtpSide, **smtp_kwargs: Any) -> LocalSmtp:
    """Serve ``side`` on a free port of 127.0.0.1 (``smtp_kwargs`` go to aiosmtpd's SMTP)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(side, hostname="mx.test", loop=loop, **smtp_kwargs), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return LocalSmtp(side, server, port)
