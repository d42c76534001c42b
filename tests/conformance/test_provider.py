"""The Provider conformance suite: one set of scenarios, run unchanged on every adapter.

Each adapter comes with a provider side the test can cue (``Scenario``): accept, a
429 with Retry-After in seconds or as an HTTP-date, a "try later", a permanent
refusal, a dropped connection or a hang after the request went out, nothing
listening. The sides are the sandbox (in-process twin and real HTTP server), a real
aiosmtpd server for SMTP, and for each HTTP-shaped adapter (generic JSON, Twilio,
SendGrid, Postmark, Resend) its API's fake behind ``httpx.MockTransport`` and behind a real
local aiohttp server. Every adapter is built from its settings by
``build_provider_from``, secrets read from a test environment.

A new adapter joins by adding a ``Case`` to ``CASES``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from support.crm import free_port
from support.fake_http_providers import (
    RETRY_AFTER_S,
    FakeApi,
    FakeJsonMailer,
    FakePostmark,
    FakeResend,
    FakeSendGrid,
    FakeTwilio,
    LiveApi,
    Scenario,
    mock_transport,
    serve_api,
)
from support.smtp_side import LocalSmtp, SmtpSide, serve_smtp
from tidings.config.providers import (
    AnyProviderSettings,
    HttpProviderSettings,
    PostmarkProviderSettings,
    ResendProviderSettings,
    SendGridProviderSettings,
    SmtpProviderSettings,
    TwilioProviderSettings,
)
from tidings.core.clock import FakeClock
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    LookupHint,
    LookupStatus,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.providers.base import Provider
from tidings.providers.build import build_provider_from
from tidings.providers.sandbox import SandboxHttpProvider, SandboxTwinProvider
from tidings.sandbox import SandboxConfig, SandboxCore, SandboxServer, serve
from tidings.sandbox.core import SandboxAnswer

T0 = 1_780_000_000.0
KEY = "weekly-digest/2026-08-14/cust_1042/email/v3"
EMAIL = "ada.lovelace@example.com"
PHONE = "+15551234567"
SHORT_TIMEOUT_S = 0.3  # only where a timeout is what the scenario is about
ENV = {
    "SMTP_PASSWORD": "smtp-secret-pass-0",
    "TWILIO_AUTH_TOKEN": "tw-secret-token-1",
    "SENDGRID_API_KEY": "SG.secret-key-2",
    "POSTMARK_SERVER_TOKEN": "pm-secret-token-3",
    "RESEND_API_KEY": "re_secret-key-5",
    "MAILER_TOKEN": "mailer-secret-4",
}
CONTENT = Content(subject="Your weekly digest", text="Three things happened.",
                  html="<p>Three things happened.</p>")


# ---------------------------------------------------------------- the sandbox as a side


class RecordingCore(SandboxCore):
    """The sandbox core, remembering every key and request id it answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keys: list[str] = []
        self.request_ids: list[str] = []

    def handle(self, channel: str, key: str | None, to: str | None, *,
               problem: str | None = None) -> SandboxAnswer:
        answer = super().handle(channel, key, to, problem=problem)
        if key is not None:
            self.keys.append(key)
        if answer.status is not None:
            self.request_ids.append(answer.request_id)
        return answer


SANDBOX_CONFIGS = {
    Scenario.ACCEPT: SandboxConfig(),
    Scenario.RATE_LIMITED_SECONDS: SandboxConfig(rate_limit=1.0, retry_after_s=RETRY_AFTER_S),
    Scenario.RATE_LIMITED_DATE: SandboxConfig(rate_limit=1.0, retry_after_s=RETRY_AFTER_S,
                                              retry_after_date_share=1.0),
    Scenario.TRY_LATER: SandboxConfig(server_error=1.0),
    Scenario.REFUSE: SandboxConfig(reject_addresses=(EMAIL,)),
    Scenario.DROP_AFTER_SEND: SandboxConfig(lost_response=1.0),
    Scenario.ACCEPT_THEN_DROP: SandboxConfig(lost_response=1.0),
    Scenario.HANG_AFTER_SEND: SandboxConfig(timeout=1.0, hang_s=30.0),
    Scenario.UNREACHABLE: SandboxConfig(),
}


