"""Email over SMTP (aiosmtplib), with a small pool of kept-open connections.

Each send builds a MIME message from the rendered ``Content`` (text, and HTML as a
``multipart/alternative`` sibling when given) and runs one transaction, MAIL → RCPT
→ DATA, on a connection of its own from the pool. The delivery key is in the
``X-Tidings-Key`` header and, hashed, in a stable ``Message-ID``
(``<sha256(key)@domain>``), so a retried send carries the same Message-ID and a
receiving system can tell it is the same message. SMTP has no idempotency key and
no lookup: ``supports_lookup`` and ``deduplicates`` are False, so an uncertain send
(the connection lost once DATA was sent) is held by default (``tidings.delivery.uncertain``):
it waits for an operator, who can search the relay's logs or the recipient's mailbox
for the Message-ID or the ``X-Tidings-Key`` header. ``resend`` is the explicit
at-least-once choice: a second copy is then possible. ``Content.headers`` (the one-click
unsubscribe pair) are written as they are, one line each, never folded into encoded
words: a receiver reads ``List-Unsubscribe`` as a list of URLs.

Replies map to outcomes by code, and by stage where the stage decides:

=================================  ==================================================
reply or failure                   outcome
=================================  ==================================================
2xx after DATA                     Accepted; receipt: the server's queue id when the
                                   reply names one ("queued as …"), else Message-ID
421 (any stage, or the greeting)   RateLimited: the server closes the channel for
                                   every message ("too many connections/messages")
450, 451, 452 saying "too many",   RateLimited: the sending rate is the problem
"too fast/quickly", "rate",
"throttled", "slow down",
"exceeded" or "quota"
450, 451, 452 otherwise            Transient (mailbox busy, greylisting, local error,
                                   storage)
other 4xx                          Transient
530, 534, 535, 538                 Transient: authentication is the channel's
                                   setting, not the message; the retry budget ends
                                   in the dead-letter queue and a redrive recovers
other 5xx                          Permanent, with the server's text (redacted)
connect, TLS, EHLO or login        Transient: nothing was sent
failure; a lost connection or
timeout before DATA
lost connection or timeout once    Uncertain: the server may have queued it
DATA was sent
=================================  ==================================================

A pooled connection that the server closed while idle is retried once on a fresh
connection (when it fails at MAIL, before anything of the message left).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.policy
import hashlib
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formataddr, formatdate
from typing import Literal

import aiosmtplib
from pydantic import SecretStr

from tidings.core.clock import Clock
from tidings.core.errors import ConfigurationError
from tidings.core.model import SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.core.redaction import redact
from tidings.providers.http_outcomes import NO_CONTENT, describe

Security = Literal["starttls", "tls", "none"]
DEFAULT_PORTS: dict[Security, int] = {"starttls": 587, "tls": 465, "none": 25}
KEY_HEADER = "X-Tidings-Key"
Stage = Literal["connect", "MAIL", "RCPT", "DATA"]

_SLOW_DOWN = re.compile(
    r"too many|too (?:fast|quickly)|\brate\b|rate.?limit|throttl|slow down|exceeded|quota",
    re.IGNORECASE)
_AUTH_CODES = frozenset({530, 534, 535, 538})
_QUEUE_ID = re.compile(r"queued as\s+<?([\w.@-]+)>?", re.IGNORECASE)
# 7-bit transfer encodings (quoted-printable/base64 for non-ASCII text), so the message
# needs no 8BITMIME from the server.
_POLICY = email.policy.SMTP.clone(cte_type="7bit")
_UTF8_POLICY = email.policy.SMTPUTF8.clone(cte_type="7bit")


def message_id(key: str, domain: str) -> str:
    """The Message-ID of a delivery key: stable across retries, reveals nothing."""
    return f"<{hashlib.sha256(key.encode()).hexdigest()}@{domain}>"


def reply_outcome(code: int, text: str, stage: Stage) -> Outcome:
    """Map one SMTP reply (already redacted) to an Outcome; see the module's table."""
    reason = f"SMTP {code} at {stage}: {text}" if text else f"SMTP {code} at {stage}"
    if code == 421 or (code in (450, 451, 452) and _SLOW_DOWN.search(text)):
        return RateLimited(reason=reason)
    if code in _AUTH_CODES:
        return Transient(reason=f"{reason} (authentication refused)")
    if 500 <= code < 600:
        return Permanent(reason=reason)
    return Transient(reason=reason)


