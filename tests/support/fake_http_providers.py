"""The provider side of the HTTP adapters' tests: each API's shape, answering on cue.

A ``FakeApi`` is one provider's HTTP API (Twilio, SendGrid, Postmark, or the JSON
shape the generic adapter is configured for in the tests). A test sets its
``scenario``; the fake records every request it receives and answers the way that
provider does: its success body and headers, its error JSON (echoing the recipient,
as real providers do), a 429 with Retry-After, or no answer at all. The same fake
serves over ``httpx.MockTransport`` (``mock_transport``) or a real local aiohttp
server (``serve_api``), so both paths are held to the same expectations.

Each fake also serves its provider's read API the way the provider documents it
(Postmark's outbound message search by metadata, SendGrid's Email Activity by
unique_args, Twilio's Messages list by recipient, the generic mailer's message by
key), over what it accepted (``messages``); ``lookup_scenario`` makes the read API
fail (TRY_LATER, RATE_LIMITED_SECONDS, DROP_AFTER_SEND) and ``failed`` names keys the
provider reports failed. ``ACCEPT_THEN_DROP`` accepts a send and drops its answer.
"""

from __future__ import annotations

import asyncio
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, Literal
from urllib.parse import parse_qs, unquote

import httpx
from aiohttp import web

from tidings.testing import RETRY_AFTER_S, Scenario

# The contract kit's own scenarios and Retry-After: the sides here are the ones the kit
# is run against for every built-in adapter (tests/conformance/test_provider_kit.py).
__all__ = ["RETRY_AFTER_S", "Scenario"]


