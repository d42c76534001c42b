"""One-click unsubscribe headers (RFC 8058): which email the send-time gate gives them,
the settings that ask for them, and every email adapter carrying them as written."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from support.smtp_side import LocalSmtp, SmtpSide, serve_smtp
from tidings.config.settings import Settings
from tidings.config.unsubscribe import UnsubscribeSettings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import Content, IntentDraft, SendRequest
from tidings.core.unsubscribe import Subject, verify
from tidings.delivery.compose import Composer, Ready
from tidings.delivery.templates import TemplateSet
from tidings.delivery.unsubscribe import (
    LIST_UNSUBSCRIBE,
    LIST_UNSUBSCRIBE_POST,
    ONE_CLICK,
    UnsubscribeLinks,
    links_from,
)
from tidings.providers.http import HttpJsonProvider
from tidings.providers.postmark import PostmarkProvider
from tidings.providers.sendgrid import SendGridProvider
from tidings.providers.smtp import SmtpProvider, raw_headers
from tidings.runtime import check_settings
from tidings.stores.base import ClaimKind
from tidings.stores.sqlite import SqliteStore

NOW = 1_786_698_005.0
SECRET = b"unsubscribe-secret"
BASE = "https://notify.example.com"
LINKS = UnsubscribeLinks(base_url=BASE, secrets=(SECRET,), mailto="unsubscribe@example.com",
                         skip_campaigns=frozenset({"receipts"}),
                         notify_templates=frozenset({"welcome"}))
ADA = Subject(recipient_id="cust_1042", address="ada@example.com", channel="email",
              campaign="weekly-digest")
TEMPLATES = TemplateSet.from_mapping({
    name: {"subject.txt": "Hi", "body.txt": "Hello {{ recipient_id }}.", "sms.txt": "Hi"}
    for name in ("weekly-digest/v3", "welcome/v2", "receipt/v1")})


def url_in(headers: dict[str, str] | Any) -> str:
    value = str(headers[LIST_UNSUBSCRIBE])
    return value.split(">")[0].removeprefix("<")


def test_the_two_headers_carry_a_signed_link_and_the_mailto() -> None:
    headers = LINKS.headers(ADA)
    assert headers[LIST_UNSUBSCRIBE_POST] == ONE_CLICK == "List-Unsubscribe=One-Click"
    link, mailto = headers[LIST_UNSUBSCRIBE].split(", ")
    assert link.startswith(f"<{BASE}/v1/unsubscribe/") and link.endswith(">")
    assert verify(url_in(headers).rsplit("/", 1)[1], [SECRET]) == ADA
    assert mailto.startswith("<mailto:unsubscribe@example.com?subject=unsubscribe%20")
    assert all(v.isascii() and "\n" not in v for v in headers.values())
    no_mailto = UnsubscribeLinks(base_url=BASE + "/", secrets=(SECRET,))
    assert no_mailto.headers(ADA)[LIST_UNSUBSCRIBE].count("<") == 1
    assert "//v1" not in no_mailto.headers(ADA)[LIST_UNSUBSCRIBE]


def test_settings_ask_for_links_and_need_their_secret() -> None:
    off = Settings.parse({})
    assert links_from(off.unsubscribe, {}) is None
    check_settings(off)
    on = Settings.parse({"unsubscribe": {"base_url": BASE, "secret_env": "UNSUB_SECRET"}})
    with pytest.raises(ConfigurationError) as refused:
        links_from(on.unsubscribe, {"UNSUB_SECRET": " , "})
    assert refused.value.field == "unsubscribe.secret_env"
    assert "$UNSUB_SECRET holds no secret" in refused.value.message
    links = links_from(on.unsubscribe, {"UNSUB_SECRET": "new,old"})
    assert links is not None and links.secrets == (b"new", b"old")


@pytest.mark.parametrize(("section", "field"), [
    ({"base_url": "http://notify.example.com"}, "unsubscribe.base_url"),
    ({"base_url": "https://notify.example.com/?a=1"}, "unsubscribe.base_url"),
    ({"base_url": BASE, "mailto": "not an address"}, "unsubscribe.mailto"),
    ({"base_url": BASE, "nope": 1}, "unsubscribe.nope"),
])
def test_bad_unsubscribe_settings_name_their_field(section: dict[str, Any],
                                                   field: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.parse({"unsubscribe": section})
    assert refused.value.field == field


def test_plain_http_is_for_a_loopback_host_only() -> None:
    assert UnsubscribeSettings(base_url="http://127.0.0.1:8080").enabled


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(f"sqlite:///{tmp_path / 'compose.db'}")
    await opened.migrate(now=NOW)
    yield opened
    await opened.close()


async def test_campaign_email_carries_them_and_notify_only_when_its_template_is_named(
        store: SqliteStore) -> None:
    specs = [("digest", "email", "weekly-digest", "weekly-digest/v3"),
             ("receipt", "email", "receipts", "receipt/v1"),
             ("welcome", "email", None, "welcome/v2"),
             ("reset", "email", None, "receipt/v1"),
             ("text", "sms", "weekly-digest", "weekly-digest/v3")]
    drafts = [IntentDraft(key=key, channel=channel, recipient_id=f"r-{key}",
                          address="+15550100" if channel == "sms" else f"{key}@example.com",
                          template=template, due_at=NOW - 60, campaign=campaign,
                          occurrence="2026-08-14" if campaign else None)
              for key, channel, campaign, template in specs]
    await store.intent_admit(drafts, now=NOW - 60)
    claims = await store.intent_claim_many([d.key for d in drafts], owner="w", lease_s=30,
                                           now=NOW)
    assert all(c.kind is ClaimKind.CLAIMED for c in claims)
    intents = [c.intent for c in claims if c.intent is not None]
    gate = Composer(store=store, clock=FakeClock(NOW), kinds={"email": "email", "sms": "sms"},
                    templates={"email": TEMPLATES, "sms": TEMPLATES}, unsubscribe=LINKS)

    results = await gate.compose(intents, now=NOW)

    headers = {}
    for result in results:
        assert isinstance(result, Ready) and result.request.content is not None
        headers[result.key] = dict(result.request.content.headers)
    assert sorted(k for k, h in headers.items() if h) == ["digest", "welcome"]
    token = url_in(headers["digest"]).rsplit("/", 1)[1]
    assert verify(token, [SECRET]) == Subject(
        recipient_id="r-digest", address="digest@example.com", channel="email",
        campaign="weekly-digest")
    welcome = verify(url_in(headers["welcome"]).rsplit("/", 1)[1], [SECRET])
    assert welcome is not None and welcome.campaign == ""
    # Without links, no headers at all.
    plain = Composer(store=store, clock=FakeClock(NOW), kinds={"email": "email"},
                     templates={"email": TEMPLATES})
    [again] = await plain.compose(intents[:1], now=NOW)
    assert isinstance(again, Ready) and again.request.content is not None
    assert dict(again.request.content.headers) == {}


# ---------------------------------------------------------------- every adapter

HEADERS = LINKS.headers(ADA)
CONTENT = Content(subject="Digest", text="Three things.", headers=HEADERS)
KEY = "weekly-digest/2026-08-14/cust_1042/email/v3"


def request() -> SendRequest:
    return SendRequest(key=KEY, channel="email", to=ADA.address, template="weekly-digest/v3",
                       data={}, recipient_id=ADA.recipient_id, content=CONTENT)


class Recorder:
    def __init__(self, response: httpx.Response) -> None:
        self.requests: list[httpx.Request] = []
        self.response = response

    def __call__(self, sent: httpx.Request) -> httpx.Response:
        self.requests.append(sent)
        return self.response

    def body(self) -> Any:
        (sent,) = self.requests
        return json.loads(sent.content)


def client(recorder: Recorder) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(recorder))


async def test_sendgrid_carries_the_headers() -> None:
    recorder = Recorder(httpx.Response(202, headers={"X-Message-Id": "sg-1"}))
    provider = SendGridProvider(api_key=SecretStr("SG.key"), from_address="news@tidings.test",
                                channel="email", client=client(recorder), clock=FakeClock())
    await provider.send(request())
    assert recorder.body()["headers"] == {**HEADERS, "X-Tidings-Key": KEY}


async def test_postmark_carries_the_headers() -> None:
    recorder = Recorder(httpx.Response(200, json={"MessageID": "pm-1", "ErrorCode": 0}))
    provider = PostmarkProvider(server_token="pm", from_address="news@tidings.test",
                                channel="email", client=client(recorder), clock=FakeClock())
    await provider.send(request())
    assert {h["Name"]: h["Value"] for h in recorder.body()["Headers"]} == {
        **HEADERS, "X-Tidings-Key": KEY}


async def test_the_generic_http_adapter_carries_them_where_its_body_says() -> None:
    recorder = Recorder(httpx.Response(200, json={"id": "g-1"}))
    provider = HttpJsonProvider(channel="email", client=client(recorder), clock=FakeClock(),
                                url="https://mailer.test/send",
                                body={"to": "to", "text": "text", "message.headers": "headers"})
    await provider.send(request())
    assert recorder.body()["message"]["headers"] == HEADERS
    recorder.requests.clear()
    bare = SendRequest(key=KEY, channel="email", to=ADA.address, template="t/v1", data={},
                       recipient_id="r", content=Content(text="x"))
    await provider.send(bare)
    assert "message" not in recorder.body()  # no headers: the field is left out


@pytest.fixture
async def local() -> AsyncIterator[LocalSmtp]:
    served = await serve_smtp(SmtpSide())
    yield served
    await served.close()


async def test_smtp_writes_them_unfolded(local: LocalSmtp) -> None:
    provider = SmtpProvider(host="127.0.0.1", port=local.port, channel="email",
                            from_address="news@tidings.test", security="none",
                            clock=FakeClock())
    await provider.send(request())
    await provider.close()
    [message] = local.side.messages
    assert str(message[LIST_UNSUBSCRIBE]) == HEADERS[LIST_UNSUBSCRIBE]
    assert str(message[LIST_UNSUBSCRIBE_POST]) == ONE_CLICK
    assert message["X-Tidings-Key"] == KEY
    raw = raw_headers(HEADERS)
    assert b"=?" not in raw and raw.count(b"\r\n") == 3  # the list breaks after its comma
    assert raw_headers({"Bad Name": "x", "X-Ok": "line\nbreak", "X-Fine": "yes"}) == (
        b"X-Fine: yes\r\n")


def test_a_line_over_998_characters_is_folded_inside_its_angle_brackets() -> None:
    """RFC 5322 allows 998 characters a line; a longer List-Unsubscribe was refused by the
    server (500 Line too long). The list breaks after its commas, and a URL still too long
    is folded inside its brackets, where RFC 2369 has whitespace ignored."""
    url = f"{BASE}/v1/unsubscribe/" + "a" * 2_500
    value = f"<{url}>, <mailto:unsubscribe@example.com?subject=unsubscribe%20" + "b" * 1_200 + ">"
    raw = raw_headers({LIST_UNSUBSCRIBE: value, LIST_UNSUBSCRIBE_POST: ONE_CLICK}).decode()
    lines = raw.split("\r\n")
    assert max(map(len, lines)) <= 998 and lines[-1] == ""
    assert all(line.startswith(" ") for line in lines[1:-2])  # continuations
    unfolded = raw.split(f"\r\n{LIST_UNSUBSCRIBE_POST}")[0].removeprefix(f"{LIST_UNSUBSCRIBE}: ")
    urls = [u.replace("\r\n ", "") for u in re.findall(r"<([^>]*)>", unfolded)]
    assert urls == re.findall(r"<([^>]*)>", value)
