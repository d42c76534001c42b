"""Settings for the real provider adapters (``tidings.providers.build`` builds them).

One frozen model per ``kind`` (``smtp``, ``http``, ``twilio``, ``sendgrid``,
``postmark``); ``ProviderKindSettings`` is their union, discriminated on ``kind``.
Credentials are never written in settings: a field ending in ``_env`` names the
environment variable that holds the secret, read by ``build_provider_from``. A
missing variable is a ``ConfigurationError`` naming the field, e.g.
``channels.email.provider.api_key_env``. Resolved secrets live only inside the
adapter, as ``SecretStr``; no ``repr`` shows them.

The generic ``http`` kind takes its secrets in header values: ``${NAME}`` in a
header value is replaced by the variable ``NAME`` (``"Bearer ${MAILER_TOKEN}"``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from tidings.config.endpoints import (
    POSTMARK_BASE_URL,
    RESEND_BASE_URL,
    SENDGRID_BASE_URL,
    TWILIO_BASE_URL,
    Source,
)
from tidings.core.durations import Seconds, SecondsOrZero

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def _env_name(value: str | None) -> str | None:
    if value is not None and not _ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


def _http_url(value: str) -> str:
    # The value is not quoted back: a URL may carry a password.
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        parts = None
    if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
            or any(c.isspace() or not c.isprintable() for c in value)):
        raise ValueError("must be an http:// or https:// URL with a host, e.g. "
                         "https://api.example.com/send")
    return value


HttpUrlStr = Annotated[str, AfterValidator(_http_url)]
"""A URL settings can call: scheme http or https, a host, no spaces (kept as written)."""


class SmtpProviderSettings(_Model):
    """An SMTP relay. ``password_env`` names the variable holding the password."""

    kind: Literal["smtp"] = "smtp"
    host: str = Field(min_length=1)
    port: int | None = Field(default=None, ge=1, le=65535)
    """Default: 587 for starttls, 465 for tls, 25 for none."""
    security: Literal["starttls", "tls", "none"] = "starttls"
    username: str | None = None
    password_env: str | None = None
    from_address: str = Field(min_length=3)
    from_name: str | None = None
    reply_to: str | None = None
    envelope_from: str | None = None
    message_id_domain: str | None = None
    """Default: the domain of ``from_address``."""
    validate_certs: bool = True
    ca_file: str | None = None
    """A CA bundle to trust instead of the system's (a private relay)."""
    local_hostname: str | None = None
    timeout_s: Seconds = 30.0
    data_timeout_s: Seconds = 120.0
    max_connections: int = Field(default=2, ge=1, le=100)
    idle_timeout_s: Seconds = 60.0

    _password_env = field_validator("password_env")(_env_name)

    @model_validator(mode="after")
    def _login_pair(self) -> SmtpProviderSettings:
        if (self.username is None) != (self.password_env is None):
            raise ValueError("username and password_env go together: set both or neither")
        return self

    @field_validator("ca_file")
    @classmethod
    def _readable_bundle(cls, value: str | None) -> str | None:
        # Loaded when the provider is built, which every command does: a missing file
        # would fail ``tidings status`` too, with a bare FileNotFoundError.
        if value is not None and not Path(value).is_file():
            raise ValueError(f"{value} is not a file (a PEM bundle of CA certificates)")
        return value


class HttpProviderSettings(_Model):
    """A JSON-over-HTTP provider described by settings (see ``providers.http``)."""

    kind: Literal["http"] = "http"
    url: HttpUrlStr
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    """Header values; ``${NAME}`` is replaced by the environment variable NAME."""
    body: dict[str, Source] = Field(min_length=1)
    """JSON field (dotted names nest) → what of the send fills it."""
    static: dict[str, Any] = Field(default_factory=dict)
    """Constant JSON fields (a sender address, a stream name)."""
    idempotency_header: str | None = "Idempotency-Key"
    deduplicates: bool = False
    """Whether the provider honours the idempotency header (a retry is then safe)."""
    dedupe_window_s: Seconds | None = None
    """How long it deduplicates on the header (None: as long as it keeps the key)."""
    lookup_url: str | None = None
    """A read API that finds a message by our key: ``{key}`` is replaced by the key,
    URL-encoded (``https://api.example.com/messages?ref={key}``). 404 or an empty
    answer is not found; see ``providers.http``."""
    lookup_status_path: str = "status"
    """Dotted path to the message's status in the lookup answer."""
    lookup_message_id_path: str | None = None
    """Dotted path to the message id in the lookup answer (default: ``message_id_path``)."""
    lookup_accepted: list[str] = Field(default_factory=lambda: [
        "accepted", "queued", "sent", "processed", "delivered"])
    """Statuses in the lookup answer that mean the provider accepted the message."""
    lookup_failed: list[str] = Field(default_factory=lambda: [
        "failed", "rejected", "dropped", "cancelled", "canceled"])
    """Statuses in the lookup answer that mean it did not (a failed send)."""
    lookup_settle_s: SecondsOrZero = 0.0
    """How long the read API may lag the send API."""
    message_id_path: str | None = "id"
    message_id_header: str | None = None
    request_id_header: str | None = "X-Request-Id"
    timeout_s: Seconds = 10.0
    max_connections: int = Field(default=100, ge=1)


    @field_validator("lookup_url")
    @classmethod
    def _lookup_url(cls, value: str | None) -> str | None:
        if value is not None:
            _http_url(value)
            if "{key}" not in value:
                raise ValueError("must hold {key} where the delivery key goes")
        return value


