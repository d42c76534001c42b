"""Each adapter asks its provider's read API the way the provider documents it, and
says "unknown" rather than guess."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx
import pytest

from support.fake_http_providers import (
    FakePostmark,
    FakeSendGrid,
    FakeTwilio,
    Scenario,
    mock_transport,
)
from tidings.core.clock import FakeClock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import LookupHint, LookupStatus
from tidings.providers.postmark import PostmarkProvider
from tidings.providers.sendgrid import SendGridProvider
from tidings.providers.twilio import TwilioProvider, callback_for

T0 = 1_780_000_000.0
BASE = "https://provider.test"
PHONE = "+15557654321"
CONTENT = Content(subject="Shipped", text="Your order shipped.")


def request(key: str, to: str) -> SendRequest:
    return SendRequest(key=key, channel="c", to=to, template="t/v1", data={},
                       recipient_id="r1", content=CONTENT)


@pytest.fixture
async def http() -> AsyncIterator[list[httpx.AsyncClient]]:
    clients: list[httpx.AsyncClient] = []
    yield clients
    for client in clients:
        await client.aclose()


def client_for(clients: list[httpx.AsyncClient], api: object) -> httpx.AsyncClient:
    made = httpx.AsyncClient(transport=mock_transport(api))  # type: ignore[arg-type]
    clients.append(made)
    return made


async def test_postmark_searches_outbound_messages_by_metadata(
        http: list[httpx.AsyncClient]) -> None:
    clock = FakeClock(T0)
    api = FakePostmark(clock.now)
    provider = PostmarkProvider(server_token="pm-1", from_address="news@tidings.test",
                                channel="email", base_url=BASE, client=client_for(http, api),
                                clock=clock)
    long_key = "k" * 100
    for key in ("order-1", long_key):
        await provider.send(request(key, "ada@example.com"))

    found = [await provider.lookup(k) for k in ("order-1", long_key, "never-sent")]

    assert [f.status for f in found] == [LookupStatus.ACCEPTED, LookupStatus.ACCEPTED,
                                         LookupStatus.NOT_FOUND]
    first, hashed = api.lookups[0].params(), api.lookups[1].params()
    assert api.lookups[0].path == "/messages/outbound"
    assert (first["count"], first["offset"], first["metadata_tidings_key"]) == (
        "50", "0", "order-1")
    assert hashed["metadata_tidings_key_sha256"] == hashlib.sha256(long_key.encode()).hexdigest()
    assert api.lookups[0].headers["x-postmark-server-token"] == "pm-1"


async def test_sendgrid_queries_email_activity_by_unique_args(
        http: list[httpx.AsyncClient]) -> None:
    clock = FakeClock(T0)
    api = FakeSendGrid(clock.now)
    provider = SendGridProvider(api_key="SG.1", from_address="news@tidings.test",
                                channel="email", base_url=BASE, client=client_for(http, api),
                                clock=clock)
    await provider.send(request("order-1", "ada@example.com"))

    found = await provider.lookup("order-1")
    quoted = await provider.lookup('order-"1"')

    assert found.status is LookupStatus.ACCEPTED
    assert found.receipt == api.receipt_of("order-1")  # the X-Message-Id, suffix cut
    assert api.lookups[0].params()["query"] == "unique_args['tidings_key']=\"order-1\""
    assert api.lookups[0].headers["authorization"] == "Bearer SG.1"
    assert quoted.status is LookupStatus.UNKNOWN and len(api.lookups) == 1


async def test_twilio_finds_the_one_message_to_the_recipient_in_the_window(
        http: list[httpx.AsyncClient]) -> None:
    clock = FakeClock(T0)
    api = FakeTwilio(clock.now)
    provider = TwilioProvider(account_sid=FakeTwilio.account_sid, auth_token="tw-1",
                              channel="sms", from_number="+15550001111", base_url=BASE,
                              client=client_for(http, api), clock=clock)
    api.scenario = Scenario.ACCEPT_THEN_DROP
    await provider.send(request("order-1", PHONE))
    clock.advance(3600)
    window = LookupHint(to=PHONE, sent_after=T0 - 60, sent_before=T0 + 60)
    later = LookupHint(to=PHONE, sent_after=T0 + 3540, sent_before=T0 + 3660)

    found = await provider.lookup("order-1", window)
    none_then = await provider.lookup("order-1", later)
    without_hint = await provider.lookup("order-1")

    assert (found.status, found.receipt) == (LookupStatus.ACCEPTED, api.receipt_of("order-1"))
    assert api.lookups[0].params() == {"To": PHONE, "From": "+15550001111", "PageSize": "50"}
    assert none_then.status is LookupStatus.NOT_FOUND
    assert without_hint.status is LookupStatus.UNKNOWN


async def test_twilio_cannot_tell_two_messages_in_the_window_apart(
        http: list[httpx.AsyncClient]) -> None:
    clock = FakeClock(T0)
    api = FakeTwilio(clock.now)
    provider = TwilioProvider(account_sid=FakeTwilio.account_sid, auth_token="tw-1",
                              channel="sms", from_number="+15550001111", base_url=BASE,
                              client=client_for(http, api), clock=clock)
    await provider.send(request("order-1", PHONE))
    await provider.send(request("order-2", PHONE))

    found = await provider.lookup("order-1", LookupHint(to=PHONE, sent_after=T0 - 60,
                                                        sent_before=T0 + 60))

    assert found.status is LookupStatus.UNKNOWN and "cannot tell" in (found.detail or "")
    assert PHONE not in (found.detail or "")


def test_the_status_callback_names_the_key_in_its_query() -> None:
    assert callback_for("https://hooks.test/v1/webhooks/twilio", "a/b c") == (
        "https://hooks.test/v1/webhooks/twilio?tidings_key=a%2Fb+c")
    assert callback_for("https://hooks.test/t?x=1", "k") == "https://hooks.test/t?x=1&tidings_key=k"
