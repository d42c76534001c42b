"""Settings of the provider webhooks (``[webhooks]``, ``POST /v1/webhooks/{provider}``):
how each provider's calls are verified. Secrets are never in the file: each ``*_env``
names an environment variable that holds them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidings.config.providers import HttpUrlStr
from tidings.core.durations import Seconds


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class TwilioWebhookSettings(_Model):
    """Twilio status callbacks, signed with the account's auth token (HMAC-SHA1)."""

    auth_token_env: str = "TWILIO_AUTH_TOKEN"
    """Holds the account's auth token (Twilio signs with it even when sends use an API
    key); two comma-separated during a rotation (primary, secondary)."""


class SendGridWebhookSettings(_Model):
    """SendGrid's signed event webhook (ECDSA P-256)."""

    public_key_env: str = "SENDGRID_WEBHOOK_PUBLIC_KEY"
    """Holds the verification key as SendGrid shows it (base64 DER); several
    comma-separated while a key is replaced."""
    tolerance_s: Seconds = 300.0
    """How far the signed timestamp may be from the server's clock."""


class PostmarkWebhookSettings(_Model):
    """Postmark webhooks, which offer HTTP basic auth only (credentials in the URL)."""

    username_env: str = "POSTMARK_WEBHOOK_USERNAME"
    password_env: str = "POSTMARK_WEBHOOK_PASSWORD"


class ResendWebhookSettings(_Model):
    """Resend's webhooks, signed the Svix way (``svix-id``, ``svix-timestamp``,
    ``svix-signature``: HMAC-SHA256 over the id, the timestamp and the body)."""

    secret_env: str = "RESEND_WEBHOOK_SECRET"
    """Holds the endpoint's signing secret as Resend shows it (``whsec_…``); several
    comma-separated while one is replaced."""
    tolerance_s: Seconds = 300.0
    """How far the signed timestamp may be from the server's clock."""


class GenericWebhookSettings(_Model):
    """Any other provider: ``X-Tidings-Signature: t=<unix>,v1=<hex HMAC-SHA256>``."""

    secrets_env: str = "TIDINGS_WEBHOOK_SECRETS"
    """One or more environment variable names, comma-separated; each holds one secret or
    several comma-separated. Two secrets verify during a rotation."""
    tolerance_s: Seconds = 300.0


class WebhookSettings(_Model):
    """Provider webhooks (``POST /v1/webhooks/{provider}``). Secrets are never in the
    file: each ``*_env`` names an environment variable that holds them."""

    public_url: HttpUrlStr | None = None
    """The base URL providers call (``https://notify.example.com``) when a proxy
    rewrites it: Twilio signs the full URL it called. Default: the URL as received."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    twilio: TwilioWebhookSettings = TwilioWebhookSettings()
    sendgrid: SendGridWebhookSettings = SendGridWebhookSettings()
    postmark: PostmarkWebhookSettings = PostmarkWebhookSettings()
    resend: ResendWebhookSettings = ResendWebhookSettings()
    generic: GenericWebhookSettings = GenericWebhookSettings()