class SandboxSide:
    has_retry_after = True
    has_request_id = True
    has_idempotency = True

    def __init__(self, core: RecordingCore) -> None:
        self.core = core
        self._scenario = Scenario.ACCEPT

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    @scenario.setter
    def scenario(self, scenario: Scenario) -> None:
        self._scenario = scenario
        self.core.configure(SANDBOX_CONFIGS[scenario])

    @property
    def keys_received(self) -> list[str]:
        return self.core.keys

    @property
    def idempotency_keys(self) -> list[str]:
        return self.core.keys  # the sandbox's only key is its Idempotency-Key

    @property
    def request_ids(self) -> list[str]:
        return self.core.request_ids

    def receipt_of(self, key: str) -> str | None:
        found = self.core.lookup(key, "email")
        return found[1] if found else None


# ---------------------------------------------------------------- cases


class Case(ABC):
    """One adapter and its provider side."""

    to = EMAIL
    needs_content = True
    secrets: tuple[str, ...] = ()
    side: Any

    def __init__(self) -> None:
        self.clock = FakeClock(start=T0, auto_advance=True)
        self.providers: list[Provider] = []

    async def start(self, scenario: Scenario) -> Provider:
        """Cue the side with ``scenario`` and return an adapter pointed at it."""
        self.side.scenario = scenario
        provider = await self.build(scenario)
        self.providers.append(provider)
        return provider

    @abstractmethod
    async def build(self, scenario: Scenario) -> Provider:
        """An adapter for ``scenario`` (a short read timeout only when it hangs)."""

    async def close(self) -> None:
        for provider in self.providers:
            await provider.close()

    def timeout_for(self, scenario: Scenario) -> float:
        return SHORT_TIMEOUT_S if scenario is Scenario.HANG_AFTER_SEND else 10.0


class TwinCase(Case):
    needs_content = False
    #: The in-process twin connects to nothing, so nothing can be unreachable.
    scenarios = frozenset(Scenario) - {Scenario.UNREACHABLE}

    def __init__(self) -> None:
        super().__init__()
        self.side = SandboxSide(RecordingCore(now=self.clock.now, seed=1))

    async def build(self, scenario: Scenario) -> Provider:
        assert scenario is not Scenario.UNREACHABLE, "the in-process twin connects to nothing"
        # The twin waits its timeout on the clock, which auto-advances: no real wait.
        return SandboxTwinProvider(self.side.core, "email", self.clock, timeout_s=10.0)


class SandboxHttpCase(Case):
    needs_content = False

    def __init__(self) -> None:
        super().__init__()
        self.side = SandboxSide(RecordingCore(now=self.clock.now, seed=1))
        self.server: SandboxServer | None = None

    async def build(self, scenario: Scenario) -> Provider:
        self.server = self.server or await serve(core=self.side.core)
        url = (f"http://127.0.0.1:{free_port()}" if scenario is Scenario.UNREACHABLE
               else self.server.url)
        return SandboxHttpProvider(url, "email", clock=self.clock,
                                   timeout_s=self.timeout_for(scenario))

    async def close(self) -> None:
        await super().close()
        if self.server is not None:
            await self.server.close()


class SmtpCase(Case):
    secrets = (ENV["SMTP_PASSWORD"],)

    def __init__(self) -> None:
        super().__init__()
        self.side = SmtpSide()
        self.local: LocalSmtp | None = None

    async def build(self, scenario: Scenario) -> Provider:
        self.local = self.local or await serve_smtp(self.side)
        port = free_port() if scenario is Scenario.UNREACHABLE else self.local.port
        settings = SmtpProviderSettings(
            host="127.0.0.1", port=port, security="none", from_address="news@tidings.test",
            timeout_s=10.0, data_timeout_s=self.timeout_for(scenario))
        return build_provider_from(settings, channel="email", clock=self.clock, env=ENV)

    async def close(self) -> None:
        await super().close()
        if self.local is not None:
            await self.local.close()


SettingsFor = Callable[[str, float], AnyProviderSettings]