@dataclass(frozen=True)
class Received:
    """One request as the provider saw it (header names lower-cased)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    query: str = ""

    def params(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.query, keep_blank_values=True).items()}

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode(), keep_blank_values=True).items()}


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    fate: Literal["answer", "drop", "hang"] = "answer"

    @classmethod
    def of_json(cls, status: int, obj: object, **headers: str) -> Reply:
        return cls(status, json.dumps(obj).encode(),
                   {"Content-Type": "application/json", **headers})


class FakeApi(ABC):
    """One provider API; subclasses give its shape."""

    name = "fake"
    has_retry_after = True
    has_request_id = True
    has_idempotency = True
    path = "/"

    def __init__(self, now: Callable[[], float]) -> None:
        self.scenario = Scenario.ACCEPT
        self.lookup_scenario = Scenario.ACCEPT
        self.received: list[Received] = []
        self.receipts: dict[str, str] = {}
        self.messages: list[Stored] = []
        self.failed: set[str] = set()
        self.request_ids: list[str] = []
        self._now = now
        self._seq = 0

    @property
    def lookups(self) -> list[Received]:
        """The read-API requests this provider received."""
        return [r for r in self.received if r.method == "GET"]

    def lookup(self, received: Received) -> Reply:
        """This provider's read API (404 where it has none)."""
        return Reply.of_json(404, {"message": f"no route {received.path}"})

    def _store(self, received: Received) -> str:
        key = self.key_of(received)
        assert key is not None, "the adapter sent no delivery key"
        receipt = self.receipts.setdefault(key, f"{self.name}-msg-{self._seq}")
        self.messages.append(Stored(key=key, receipt=receipt, to=self.to_of(received),
                                    at=self._now(), received=received))
        return receipt

    def status_of(self, key: str, ok: str, failed: str) -> str:
        return failed if key in self.failed else ok

    # -- what the adapter sent

    @property
    def keys_received(self) -> list[str | None]:
        """The delivery key of every request that reached this API's route, in order."""
        return [self.key_of(r) for r in self.received if r.path == self.path]

    @property
    def idempotency_keys(self) -> list[str]:
        keys = (self.idempotency_key_of(r) for r in self.received if r.path == self.path)
        return [k for k in keys if k is not None]

    def receipt_of(self, key: str) -> str | None:
        return self.receipts.get(key)

    @abstractmethod
    def key_of(self, received: Received) -> str | None:
        """The delivery key, wherever this API carries it."""

    def idempotency_key_of(self, received: Received) -> str | None:
        """The delivery key as this API's idempotency key (None: the API has none)."""
        return None

    @abstractmethod
    def to_of(self, received: Received) -> str:
        """The recipient the adapter addressed."""

    # -- how this API answers

    @abstractmethod
    def accepted(self, receipt: str, request_id: str, received: Received) -> Reply:
        """This API's success answer."""

    @abstractmethod
    def rate_limited(self, retry_after: str, request_id: str) -> Reply:
        """A 429 carrying ``retry_after`` as sent."""

    @abstractmethod
    def unavailable(self, request_id: str) -> Reply:
        """A "try again later" answer."""

    @abstractmethod
    def refused(self, to: str, request_id: str) -> Reply:
        """A permanent refusal that names the recipient, as real providers do."""

    def each_of_batch(self, received: Received, *, whole_statuses: tuple[int, ...]
                      ) -> list[Reply] | Reply:
        """A batch request's items, each answered as a send of its own on the same cue
        (``FakeApi.handle``); or the one reply that is the whole request's: a dropped or
        hung answer, or one of ``whole_statuses``."""
        replies = [FakeApi.handle(self, Received(
            method="POST", path=self.path, headers=received.headers,
            body=json.dumps(item).encode())) for item in received.json()]
        whole = next((r for r in replies
                      if r.fate != "answer" or r.status in whole_statuses), None)
        return whole if whole is not None else replies

    def handle(self, received: Received) -> Reply:
        self.received.append(received)
        if received.method == "GET":
            match self.lookup_scenario:
                case Scenario.TRY_LATER:
                    return self.unavailable("RQ-lookup")
                case Scenario.RATE_LIMITED_SECONDS:
                    return self.rate_limited(str(RETRY_AFTER_S), "RQ-lookup")
                case Scenario.DROP_AFTER_SEND:
                    return Reply(fate="drop")
            return self.lookup(received)
        if received.path != self.path:
            return Reply.of_json(404, {"message": f"no route {received.path}"})
        self._seq += 1
        request_id = f"RQ{self._seq:06d}"
        if self.has_request_id and self.scenario not in (Scenario.DROP_AFTER_SEND,
                                                         Scenario.HANG_AFTER_SEND):
            self.request_ids.append(request_id)
        match self.scenario:
            case Scenario.ACCEPT:
                return self.accepted(self._store(received), request_id, received)
            case Scenario.ACCEPT_THEN_DROP:
                self._store(received)
                return Reply(fate="drop")
            case Scenario.RATE_LIMITED_SECONDS:
                return self.rate_limited(str(RETRY_AFTER_S), request_id)
            case Scenario.RATE_LIMITED_DATE:
                return self.rate_limited(formatdate(self._now() + RETRY_AFTER_S, usegmt=True),
                                         request_id)
            case Scenario.TRY_LATER:
                return self.unavailable(request_id)
            case Scenario.REFUSE:
                return self.refused(self.to_of(received), request_id)
            case Scenario.DROP_AFTER_SEND:
                return Reply(fate="drop")
            case Scenario.HANG_AFTER_SEND:
                return Reply(fate="hang")
        raise AssertionError(f"the provider side cannot act out {self.scenario}")


@dataclass(frozen=True)
class Stored:
    """A message the provider accepted."""

    key: str
    receipt: str
    to: str
    at: float
    received: Received