@dataclass
class _Connection:
    smtp: aiosmtplib.SMTP
    generation: int
    last_used: float


@dataclass(frozen=True)
class _Result:
    outcome: Outcome
    keep: bool
    """The connection is clean and may carry the next message."""
    stale: bool = False
    """A pooled connection was found dead before anything was sent: try a fresh one."""


class SmtpProvider:
    """Send each message as one SMTP transaction over a pooled connection; never raises.

    ``security`` is ``starttls`` (required, port 587 by default), ``tls`` (implicit,
    465) or ``none`` (25). ``username``/``password`` log in when both are given.
    ``ca_file`` is a CA bundle trusted instead of the system's (a private relay).
    At most ``max_connections`` connections are open; a connection idle for longer
    than ``idle_timeout_s`` (by ``clock``) is closed instead of reused.
    """

    supports_lookup = False
    deduplicates = False

    def __init__(self, *, host: str, channel: str, from_address: str, port: int | None = None,
                 from_name: str | None = None, reply_to: str | None = None,
                 security: Security = "starttls", username: str | None = None,
                 password: str | SecretStr | None = None, validate_certs: bool = True,
                 ca_file: str | None = None, local_hostname: str | None = None,
                 message_id_domain: str | None = None, envelope_from: str | None = None,
                 timeout_s: float = 30.0, data_timeout_s: float = 120.0,
                 max_connections: int = 2, idle_timeout_s: float = 60.0,
                 clock: Clock, name: str = "smtp") -> None:
        self.name = name
        self.channel = channel
        self._host = host
        self._port = port or DEFAULT_PORTS[security]
        self._security: Security = security
        self._username = username
        self._password = (password if isinstance(password, SecretStr) or password is None
                          else SecretStr(password))
        self._tls_context = (_tls_context(validate_certs, ca_file)
                             if security != "none" else None)
        self._local_hostname = local_hostname
        self._from_header = formataddr((from_name, from_address)) if from_name else from_address
        self._reply_to = reply_to
        self._envelope_from = envelope_from or from_address
        self._domain = message_id_domain or from_address.rpartition("@")[2] or "localhost"
        self._timeout_s = timeout_s
        self._data_timeout_s = data_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._slots = asyncio.Semaphore(max_connections)
        # A send beyond the pool waits for a connection: the worker starts no more than
        # this at once (``providers.base.concurrent_sends``).
        self.max_concurrent_sends = max_connections
        self._idle: list[_Connection] = []
        self._generation = 0

    def __repr__(self) -> str:
        return (f"<SmtpProvider name={self.name!r} channel={self.channel!r} "
                f"{self._security} {self._host}:{self._port}>")

    async def send(self, request: SendRequest) -> Outcome:
        """Send one message; never raises."""
        if request.content is None:
            return Permanent(reason=NO_CONTENT)
        utf8 = not (request.to.isascii() and self._envelope_from.isascii()
                    and self._from_header.isascii())
        try:
            data = self._message(request, utf8=utf8)
        except (ValueError, TypeError) as exc:
            # A header that cannot be written (a line break in the address or subject).
            return Permanent(reason=f"message cannot be built: {self._redact(str(exc), request)}")
        async with self._slots:
            outcome, stale = await self._send_once(request, data, utf8=utf8, pooled=True)
            if stale:
                # The server closed the pooled connection while it idled: nothing was sent.
                outcome, _ = await self._send_once(request, data, utf8=utf8, pooled=False)
        return outcome

    async def _send_once(self, request: SendRequest, data: bytes, *, utf8: bool,
                         pooled: bool) -> tuple[Outcome, bool]:
        """One attempt; True with it when a pooled connection turned out dead at MAIL."""
        conn = self._take_idle() if pooled else None
        reused = conn is not None
        if conn is None:
            fresh = await self._connect(request)
            if not isinstance(fresh, _Connection):
                return fresh, False
            conn = fresh
        result = await self._transact(conn, request, data, utf8=utf8)
        if result.keep:
            self._put_idle(conn)
        else:
            conn.smtp.close()
        return result.outcome, result.stale and reused

    async def lookup(self, key: str) -> Lookup:
        """Not offered: SMTP cannot be asked about a message (``supports_lookup`` is False)."""
        raise NotImplementedError("SMTP has no lookup by idempotency key")

    async def close(self) -> None:
        """QUIT every idle connection; connections in use close when their send ends.

        Safe to call more than once; a later send opens a fresh connection.
        """
        self._generation += 1
        idle, self._idle = self._idle, []
        for conn in idle:
            # A server that is gone already needs no goodbye.
            with contextlib.suppress(aiosmtplib.SMTPException, OSError):
                await conn.smtp.quit(timeout=min(self._timeout_s, 5.0))
            conn.smtp.close()

    # ------------------------------------------------------------ internals

    def _message(self, request: SendRequest, *, utf8: bool) -> bytes:
        content = request.content
        assert content is not None
        msg = EmailMessage(policy=_UTF8_POLICY if utf8 else _POLICY)
        msg["From"] = self._from_header
        msg["To"] = request.to
        if content.subject is not None:
            msg["Subject"] = content.subject
        msg["Date"] = formatdate(self._clock.now(), usegmt=True)
        msg["Message-ID"] = message_id(request.key, self._domain)
        msg[KEY_HEADER] = request.key
        if self._reply_to:
            msg["Reply-To"] = self._reply_to
        msg.set_content(content.text)
        if content.html is not None:
            msg.add_alternative(content.html, subtype="html")
        return raw_headers(content.headers) + msg.as_bytes()

    def _take_idle(self) -> _Connection | None:
        now = self._clock.now()
        while self._idle:
            conn = self._idle.pop()
            if conn.smtp.is_connected and now - conn.last_used <= self._idle_timeout_s:
                return conn
            conn.smtp.close()
        return None

    def _put_idle(self, conn: _Connection) -> None:
        if conn.generation != self._generation or not conn.smtp.is_connected:
            conn.smtp.close()  # close() ran while this send was in flight
            return
        conn.last_used = self._clock.now()
        self._idle.append(conn)

    async def _connect(self, request: SendRequest) -> _Connection | Outcome:
        smtp = aiosmtplib.SMTP(
            hostname=self._host, port=self._port, use_tls=self._security == "tls",
            start_tls=self._security == "starttls", tls_context=self._tls_context,
            timeout=self._timeout_s, local_hostname=self._local_hostname,
            username=self._username if self._password else None,
            password=self._password.get_secret_value() if self._password else None)
        try:
            await smtp.connect()
        except aiosmtplib.SMTPResponseException as exc:
            smtp.close()
            outcome = reply_outcome(exc.code, self._redact(exc.message, request), "connect")
            # A refusal before MAIL is about the server or the settings, never the message.
            return outcome if not isinstance(outcome, Permanent) else Transient(
                reason=outcome.reason)
        except (aiosmtplib.SMTPException, OSError) as exc:
            smtp.close()
            return Transient(reason=f"not connected: {self._redact(describe(exc), request)}")
        return _Connection(smtp=smtp, generation=self._generation, last_used=self._clock.now())

    async def _transact(self, conn: _Connection, request: SendRequest, data: bytes, *,
                        utf8: bool) -> _Result:
        smtp = conn.smtp
        stage: Stage = "MAIL"
        try:
            options: list[str] = []
            if utf8:
                if smtp.is_ehlo_or_helo_needed:
                    await smtp.ehlo()  # to learn the extensions before MAIL
                if not smtp.supports_extension("smtputf8"):
                    return _Result(Permanent(
                        reason="non-ASCII address and the server has no SMTPUTF8"),
                        keep=True)
                options.append("SMTPUTF8")
            encoding = "utf-8" if utf8 else "ascii"
            await smtp.mail(self._envelope_from, options=options, encoding=encoding)
            stage = "RCPT"
            await smtp.rcpt(request.to, encoding=encoding)
            stage = "DATA"
            reply = await smtp.data(data, timeout=self._data_timeout_s)
        except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPTimeoutError, OSError) as exc:
            text = self._redact(describe(exc), request)
            if stage == "DATA":
                return _Result(Uncertain(reason=f"no answer after DATA: {text}"), keep=False)
            return _Result(Transient(reason=f"connection lost at {stage}: {text}"), keep=False,
                           stale=stage == "MAIL" and isinstance(exc, ConnectionError))
        except aiosmtplib.SMTPResponseException as exc:
            outcome = reply_outcome(exc.code, self._redact(exc.message, request), stage)
            return _Result(outcome, keep=exc.code != 421 and await self._reset(smtp))
        except aiosmtplib.SMTPException as exc:
            text = self._redact(describe(exc), request)
            if stage == "DATA":
                return _Result(Uncertain(reason=f"no answer after DATA: {text}"), keep=False)
            return _Result(Transient(reason=f"failed at {stage}: {text}"), keep=False)
        found = _QUEUE_ID.search(reply.message)
        receipt = found.group(1) if found else message_id(request.key, self._domain)
        return _Result(Accepted(receipt=receipt), keep=True)

    async def _reset(self, smtp: aiosmtplib.SMTP) -> bool:
        """RSET after a refused transaction; True if the connection is clean for the next."""
        if not smtp.is_connected:
            return False
        try:
            await smtp.rset()
        except (aiosmtplib.SMTPException, OSError):
            return False
        return True

    def _redact(self, text: str, request: SendRequest) -> str:
        secrets = (self._password.get_secret_value(),) if self._password else ()
        return redact(text, address=request.to, secrets=secrets)