class HttpCase(Case):
    """An HTTP-shaped adapter against its API's fake, mocked or served for real."""

    def __init__(self, api: type[FakeApi], settings: SettingsFor, *, live: bool,
                 to: str = EMAIL, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.side = api(self.clock.now)
        self.settings = settings
        self.live = live
        self.to = to
        self.secrets = secrets
        self.server: LiveApi | None = None
        self.clients: list[httpx.AsyncClient] = []

    async def build(self, scenario: Scenario) -> Provider:
        client: httpx.AsyncClient | None = None
        if self.live:
            # The adapter's own default transport (aiohttp), over a real socket.
            self.server = self.server or await serve_api(self.side)
            base = (f"http://127.0.0.1:{free_port()}" if scenario is Scenario.UNREACHABLE
                    else self.server.url)
        else:
            base = "https://provider.test"
            client = httpx.AsyncClient(transport=mock_transport(self.side))
            self.clients.append(client)
        settings = self.settings(base, self.timeout_for(scenario))
        return build_provider_from(settings, channel="email", clock=self.clock, client=client,
                                   env=ENV)

    async def close(self) -> None:
        await super().close()
        for client in self.clients:
            await client.aclose()
        if self.server is not None:
            await self.server.close()


def mailer_settings(base: str, timeout_s: float) -> HttpProviderSettings:
    return HttpProviderSettings(
        url=f"{base}/emails", headers={"Authorization": "Bearer ${MAILER_TOKEN}"},
        body={"to": "to", "subject": "subject", "text": "text", "html": "html",
              "tags.key": "key"},
        static={"from": "news@tidings.test"}, idempotency_header="Idempotency-Key",
        deduplicates=True, message_id_path="data.id", request_id_header="X-Request-Id",
        lookup_url=f"{base}/emails/by-ref/{{key}}", lookup_status_path="data.status",
        timeout_s=timeout_s)


def twilio_settings(base: str, timeout_s: float) -> TwilioProviderSettings:
    return TwilioProviderSettings(account_sid=FakeTwilio.account_sid, from_number="+15550001111",
                                  base_url=base, timeout_s=timeout_s)


def sendgrid_settings(base: str, timeout_s: float) -> SendGridProviderSettings:
    return SendGridProviderSettings(from_address="news@tidings.test", base_url=base,
                                    timeout_s=timeout_s)


def postmark_settings(base: str, timeout_s: float) -> PostmarkProviderSettings:
    return PostmarkProviderSettings(from_address="news@tidings.test", base_url=base,
                                    timeout_s=timeout_s)


def resend_settings(base: str, timeout_s: float) -> ResendProviderSettings:
    return ResendProviderSettings(from_address="news@tidings.test", base_url=base,
                                  timeout_s=timeout_s)


def _http_cases() -> dict[str, Callable[[], Case]]:
    shapes: list[tuple[str, type[FakeApi], SettingsFor, str, str]] = [
        ("http", FakeJsonMailer, mailer_settings, EMAIL, ENV["MAILER_TOKEN"]),
        ("twilio", FakeTwilio, twilio_settings, PHONE, ENV["TWILIO_AUTH_TOKEN"]),
        ("sendgrid", FakeSendGrid, sendgrid_settings, EMAIL, ENV["SENDGRID_API_KEY"]),
        ("postmark", FakePostmark, postmark_settings, EMAIL, ENV["POSTMARK_SERVER_TOKEN"]),
        ("resend", FakeResend, resend_settings, EMAIL, ENV["RESEND_API_KEY"]),
    ]
    cases: dict[str, Callable[[], Case]] = {}
    for name, api, settings, to, secret in shapes:
        for live in (False, True):
            def make(api: type[FakeApi] = api, settings: SettingsFor = settings, to: str = to,
                     secret: str = secret, live: bool = live) -> Case:
                return HttpCase(api, settings, live=live, to=to, secrets=(secret,))
            cases[f"{name}-{'live' if live else 'mock'}"] = make
    return cases


CASES: dict[str, Callable[[], Case]] = {
    "sandbox-twin": TwinCase,
    "sandbox-http": SandboxHttpCase,
    "smtp": SmtpCase,
    **_http_cases(),
}


@pytest.fixture(params=sorted(CASES))
async def case(request: pytest.FixtureRequest) -> AsyncIterator[Case]:
    made = CASES[request.param]()
    try:
        yield made
    finally:
        await made.close()


#: HTTP-shaped adapters whose provider has no read API to look a key up in (Resend
#: cannot be searched by anything we set): the lookup scenarios do not apply.
NO_READ_API = ("resend-",)


@pytest.fixture(params=sorted(k for k in CASES if k.endswith(("-live", "-mock"))
                              and not k.startswith(NO_READ_API)))
async def http_case(request: pytest.FixtureRequest) -> AsyncIterator[HttpCase]:
    """Every HTTP-shaped adapter with a read API, against its provider's fake."""
    made = CASES[request.param]()
    assert isinstance(made, HttpCase)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture(params=sorted(k for k in CASES if k != "sandbox-twin"))
async def networked_case(request: pytest.FixtureRequest) -> AsyncIterator[Case]:
    """Every adapter that connects to something (the in-process twin does not)."""
    made = CASES[request.param]()
    try:
        yield made
    finally:
        await made.close()


def message(case: Case, *, content: Content | None = CONTENT) -> SendRequest:
    return SendRequest(key=KEY, channel="email", to=case.to, template="digest",
                       data={"items": [1, 2]}, recipient_id="cust_1042", content=content)


def assert_discreet(outcome: Outcome, case: Case) -> None:
    """No recipient address or number, and no credential, in a reason."""
    assert not isinstance(outcome, Accepted)
    assert outcome.reason
    assert case.to.lower() not in outcome.reason.lower()
    assert case.to.lstrip("+") not in outcome.reason
    for secret in case.secrets:
        assert secret not in outcome.reason


# ---------------------------------------------------------------- the suite


async def test_accepted_carries_the_providers_receipt_and_request_id(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, Accepted)
    assert outcome.receipt == case.side.receipt_of(KEY)
    expected_request_id = case.side.request_ids[-1] if case.side.has_request_id else None
    assert outcome.request_id == expected_request_id


async def test_the_delivery_key_reaches_the_provider(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    await provider.send(message(case))
    assert case.side.keys_received == [KEY]
    # Sent as the idempotency key wherever the API has one.
    assert case.side.idempotency_keys == ([KEY] if case.side.has_idempotency else [])


async def test_a_retry_sends_the_same_key_again(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    first = await provider.send(message(case))
    second = await provider.send(message(case))
    assert isinstance(first, Accepted) and isinstance(second, Accepted)
    assert case.side.keys_received == [KEY, KEY]
    if case.side.has_idempotency:
        assert second.receipt == first.receipt


@pytest.mark.parametrize("scenario", [Scenario.RATE_LIMITED_SECONDS, Scenario.RATE_LIMITED_DATE])
async def test_rate_limited_with_retry_after(case: Case, scenario: Scenario) -> None:
    provider = await case.start(scenario)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, RateLimited)
    # SMTP has no Retry-After: the channel then backs off with jitter.
    assert outcome.retry_after_s == (RETRY_AFTER_S if case.side.has_retry_after else None)
    expected_request_id = case.side.request_ids[-1] if case.side.has_request_id else None
    assert outcome.request_id == expected_request_id
    assert_discreet(outcome, case)


async def test_try_later_is_transient(case: Case) -> None:
    provider = await case.start(Scenario.TRY_LATER)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, Transient)
    assert_discreet(outcome, case)


async def test_a_refused_recipient_is_permanent_and_not_named(case: Case) -> None:
    provider = await case.start(Scenario.REFUSE)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, Permanent)
    assert_discreet(outcome, case)


