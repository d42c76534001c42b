"""What every dialect of the sandbox shares: the settings, the state beside the core
(what was sent to whom, the webhooks), and acting out the core's decision on a request
(hang, wait, drop the reply, or answer)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import yarl
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec

from tidings.sandbox.core import AnswerKind, SandboxAnswer, SandboxCore

log = logging.getLogger("tidings.sandbox.dialects")

KEY_FIELD = "tidings_key"


@dataclass(frozen=True, kw_only=True)
class DialectSettings:
    """Which dialects to serve and where their webhooks go."""

    dialects: tuple[str, ...] = ()
    postmark_webhook: str | None = None
    """Where Postmark's Delivery records go (``http://user:pass@host/v1/webhooks/postmark``)."""
    twilio_auth_token: str | None = None
    """Signs Twilio's status callbacks; none: no callbacks."""
    sendgrid_webhook: str | None = None
    """Where SendGrid's event batches go (``http://host/v1/webhooks/sendgrid``)."""
    sendgrid_signing_key: ec.EllipticCurvePrivateKey | None = None
    """Signs SendGrid's event batches; none: no events."""
    webhook_delay_s: float = 0.2


@dataclass(frozen=True, kw_only=True)
class Sent:
    """A message the sandbox accepted through a dialect."""

    key: str
    receipt: str
    channel: str
    to: str
    at: float
    sender: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


class DialectState:
    """What the dialect routes keep beside the core: each accepted message's recipient
    and time (the core keeps key → receipt only), and the webhooks they sent."""

    def __init__(self, core: SandboxCore, settings: DialectSettings,
                 now: Callable[[], float]) -> None:
        self.core = core
        self.settings = settings
        self.now = now
        self.sent: list[Sent] = []
        self.by_digest: dict[str, str] = {}
        self.webhooks = {"sent": 0, "failed": 0}
        # The size of every batch request received, in order (a witness of batching).
        self.batches: list[int] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    def record(self, sent: Sent) -> None:
        self.sent.append(sent)
        self.by_digest[hashlib.sha256(sent.key.encode()).hexdigest()] = sent.key

    def later(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` after the webhook delay, in the background."""
        async def run() -> None:
            await asyncio.sleep(self.settings.webhook_delay_s)
            try:
                await work()
                self.webhooks["sent"] += 1
            except Exception as exc:  # a webhook that fails is counted, never fatal
                self.webhooks["failed"] += 1
                log.warning("webhook not delivered: %s", exc)

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def post(self, url: str, *, data: bytes, headers: dict[str, str]) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        parts = urlsplit(url)
        if parts.username:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            headers = {**headers, "Authorization": "Basic " + base64.b64encode(pair).decode()}
            url = url.replace(f"{parts.username}:{parts.password}@", "", 1)
        # Posted to the URL exactly as given (Twilio signs it so): no re-encoding.
        async with self._session.post(yarl.URL(url, encoded=True), data=data,
                                      headers=headers) as answer:
            if answer.status >= 300:
                raise aiohttp.ClientResponseError(answer.request_info, (), status=answer.status,
                                                  message=f"webhook answered {answer.status}")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()


STATE_KEY = web.AppKey("sandbox_dialects", DialectState)
Act = Callable[[SandboxAnswer], web.StreamResponse]


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(payload).encode(),
                        content_type="application/json", headers=headers or {})


async def act(request: web.Request, answer: SandboxAnswer, reply: Act) -> web.StreamResponse:
    """Act out the core's decision: hang, wait, drop the reply, or answer."""
    if answer.kind is AnswerKind.TIMEOUT:
        await asyncio.sleep(request.app[STATE_KEY].core.config.hang_s)
        return drop(request)
    if answer.latency_s > 0:
        await asyncio.sleep(answer.latency_s)
    if answer.status is None:
        return drop(request)  # lost response: accepted, the reply never leaves
    return reply(answer)


def drop(request: web.Request) -> web.StreamResponse:
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)


def accepted(answer: SandboxAnswer) -> bool:
    return answer.receipt is not None and answer.kind in (
        AnswerKind.ACCEPTED, AnswerKind.LOST_RESPONSE)