class FakeTwilio(FakeApi):
    name = "twilio"
    has_idempotency = True
    account_sid = "AC0123456789abcdef0123456789abcdef"
    path = f"/2010-04-01/Accounts/{account_sid}/Messages.json"

    def key_of(self, received: Received) -> str | None:
        return self.idempotency_key_of(received)

    def idempotency_key_of(self, received: Received) -> str | None:
        value = received.headers.get("i-twilio-idempotency-token")
        return unquote(value) if value is not None else None

    def to_of(self, received: Received) -> str:
        return received.form()["To"]

    def accepted(self, receipt: str, request_id: str, received: Received) -> Reply:
        form = received.form()
        return Reply.of_json(201, {"sid": receipt, "status": "queued", "to": form["To"],
                                   "body": form["Body"], "error_code": None},
                             **{"Twilio-Request-Id": request_id})

    def rate_limited(self, retry_after: str, request_id: str) -> Reply:
        return Reply.of_json(429, {"code": 20429, "message": "Too Many Requests", "status": 429},
                             **{"Twilio-Request-Id": request_id, "Retry-After": retry_after})

    def unavailable(self, request_id: str) -> Reply:
        return Reply.of_json(503, {"code": 20503, "message": "Service unavailable",
                                   "status": 503}, **{"Twilio-Request-Id": request_id})

    def refused(self, to: str, request_id: str) -> Reply:
        return Reply.of_json(400, {
            "code": 21211, "message": f"The 'To' number {to} is not a valid phone number.",
            "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400,
        }, **{"Twilio-Request-Id": request_id})

    def lookup(self, received: Received) -> Reply:
        """The Messages list: filtered by To (and From), newest first, PageSize a page."""
        if received.path != self.path:
            return super().lookup(received)
        params = received.params()
        size = int(params.get("PageSize", "50"))
        found = [m for m in reversed(self.messages) if m.to == params.get("To")
                 and ("From" not in params
                      or m.received.form().get("From") == params["From"])][:size]
        return Reply.of_json(200, {"messages": [{
            "sid": m.receipt, "to": m.to, "status": self.status_of(m.key, "sent", "failed"),
            "date_created": formatdate(m.at, usegmt=True), "date_sent": None,
            "error_code": 30003 if m.key in self.failed else None} for m in found],
            "page_size": size})


class FakeSendGrid(FakeApi):
    name = "sendgrid"
    has_request_id = False
    has_idempotency = False
    path = "/v3/mail/send"

    def key_of(self, received: Received) -> str | None:
        key = received.json().get("custom_args", {}).get("tidings_key")
        return key if isinstance(key, str) else None

    def to_of(self, received: Received) -> str:
        return str(received.json()["personalizations"][0]["to"][0]["email"])

    def accepted(self, receipt: str, request_id: str, received: Received) -> Reply:
        return Reply(202, b"", {"X-Message-Id": receipt})

    def rate_limited(self, retry_after: str, request_id: str) -> Reply:
        return Reply.of_json(429, {"errors": [{"message": "too many requests", "field": None}]},
                             **{"Retry-After": retry_after})

    def unavailable(self, request_id: str) -> Reply:
        return Reply.of_json(500, {"errors": [{"message": "internal error", "field": None}]})

    def refused(self, to: str, request_id: str) -> Reply:
        return Reply.of_json(400, {"errors": [{
            "message": f"Does not contain a valid address: {to}",
            "field": "personalizations.0.to.0.email", "help": None}]})

    def lookup(self, received: Received) -> Reply:
        """Email Activity: ``query=unique_args['tidings_key']="…"``."""
        if received.path != "/v3/messages":
            return super().lookup(received)
        match = re.fullmatch(r"unique_args\['tidings_key'\]=\"(.*)\"",
                             received.params().get("query", ""))
        if match is None:
            return Reply.of_json(400, {"errors": [{"message": "invalid query"}]})
        found = [m for m in self.messages if m.key == match.group(1)]
        return Reply.of_json(200, {"messages": [{
            "msg_id": f"{m.receipt}.filter0001.16648.5515E0B88.0", "to_email": m.to,
            "status": self.status_of(m.key, "delivered", "not_delivered"),
            "opens_count": 0, "clicks_count": 0} for m in found[:1]]})