@pytest.mark.parametrize("scenario", [Scenario.DROP_AFTER_SEND, Scenario.HANG_AFTER_SEND])
async def test_no_answer_after_the_request_went_out_is_uncertain(case: Case,
                                                                 scenario: Scenario) -> None:
    provider = await case.start(scenario)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, Uncertain)
    assert_discreet(outcome, case)
    assert case.side.keys_received == [KEY]  # it did reach the provider


async def test_nothing_listening_is_transient(networked_case: Case) -> None:
    case = networked_case
    provider = await case.start(Scenario.UNREACHABLE)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, Transient)
    assert_discreet(outcome, case)
    assert case.side.keys_received == []


async def test_without_rendered_content(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    outcome = await provider.send(message(case, content=None))
    if case.needs_content:
        assert outcome == Permanent(reason="no rendered content")
        assert case.side.keys_received == []  # refused before any network call
    else:
        assert isinstance(outcome, Accepted)  # the provider renders it


async def test_lookup_where_supported(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    outcome = await provider.send(message(case))
    assert isinstance(outcome, Accepted)
    if provider.supports_lookup:
        if getattr(provider, "lookup_needs_hint", False):
            now = case.clock.now()
            hint = LookupHint(to=case.to, sent_after=now - 600, sent_before=now + 600)
            found = await provider.lookup(KEY, hint)  # type: ignore[call-arg]
        else:
            found = await provider.lookup(KEY)
        assert (found.found, found.receipt) == (True, outcome.receipt)
    else:
        with pytest.raises(NotImplementedError):
            await provider.lookup(KEY)


async def test_close_is_idempotent(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    assert isinstance(await provider.send(message(case)), Accepted)
    await provider.close()
    await provider.close()


async def test_no_credential_in_repr(case: Case) -> None:
    provider = await case.start(Scenario.ACCEPT)
    for secret in case.secrets:
        assert secret not in repr(provider)
        assert secret not in str(vars(provider))


# ---------------------------------------------------------------- lookup by key


async def ask(case: Case, provider: Provider, key: str = KEY) -> Lookup:
    """The adapter's lookup of ``key``, with the recipient and window where it needs them."""
    if getattr(provider, "lookup_needs_hint", False):
        now = case.clock.now()
        hint = LookupHint(to=case.to, sent_after=now - 600, sent_before=now + 600)
        found: Lookup = await provider.lookup(key, hint)  # type: ignore[call-arg]
        return found
    return await provider.lookup(key)


async def test_a_lost_answer_is_found_accepted_by_the_providers_read_api(
        http_case: HttpCase) -> None:
    provider = await http_case.start(Scenario.ACCEPT_THEN_DROP)
    outcome = await provider.send(message(http_case))
    assert isinstance(outcome, Uncertain)

    found = await ask(http_case, provider)

    assert found.status is LookupStatus.ACCEPTED
    assert found.receipt == http_case.side.receipt_of(KEY)
    assert http_case.side.lookups, "the adapter asked the provider's read API"


async def test_a_send_that_never_arrived_is_not_found(http_case: HttpCase) -> None:
    provider = await http_case.start(Scenario.DROP_AFTER_SEND)
    assert isinstance(await provider.send(message(http_case)), Uncertain)

    assert (await ask(http_case, provider)).status is LookupStatus.NOT_FOUND


async def test_a_message_the_provider_reports_failed_is_found_failed(
        http_case: HttpCase) -> None:
    provider = await http_case.start(Scenario.ACCEPT)
    assert isinstance(await provider.send(message(http_case)), Accepted)
    http_case.side.failed.add(KEY)

    found = await ask(http_case, provider)

    # Postmark's search reports no failed state (a bounce comes by webhook)
    expected = (LookupStatus.ACCEPTED if isinstance(http_case.side, FakePostmark)
                else LookupStatus.FAILED)
    assert found.status is expected and found.receipt == http_case.side.receipt_of(KEY)


@pytest.mark.parametrize("trouble", [Scenario.TRY_LATER, Scenario.RATE_LIMITED_SECONDS,
                                     Scenario.DROP_AFTER_SEND])
async def test_a_failing_read_api_is_unknown_never_not_found(
        http_case: HttpCase, trouble: Scenario) -> None:
    provider = await http_case.start(Scenario.ACCEPT)
    assert isinstance(await provider.send(message(http_case)), Accepted)
    http_case.side.lookup_scenario = trouble

    found = await ask(http_case, provider)

    assert found.status is LookupStatus.UNKNOWN and found.detail
    for secret in http_case.secrets:
        assert secret not in found.detail
    assert http_case.to not in found.detail


async def test_an_unreachable_read_api_is_unknown(http_case: HttpCase) -> None:
    provider = await http_case.start(Scenario.UNREACHABLE)
    assert (await ask(http_case, provider)).status is LookupStatus.UNKNOWN