class TwilioProviderSettings(_Model):
    """Twilio Messages (SMS). ``auth_token_env`` names the variable holding the secret
    of ``api_key_sid`` when given, else the account's auth token."""

    kind: Literal["twilio"] = "twilio"
    account_sid: str = Field(min_length=1)
    auth_token_env: str = "TWILIO_AUTH_TOKEN"
    api_key_sid: str | None = None
    from_number: str | None = None
    messaging_service_sid: str | None = None
    status_callback: HttpUrlStr | None = None
    base_url: HttpUrlStr = TWILIO_BASE_URL
    timeout_s: Seconds = 10.0
    max_connections: int = Field(default=100, ge=1)

    _auth_token_env = field_validator("auth_token_env")(_env_name)

    @model_validator(mode="after")
    def _sender(self) -> TwilioProviderSettings:
        if not self.from_number and not self.messaging_service_sid:
            raise ValueError("set from_number, messaging_service_sid, or both")
        return self


class SendGridProviderSettings(_Model):
    """SendGrid v3 Mail Send. ``api_key_env`` names the variable holding the API key."""

    kind: Literal["sendgrid"] = "sendgrid"
    api_key_env: str = "SENDGRID_API_KEY"
    from_address: str = Field(min_length=3)
    from_name: str | None = None
    reply_to: str | None = None
    base_url: HttpUrlStr = SENDGRID_BASE_URL
    timeout_s: Seconds = 10.0
    max_connections: int = Field(default=100, ge=1)

    _api_key_env = field_validator("api_key_env")(_env_name)


class PostmarkProviderSettings(_Model):
    """Postmark ``/email``. ``server_token_env`` names the variable holding the token."""

    kind: Literal["postmark"] = "postmark"
    server_token_env: str = "POSTMARK_SERVER_TOKEN"
    from_address: str = Field(min_length=3)
    from_name: str | None = None
    reply_to: str | None = None
    message_stream: str = "outbound"
    base_url: HttpUrlStr = POSTMARK_BASE_URL
    timeout_s: Seconds = 10.0
    max_connections: int = Field(default=100, ge=1)

    _server_token_env = field_validator("server_token_env")(_env_name)


class ResendProviderSettings(_Model):
    """Resend ``/emails`` (and ``/emails/batch``). ``api_key_env`` names the variable
    holding the API key."""

    kind: Literal["resend"] = "resend"
    api_key_env: str = "RESEND_API_KEY"
    from_address: str = Field(min_length=3)
    from_name: str | None = None
    reply_to: str | None = None
    base_url: HttpUrlStr = RESEND_BASE_URL
    timeout_s: Seconds = 10.0
    max_connections: int = Field(default=100, ge=1)

    _api_key_env = field_validator("api_key_env")(_env_name)


_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _factory(value: str) -> str:
    if not _FACTORY.match(value):
        raise ValueError(f"{value!r} is not an import path; write package.module:function")
    return value


#: The entry-point group a provider plug-in's package registers its factory under.
ENTRY_POINT_GROUP = "tidings.providers"

_ENTRY_POINT = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def _entry_point(value: str) -> str:
    if not _ENTRY_POINT.match(value):
        raise ValueError(f"{value!r} is not an entry point's name (letters, digits, '.', "
                         "'-', '_')")
    return value


class PluginProviderSettings(_Model):
    """A provider of your own, named by its factory: the import path (``factory``), or
    the name its installed package registers under the ``tidings.providers`` entry-point
    group (``entry_point``). Called as ``factory(channel=..., clock=..., options=...)``,
    it returns an object with the ``Provider`` methods (``tidings.providers``).
    ``options`` are handed over as read; a secret is named by an ``*_env`` option and
    read by the factory."""

    kind: Literal["plugin"] = "plugin"
    """A provider of your own."""
    factory: Annotated[str, AfterValidator(_factory)] | None = None
    """``package.module:function``, importable where tidings runs (or ``entry_point``)."""
    entry_point: Annotated[str, AfterValidator(_entry_point)] | None = None
    """The name an installed package registers its factory under in
    ``[project.entry-points."tidings.providers"]`` (or ``factory``)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Handed to the factory as read (its own settings)."""
    timeout_s: Seconds = 10.0
    """A send is cut off (and uncertain) after three of these, unless the provider says
    its own ``send_deadline_s``."""

    @model_validator(mode="after")
    def _one_factory(self) -> PluginProviderSettings:
        if (self.factory is None) == (self.entry_point is None):
            raise ValueError("name the factory once: factory (an import path) or "
                             "entry_point (an installed plug-in's name)")
        return self

    @property
    def origin(self) -> str:
        """How the factory is named, for messages."""
        return self.factory or f"entry point {self.entry_point!r}"


AnyProviderSettings = (SmtpProviderSettings | HttpProviderSettings | TwilioProviderSettings
                       | SendGridProviderSettings | PostmarkProviderSettings
                       | ResendProviderSettings | PluginProviderSettings)
"""Any real provider's settings (for type hints)."""

ProviderKindSettings = Annotated[AnyProviderSettings, Field(discriminator="kind")]
"""The same union for a pydantic field: told apart by ``kind``."""