class FakeResend(FakeApi):
    name = "resend"
    has_request_id = False
    path = "/emails"
    batch_path = "/emails/batch"

    def handle(self, received: Received) -> Reply:
        """``POST /emails/batch`` too: each email is seen as a send of its own (on the
        same cue), answered 200 with the ids of the accepted ones and the index of each
        refused one (permissive validation); a 429, a 5xx, a dropped or hung answer is
        the whole request's, as Resend's are."""
        if received.method != "POST" or received.path != self.batch_path:
            return super().handle(received)
        replies = self.each_of_batch(received, whole_statuses=(429, 500))
        if isinstance(replies, Reply):
            return replies
        data: list[object] = []
        errors: list[object] = []
        for index, reply in enumerate(replies):
            body = json.loads(reply.body)
            if reply.status == 200:
                data.append(body)
            else:
                errors.append({"index": index, "message": body["message"]})
        return Reply.of_json(200, {"data": data, "errors": errors})

    def key_of(self, received: Received) -> str | None:
        key = received.json().get("headers", {}).get("X-Tidings-Key")
        return unquote(key) if isinstance(key, str) else None

    def idempotency_key_of(self, received: Received) -> str | None:
        value = received.headers.get("idempotency-key")
        return unquote(value) if value is not None else None

    def to_of(self, received: Received) -> str:
        return str(received.json()["to"][0])

    def accepted(self, receipt: str, request_id: str, received: Received) -> Reply:
        return Reply.of_json(200, {"id": receipt})

    def rate_limited(self, retry_after: str, request_id: str) -> Reply:
        return Reply.of_json(429, {"statusCode": 429, "name": "rate_limit_exceeded",
                                   "message": "Too many requests. You can only make 2 "
                                   "requests per second."}, **{"retry-after": retry_after})

    def unavailable(self, request_id: str) -> Reply:
        return Reply.of_json(500, {"statusCode": 500, "name": "application_error",
                                   "message": "An unexpected error occurred."})

    def refused(self, to: str, request_id: str) -> Reply:
        return Reply.of_json(422, {"statusCode": 422, "name": "validation_error",
                                   "message": f"Invalid `to` field: {to}."})


class FakePostmark(FakeApi):
    name = "postmark"
    has_request_id = False
    has_idempotency = False
    path = "/email"
    batch_path = "/email/batch"

    def handle(self, received: Received) -> Reply:
        """``POST /email/batch`` too: each message is seen as a send of its own (on the
        same cue), answered 200 with a result per message in order; a 429, a 503, a
        dropped or hung answer is the whole request's, as Postmark's are."""
        if received.method != "POST" or received.path != self.batch_path:
            return super().handle(received)
        replies = self.each_of_batch(received, whole_statuses=(429, 503))
        if isinstance(replies, Reply):
            return replies
        return Reply.of_json(200, [json.loads(r.body) for r in replies])

    def key_of(self, received: Received) -> str | None:
        body = received.json()
        key = body.get("Metadata", {}).get("tidings_key")
        if key is None:  # a long key: its digest is the metadata, the key a header
            key = next((h.get("Value") for h in body.get("Headers", [])
                        if h.get("Name") == "X-Tidings-Key"), None)
        return key if isinstance(key, str) else None

    def to_of(self, received: Received) -> str:
        return str(received.json()["To"])

    def accepted(self, receipt: str, request_id: str, received: Received) -> Reply:
        return Reply.of_json(200, {"To": received.json()["To"],
                                   "SubmittedAt": "2026-08-14T09:00:00.0000000Z",
                                   "MessageID": receipt, "ErrorCode": 0, "Message": "OK"})

    def rate_limited(self, retry_after: str, request_id: str) -> Reply:
        return Reply.of_json(429, {"ErrorCode": 429, "Message": "Rate limit exceeded"},
                             **{"Retry-After": retry_after})

    def unavailable(self, request_id: str) -> Reply:
        return Reply(503, b"<html>Service Unavailable</html>", {"Content-Type": "text/html"})

    def lookup(self, received: Received) -> Reply:
        """Outbound message search: ``metadata_<name>=<value>`` filters on Metadata."""
        if received.path != "/messages/outbound":
            return super().lookup(received)
        params = received.params()
        if "count" not in params or "offset" not in params:
            return Reply.of_json(422, {"ErrorCode": 600, "Message": "count and offset"})
        wanted = {k.removeprefix("metadata_"): v for k, v in params.items()
                  if k.startswith("metadata_")}
        found = [m for m in self.messages
                 if all(m.received.json().get("Metadata", {}).get(k) == v
                        for k, v in wanted.items())]
        return Reply.of_json(200, {"TotalCount": len(found), "Messages": [{
            "MessageID": m.receipt, "Recipients": [m.to], "Status": "Sent",
            "Metadata": m.received.json().get("Metadata", {})} for m in found]})

    def refused(self, to: str, request_id: str) -> Reply:
        return Reply.of_json(422, {"ErrorCode": 406, "Message": (
            "You tried to send to recipient(s) that have been marked as inactive. Found "
            f"inactive addresses: {to}. Inactive recipients are ones that have generated a "
            "hard bounce, a spam complaint, or a manual suppression.")})


