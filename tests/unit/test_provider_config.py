"""Provider settings: one model per kind, secrets by environment variable name only."""

from __future__ import annotations

import inspect
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from tidings.config.providers import (
    HttpProviderSettings,
    PostmarkProviderSettings,
    ProviderKindSettings,
    SendGridProviderSettings,
    SmtpProviderSettings,
    TwilioProviderSettings,
)
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import Content, SendRequest
from tidings.core.outcomes import Accepted
from tidings.providers.build import build_provider_from
from tidings.providers.http import HttpJsonProvider
from tidings.providers.postmark import PostmarkProvider
from tidings.providers.sandbox import SandboxHttpProvider
from tidings.providers.sendgrid import SendGridProvider
from tidings.providers.smtp import SmtpProvider
from tidings.providers.twilio import TwilioProvider

KINDS = TypeAdapter(ProviderKindSettings)
SECRET = "very-secret-value-42"

EXAMPLES: dict[str, tuple[dict[str, Any], type, dict[str, str]]] = {
    "smtp": ({"kind": "smtp", "host": "smtp.example.net", "from_address": "news@tidings.test",
              "username": "tidings", "password_env": "SMTP_PASSWORD"},
             SmtpProvider, {"SMTP_PASSWORD": SECRET}),
    "http": ({"kind": "http", "url": "https://mailer.test/send",
              "headers": {"Authorization": "Bearer ${MAILER_TOKEN}", "X-Team": "growth"},
              "body": {"to": "to", "text": "text"}},
             HttpJsonProvider, {"MAILER_TOKEN": SECRET}),
    "twilio": ({"kind": "twilio", "account_sid": "AC1", "from_number": "+15550001111"},
               TwilioProvider, {"TWILIO_AUTH_TOKEN": SECRET}),
    "sendgrid": ({"kind": "sendgrid", "from_address": "news@tidings.test"},
                 SendGridProvider, {"SENDGRID_API_KEY": SECRET}),
    "postmark": ({"kind": "postmark", "from_address": "news@tidings.test",
                  "server_token_env": "PM_TOKEN"},
                 PostmarkProvider, {"PM_TOKEN": SECRET}),
}


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
async def test_each_kind_parses_by_its_tag_and_builds_its_adapter(kind: str) -> None:
    data, adapter, env = EXAMPLES[kind]
    settings = KINDS.validate_python(data)
    assert settings.kind == kind
    provider = build_provider_from(settings, channel="email", clock=FakeClock(), env=env)
    try:
        assert type(provider) is adapter
        assert provider.name == kind
        # every HTTP provider can be asked by key but the generic one without lookup_url;
        # SMTP cannot
        assert provider.supports_lookup is (kind in ("postmark", "sendgrid", "twilio"))
        for shown in (repr(provider), str(vars(provider)), repr(settings)):
            assert SECRET not in shown
    finally:
        await provider.close()


@pytest.mark.parametrize(
    ("kind", "field", "variable"),
    [
        ("smtp", "password_env", "SMTP_PASSWORD"),
        ("http", "headers.Authorization", "MAILER_TOKEN"),
        ("twilio", "auth_token_env", "TWILIO_AUTH_TOKEN"),
        ("sendgrid", "api_key_env", "SENDGRID_API_KEY"),
        ("postmark", "server_token_env", "PM_TOKEN"),
    ],
)
@pytest.mark.parametrize("env", [{}, {"SMTP_PASSWORD": "", "MAILER_TOKEN": "",
                                      "TWILIO_AUTH_TOKEN": "", "SENDGRID_API_KEY": "",
                                      "PM_TOKEN": ""}])
def test_a_missing_secret_names_the_field_and_the_variable(
        kind: str, field: str, variable: str, env: dict[str, str]) -> None:
    settings = KINDS.validate_python(EXAMPLES[kind][0])
    with pytest.raises(ConfigurationError) as caught:
        build_provider_from(settings, channel="email", clock=FakeClock(), env=env)
    assert caught.value.field == f"channels.email.provider.{field}"
    assert caught.value.message == f"environment variable {variable} is not set"