def _tls_context(validate_certs: bool, ca_file: str | None) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError("provider.ca_file", f"{ca_file} cannot be read as CA "
                                                     f"certificates: {exc}") from None
    if not validate_certs:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def raw_headers(headers: Mapping[str, str]) -> bytes:
    """``headers`` as header lines, ahead of the message's own: a value holding URLs
    must reach the receiver as written, where ``email``'s policy would fold a long one
    into RFC 2047 encoded words. A list (``<a>, <b>``) breaks after each comma, and a
    line still over RFC 5322's 998 characters is folded inside its URL's angle
    brackets, where RFC 2369 has whitespace ignored (a server refuses a longer line:
    ``500 Line too long``). A name or value that is not printable ASCII on one line is
    left out (the gate never makes one)."""
    lines = []
    for name, value in headers.items():
        if not (_printable(name) and ":" not in name and " " not in name
                and _printable(value)):
            continue
        items = value.split(", <")
        for index, item in enumerate(items):
            line = ((f"{name}: " if index == 0 else " <") + item
                    + ("," if index < len(items) - 1 else ""))
            while len(line) > MAX_LINE:
                lines.append(line[:MAX_LINE])
                line = " " + line[MAX_LINE:]
            lines.append(line)
    return "".join(line + "\r\n" for line in lines).encode("ascii")


MAX_LINE = 998
"""The longest header line RFC 5322 allows (2.1.1), without its CRLF."""


def _printable(text: str) -> bool:
    return bool(text) and text.isascii() and all(" " <= c <= "~" for c in text)