class FakeJsonMailer(FakeApi):
    """The API the generic adapter is configured for in the tests (a Resend-like shape)."""

    name = "mailer"
    has_idempotency = True
    path = "/emails"

    def key_of(self, received: Received) -> str | None:
        key = received.json().get("tags", {}).get("key")
        return key if isinstance(key, str) else None

    def idempotency_key_of(self, received: Received) -> str | None:
        value = received.headers.get("idempotency-key")
        return unquote(value) if value is not None else None

    def to_of(self, received: Received) -> str:
        return str(received.json()["to"])

    def accepted(self, receipt: str, request_id: str, received: Received) -> Reply:
        return Reply.of_json(200, {"data": {"id": receipt}}, **{"X-Request-Id": request_id})

    def rate_limited(self, retry_after: str, request_id: str) -> Reply:
        return Reply.of_json(429, {"message": "slow down"},
                             **{"X-Request-Id": request_id, "Retry-After": retry_after})

    def unavailable(self, request_id: str) -> Reply:
        return Reply.of_json(503, {"message": "upstream unavailable"},
                             **{"X-Request-Id": request_id})

    def refused(self, to: str, request_id: str) -> Reply:
        return Reply.of_json(422, {"message": f"{to} is not a valid recipient"},
                             **{"X-Request-Id": request_id})

    def lookup(self, received: Received) -> Reply:
        """``GET /emails/by-ref/{key}``: the message, or 404."""
        prefix = "/emails/by-ref/"
        if not received.path.startswith(prefix):
            return super().lookup(received)
        key = unquote(received.path.removeprefix(prefix))
        for m in self.messages:
            if m.key == key:
                return Reply.of_json(200, {"data": {
                    "id": m.receipt, "status": self.status_of(key, "sent", "failed")}})
        return Reply.of_json(404, {"message": "not found"})


# ---------------------------------------------------------------- serving a fake


def _received_from_httpx(request: httpx.Request) -> Received:
    return Received(request.method, request.url.path,
                    {k.lower(): v for k, v in request.headers.items()}, request.content,
                    request.url.query.decode())


def mock_transport(api: FakeApi) -> httpx.MockTransport:
    """``api`` behind ``httpx.MockTransport``; no answer becomes the httpx error a real
    transport raises (dropped: RemoteProtocolError, hung: ReadTimeout)."""

    def handler(request: httpx.Request) -> httpx.Response:
        if api.scenario is Scenario.UNREACHABLE:
            raise httpx.ConnectError("All connection attempts failed", request=request)
        reply = api.handle(_received_from_httpx(request))
        if reply.fate == "drop":
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.",
                                            request=request)
        if reply.fate == "hang":
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(reply.status, headers=dict(reply.headers), content=reply.body)

    return httpx.MockTransport(handler)


@dataclass
class LiveApi:
    """``api`` served by a real aiohttp server on 127.0.0.1."""

    api: FakeApi
    runner: web.AppRunner
    url: str

    async def close(self) -> None:
        await self.runner.cleanup()


async def serve_api(api: FakeApi) -> LiveApi:
    async def handle(request: web.Request) -> web.StreamResponse:
        reply = api.handle(Received(request.method, request.path,
                                    {k.lower(): v for k, v in request.headers.items()},
                                    await request.read(), request.query_string))
        if reply.fate == "hang":
            # Cancelled when the client gives up (handler_cancellation below).
            await asyncio.Event().wait()
        if reply.fate in ("drop", "hang"):
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=499)
        return web.Response(status=reply.status, body=reply.body, headers=dict(reply.headers))

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return LiveApi(api, runner, f"http://127.0.0.1:{port}")