def test_the_field_prefix_can_be_given() -> None:
    settings = SendGridProviderSettings(from_address="news@tidings.test")
    with pytest.raises(ConfigurationError) as caught:
        build_provider_from(settings, channel="email", clock=FakeClock(), env={},
                            field_prefix="providers.mail")
    assert caught.value.field == "providers.mail.api_key_env"


def test_a_generic_body_that_cannot_be_built_names_its_field() -> None:
    settings = HttpProviderSettings(url="https://mailer.test/send",
                                    body={"a": "to", "a.b": "key"})
    with pytest.raises(ConfigurationError) as caught:
        build_provider_from(settings, channel="sms", clock=FakeClock(), env={})
    assert caught.value.field == "channels.sms.provider.body.a.b"


@pytest.mark.parametrize(
    ("data", "location"),
    [
        ({"kind": "fax"}, ()),
        ({"kind": "sendgrid", "from_address": "a@b.c", "api_key": "SG.inline"},
         ("sendgrid", "api_key")),
        ({"kind": "sendgrid", "from_address": "a@b.c", "api_key_env": "not a name"},
         ("sendgrid", "api_key_env")),
        ({"kind": "smtp", "host": "h", "from_address": "a@b.c", "username": "u"},
         ("smtp",)),
        ({"kind": "smtp", "host": "h", "from_address": "a@b.c", "security": "ssl"},
         ("smtp", "security")),
        ({"kind": "twilio", "account_sid": "AC1"}, ("twilio",)),
        ({"kind": "http", "url": "ftp://x", "body": {"to": "to"}}, ("http", "url")),
        ({"kind": "http", "url": "https://x", "body": {"to": "address"}},
         ("http", "body", "to")),
        ({"kind": "postmark", "from_address": "a@b.c", "timeout_s": 0}, ("postmark",
                                                                          "timeout_s")),
    ],
)
def test_bad_settings_are_refused_with_their_location(data: dict[str, Any],
                                                      location: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError) as caught:
        KINDS.validate_python(data)
    assert caught.value.errors()[0]["loc"][:len(location)] == location


def test_settings_are_frozen_and_discriminated_inside_a_larger_model() -> None:
    class Channel(BaseModel):
        provider: ProviderKindSettings

    channel = Channel.model_validate({"provider": {"kind": "postmark",
                                                   "from_address": "news@tidings.test"}})
    assert isinstance(channel.provider, PostmarkProviderSettings)
    assert channel.provider.server_token_env == "POSTMARK_SERVER_TOKEN"
    with pytest.raises(ValidationError):
        channel.provider.from_address = "other@tidings.test"
    twilio = TwilioProviderSettings(account_sid="AC1", messaging_service_sid="MG1")
    smtp = SmtpProviderSettings(host="localhost", from_address="a@b.c")
    assert (twilio.auth_token_env, smtp.security, smtp.port) == ("TWILIO_AUTH_TOKEN",
                                                                  "starttls", None)


async def test_the_injected_client_reaches_the_http_adapters() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "m1"})

    settings = KINDS.validate_python(EXAMPLES["http"][0])
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = build_provider_from(settings, channel="email", clock=FakeClock(),
                                       client=client, env={"MAILER_TOKEN": SECRET})
        outcome = await provider.send(SendRequest(
            key="k1", channel="email", to="ada@example.com", template="t", data={},
            recipient_id="r1", content=Content(text="hi")))
    assert outcome == Accepted(receipt="m1")
    assert seen[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert seen[0].headers["X-Team"] == "growth"


@pytest.mark.parametrize("adapter", [SandboxHttpProvider, SmtpProvider, HttpJsonProvider,
                                     PostmarkProvider, SendGridProvider, TwilioProvider])
def test_every_provider_is_given_its_clock(adapter: type) -> None:
    # A clock defaulting to the system's would hide the wall clock inside an adapter: a
    # test forgetting it would read real time, and a simulated runtime would disagree
    # with its providers' Retry-After and Date headers.
    clock = inspect.signature(adapter.__init__).parameters["clock"]
    assert clock.default is inspect.Parameter.empty
    assert clock.kind is inspect.Parameter.KEYWORD_ONLY
