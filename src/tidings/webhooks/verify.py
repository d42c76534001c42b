"""Is this webhook from the provider? One verifier per provider, framework-free.

``verify(request)`` returns for an authentic request and raises ``SignatureError``
naming the header (or field) that failed, never a secret. Secrets are compared in
constant time, and every configured secret is tried without an early exit, so the time
taken does not say which one matched (two are configured during a rotation).

==========  ==========================================================================
provider    scheme
==========  ==========================================================================
twilio      ``X-Twilio-Signature``: base64 HMAC-SHA1, under the auth token, of the full
            URL Twilio called followed by every form parameter (sorted by name, then
            value) as name + value. A JSON body instead carries its hex SHA-256 in the
            URL's ``bodySHA256`` parameter and the signature covers the URL alone.
sendgrid    ``X-Twilio-Email-Event-Webhook-Signature``: base64 DER ECDSA P-256/SHA-256
            of ``timestamp + raw body``, the timestamp from
            ``X-Twilio-Email-Event-Webhook-Timestamp``; the key is SendGrid's
            verification key (base64 DER SubjectPublicKeyInfo).
postmark    HTTP basic auth (the only thing Postmark offers): the credentials put in
            the webhook URL.
generic     ``X-Tidings-Signature: t=<unix seconds>,v1=<hex>``: HMAC-SHA256 of
            ``"<t>." + raw body``; ``t`` within the tolerance of the injected clock.
==========  ==========================================================================
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs, parse_qsl, urlsplit, urlunsplit

from tidings.core.clock import Clock, skew_s
from tidings.core.errors import ConfigurationError, FieldError

if TYPE_CHECKING:
    # cryptography is imported by SendGrid's verifier when it is made (the API process
    # with that webhook), not with this package, which every worker reaches through
    # the webhook evidence it settles uncertain sends by.
    from cryptography.hazmat.primitives.asymmetric import ec

    # settings load the provider adapters, which use this package
    from tidings.config.settings import WebhookSettings

TWILIO_SIGNATURE_HEADER = "X-Twilio-Signature"
TWILIO_BODY_HASH_PARAM = "bodySHA256"
SENDGRID_SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
SENDGRID_TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"
TIDINGS_SIGNATURE_HEADER = "X-Tidings-Signature"
BASIC_REALM = 'Basic realm="tidings webhooks"'
DEFAULT_TOLERANCE_S = 300.0
_DEFAULT_PORTS = {"https": 443, "http": 80}


class SignatureError(FieldError):
    """The request is not shown to come from the provider (answered 401; nothing is
    recorded). ``challenge`` is the ``WWW-Authenticate`` value to answer with, if any."""

    def __init__(self, field: str, message: str, *, challenge: str | None = None) -> None:
        super().__init__(field, message)
        self.challenge = challenge


@dataclass(frozen=True, kw_only=True)
class WebhookRequest:
    """What a verifier reads of an HTTP request: the full URL the provider called
    (query included), the headers, and the raw body exactly as received."""

    url: str
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """A header's value, whatever the case of its name; None if absent."""
        value = self.headers.get(name)
        if value is not None:
            return value
        wanted = name.lower()
        for key, found in self.headers.items():
            if key.lower() == wanted:
                return found
        return None


class Verifier(Protocol):
    """Checks that a webhook request comes from one provider."""

    provider: str

    def verify(self, request: WebhookRequest) -> None:
        """Return if authentic, else raise SignatureError naming what failed."""
        ...


def _same(expected: str | bytes, presented: str | bytes) -> bool:
    """Constant-time equality of two strings of any characters."""
    a = expected.encode() if isinstance(expected, str) else expected
    b = presented.encode() if isinstance(presented, str) else presented
    return hmac.compare_digest(a, b)


def _fresh(field: str, raw: str, clock: Clock, tolerance_s: float) -> int:
    """``raw`` as Unix seconds within ``tolerance_s`` of the clock, else SignatureError."""
    try:
        timestamp = int(raw.strip())
    except ValueError:
        raise SignatureError(field, "must be Unix seconds (an integer)") from None
    now = clock.now()
    skew = skew_s(timestamp, now)
    if skew > tolerance_s:
        raise SignatureError(field, f"is {skew:.0f} s from the server's clock; the tolerance "
                                    f"is {tolerance_s:.0f} s")
    return timestamp


# ---------------------------------------------------------------- twilio


def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]] = ()) -> str:
    """The ``X-Twilio-Signature`` Twilio sends for ``url`` and form ``params``."""
    data = url + "".join(name + value for name, value in sorted(set(params)))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def twilio_body_hash(body: bytes) -> str:
    """The ``bodySHA256`` URL parameter of a JSON webhook: the body's hex SHA-256."""
    return hashlib.sha256(body).hexdigest()


def _url_variants(url: str) -> list[str]:
    """``url`` as given, without its port, and with the scheme's default port: Twilio
    does not always sign the port the way it called it (its own helpers try both)."""
    parts = urlsplit(url)
    variants = [url]
    host, sep, port = parts.netloc.rpartition(":")
    if sep and port.isdigit():
        variants.append(urlunsplit(parts._replace(netloc=host)))
    elif parts.scheme in _DEFAULT_PORTS:
        netloc = f"{parts.netloc}:{_DEFAULT_PORTS[parts.scheme]}"
        variants.append(urlunsplit(parts._replace(netloc=netloc)))
    return variants


def form_params(body: bytes) -> list[tuple[str, str]]:
    """Name/value pairs of a form-encoded body, blanks kept (Twilio signs them);
    UnicodeDecodeError (a ValueError) if it is not UTF-8."""
    return parse_qsl(body.decode("utf-8"), keep_blank_values=True)


class TwilioVerifier:
    """Twilio's request signature under its auth token(s)."""

    provider = "twilio"

    def __init__(self, auth_tokens: Sequence[str]) -> None:
        if not auth_tokens:
            raise ConfigurationError("webhooks.twilio.auth_token_env", "no auth token given")
        self._tokens = tuple(auth_tokens)

    def verify(self, request: WebhookRequest) -> None:
        """Check ``X-Twilio-Signature`` (and ``bodySHA256`` for a JSON body)."""
        field = f"header.{TWILIO_SIGNATURE_HEADER}"
        presented = (request.header(TWILIO_SIGNATURE_HEADER) or "").strip()
        if not presented:
            raise SignatureError(field, "is missing")
        hashes_given = parse_qs(urlsplit(request.url).query).get(TWILIO_BODY_HASH_PARAM)
        params: list[tuple[str, str]] = []
        if hashes_given:
            if not _same(twilio_body_hash(request.body), hashes_given[0].strip().lower()):
                raise SignatureError(f"query.{TWILIO_BODY_HASH_PARAM}",
                                     "is not the SHA-256 of the body")
        else:
            try:
                params = form_params(request.body)
            except UnicodeDecodeError:
                raise SignatureError("body", "is not UTF-8 form data") from None
        valid = False
        for token in self._tokens:
            for url in _url_variants(request.url):
                valid |= _same(twilio_signature(token, url, params), presented)
        if not valid:
            raise SignatureError(field, "does not match the URL and parameters under the "
                                        "configured auth token(s)")


# ---------------------------------------------------------------- sendgrid


def load_public_key(text: str) -> ec.EllipticCurvePublicKey:
    """A P-256 public key from base64 DER (as SendGrid shows it) or PEM; ValueError else."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import (
        load_der_public_key,
        load_pem_public_key,
    )

    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = load_pem_public_key(text.encode())
        else:
            key = load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error, TypeError) as exc:
        raise ValueError(f"not a base64 DER or PEM public key ({type(exc).__name__})") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise ValueError("not an ECDSA P-256 public key")
    return key


class SendGridVerifier:
    """SendGrid's signed event webhook under its verification key(s)."""

    provider = "sendgrid"

    def __init__(self, public_keys: Sequence[ec.EllipticCurvePublicKey], *, clock: Clock,
                 tolerance_s: float = DEFAULT_TOLERANCE_S) -> None:
        if not public_keys:
            raise ConfigurationError("webhooks.sendgrid.public_key_env", "no public key given")
        self._keys = tuple(public_keys)
        self._clock = clock
        self._tolerance_s = tolerance_s

    def verify(self, request: WebhookRequest) -> None:
        """Check the ECDSA signature over timestamp + body, and the timestamp's age."""
        sig_field = f"header.{SENDGRID_SIGNATURE_HEADER}"
        ts_field = f"header.{SENDGRID_TIMESTAMP_HEADER}"
        presented = (request.header(SENDGRID_SIGNATURE_HEADER) or "").strip()
        timestamp = request.header(SENDGRID_TIMESTAMP_HEADER)
        if not presented:
            raise SignatureError(sig_field, "is missing")
        if timestamp is None or not timestamp.strip():
            raise SignatureError(ts_field, "is missing")
        try:
            signature = base64.b64decode(presented, validate=True)
        except binascii.Error:
            raise SignatureError(sig_field, "is not base64") from None
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        signed = timestamp.encode() + request.body
        valid = False
        for key in self._keys:
            try:
                key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))
                valid = True
            except InvalidSignature:
                pass
        if not valid:
            raise SignatureError(sig_field, "does not match the timestamp and body under the "
                                            "configured public key(s)")
        _fresh(ts_field, timestamp, self._clock, self._tolerance_s)


# ---------------------------------------------------------------- generic HMAC


def hmac_signature(secret: str | bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>." + body``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str | bytes, timestamp: int, body: bytes) -> str:
    """The ``X-Tidings-Signature`` value a sender puts on ``body`` at ``timestamp``."""
    return f"t={timestamp},v1={hmac_signature(secret, timestamp, body)}"


class HmacVerifier:
    """``X-Tidings-Signature: t=<unix>,v1=<hex>`` under one of the shared secrets."""

    provider = "generic"

    def __init__(self, secrets: Sequence[str | bytes], *, clock: Clock,
                 tolerance_s: float = DEFAULT_TOLERANCE_S) -> None:
        if not secrets:
            raise ConfigurationError("webhooks.generic.secrets_env", "no secret given")
        self._secrets = tuple(s.encode() if isinstance(s, str) else s for s in secrets)
        self._clock = clock
        self._tolerance_s = tolerance_s

    def verify(self, request: WebhookRequest) -> None:
        """Check the signature over ``"<t>." + body`` under any secret, then ``t``'s age."""
        field = f"header.{TIDINGS_SIGNATURE_HEADER}"
        presented = request.header(TIDINGS_SIGNATURE_HEADER)
        if not presented or not presented.strip():
            raise SignatureError(field, "is missing")
        stamps: list[str] = []
        digests: list[str] = []
        for item in presented.split(","):
            name, _, value = item.strip().partition("=")
            if name == "t":
                stamps.append(value.strip())
            elif name == "v1":
                digests.append(value.strip().lower())
        if len(stamps) != 1:
            raise SignatureError(field, "must carry exactly one t=<unix seconds>")
        if not digests:
            raise SignatureError(field, "must carry v1=<hex HMAC-SHA256>")
        try:
            timestamp = int(stamps[0])
        except ValueError:
            raise SignatureError(field, "t must be Unix seconds (an integer)") from None
        valid = False
        for secret in self._secrets:
            expected = hmac_signature(secret, timestamp, request.body)
            for digest in digests:
                valid |= _same(expected, digest)
        if not valid:
            raise SignatureError(field, "does not match t and the body under any configured "
                                        "secret")
        _fresh(field, stamps[0], self._clock, self._tolerance_s)


# ---------------------------------------------------------------- svix (resend)

SVIX_ID_HEADER = "svix-id"
SVIX_TIMESTAMP_HEADER = "svix-timestamp"
SVIX_SIGNATURE_HEADER = "svix-signature"
SVIX_SECRET_PREFIX = "whsec_"


def svix_key(secret: str) -> bytes:
    """The key of a Svix signing secret (``whsec_`` and base64, as Resend shows it);
    ValueError if it is not base64."""
    try:
        return base64.b64decode(secret.strip().removeprefix(SVIX_SECRET_PREFIX),
                                validate=True)
    except binascii.Error:
        raise ValueError("is not a signing secret (whsec_ and base64)") from None


def svix_signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The base64 HMAC-SHA256 of ``"<id>.<timestamp>." + body``."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class SvixVerifier:
    """Webhooks signed the Svix way (Resend's): ``svix-signature: v1,<base64> …`` over
    the ``svix-id``, the ``svix-timestamp`` and the body, under one of the keys."""

    def __init__(self, keys: Sequence[bytes], *, clock: Clock,
                 tolerance_s: float = DEFAULT_TOLERANCE_S, provider: str = "resend") -> None:
        if not keys:
            raise ConfigurationError(f"webhooks.{provider}.secret_env", "no secret given")
        self.provider = provider
        self._keys = tuple(keys)
        self._clock = clock
        self._tolerance_s = tolerance_s

    def verify(self, request: WebhookRequest) -> None:
        """Check the signature under any key, then the timestamp's age."""
        message_id = request.header(SVIX_ID_HEADER)
        stamp = request.header(SVIX_TIMESTAMP_HEADER)
        presented = request.header(SVIX_SIGNATURE_HEADER)
        for name, value in ((SVIX_ID_HEADER, message_id), (SVIX_TIMESTAMP_HEADER, stamp),
                            (SVIX_SIGNATURE_HEADER, presented)):
            if not value or not value.strip():
                raise SignatureError(f"header.{name}", "is missing")
        assert message_id is not None and stamp is not None and presented is not None
        field = f"header.{SVIX_SIGNATURE_HEADER}"
        signatures = [part.partition(",")[2] for part in presented.split()
                      if part.startswith("v1,")]
        if not signatures:
            raise SignatureError(field, "must carry v1,<base64 HMAC-SHA256>")
        try:
            timestamp = int(stamp.strip())
        except ValueError:
            raise SignatureError(f"header.{SVIX_TIMESTAMP_HEADER}",
                                 "must be Unix seconds (an integer)") from None
        valid = False
        for key in self._keys:
            expected = svix_signature(key, message_id.strip(), timestamp, request.body)
            for signature in signatures:
                valid |= _same(expected, signature)
        if not valid:
            raise SignatureError(field, "does not match the id, the timestamp and the body "
                                        "under any configured secret")
        _fresh(f"header.{SVIX_TIMESTAMP_HEADER}", stamp, self._clock, self._tolerance_s)


# ---------------------------------------------------------------- basic auth


class BasicAuthVerifier:
    """HTTP basic auth with one username and password (Postmark's only option)."""

    def __init__(self, username: str, password: str, *, provider: str = "postmark") -> None:
        if not username or not password:
            raise ConfigurationError(f"webhooks.{provider}", "basic auth needs a username "
                                                             "and a password")
        self.provider = provider
        self._username = username.encode()
        self._password = password.encode()

    def verify(self, request: WebhookRequest) -> None:
        """Check ``Authorization: Basic …`` against the configured credentials."""
        field = "header.Authorization"
        header = (request.header("Authorization") or "").strip()
        if not header:
            raise SignatureError(field, "is missing; send HTTP basic auth", challenge=BASIC_REALM)
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "basic" or not credentials.strip():
            raise SignatureError(field, "must be 'Basic <base64 username:password>'",
                                 challenge=BASIC_REALM)
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except binascii.Error:
            raise SignatureError(field, "credentials are not base64",
                                 challenge=BASIC_REALM) from None
        username, _, password = decoded.partition(b":")
        # Both compared, always: the time taken does not say which one was wrong.
        valid = _same(self._username, username) & _same(self._password, password)
        if not valid:
            raise SignatureError(field, "username or password is wrong", challenge=BASIC_REALM)


# ---------------------------------------------------------------- not configured


class Unconfigured:
    """A provider whose secrets are not set: every request is refused, saying which
    environment variable to set (its name, never a value)."""

    def __init__(self, provider: str, field: str, missing: str) -> None:
        self.provider = provider
        self._field = field
        self._missing = missing

    def verify(self, request: WebhookRequest) -> None:
        raise SignatureError(self._field, f"{self.provider} webhooks are not configured "
                                          f"(set {self._missing})")


# ---------------------------------------------------------------- from settings


def _values(env: Mapping[str, str], names: str) -> list[str]:
    """Every comma-separated value of every comma-separated variable name in ``names``."""
    found: list[str] = []
    for name in (n.strip() for n in names.split(",")):
        if name:
            found += [v.strip() for v in env.get(name, "").split(",") if v.strip()]
    return found


def verifiers_from(settings: WebhookSettings, env: Mapping[str, str],
                   clock: Clock) -> dict[str, Verifier]:
    """One verifier per provider from the secrets the environment holds; a provider
    whose variables are unset refuses every request. A SendGrid key that does not load
    is a ConfigurationError naming the setting (and the variable, never its value)."""
    verifiers: dict[str, Verifier] = {}
    tokens = _values(env, settings.twilio.auth_token_env)
    verifiers["twilio"] = (
        TwilioVerifier(tokens) if tokens else
        Unconfigured("twilio", f"header.{TWILIO_SIGNATURE_HEADER}",
                     settings.twilio.auth_token_env))
    sendgrid = settings.sendgrid
    keys: list[ec.EllipticCurvePublicKey] = []
    for index, text in enumerate(_values(env, sendgrid.public_key_env)):
        try:
            keys.append(load_public_key(text))
        except ValueError as exc:
            raise ConfigurationError("webhooks.sendgrid.public_key_env",
                                     f"key {index + 1} in {sendgrid.public_key_env}: "
                                     f"{exc}") from None
    verifiers["sendgrid"] = (
        SendGridVerifier(keys, clock=clock, tolerance_s=sendgrid.tolerance_s) if keys else
        Unconfigured("sendgrid", f"header.{SENDGRID_SIGNATURE_HEADER}",
                     sendgrid.public_key_env))
    postmark = settings.postmark
    username, password = env.get(postmark.username_env), env.get(postmark.password_env)
    verifiers["postmark"] = (
        BasicAuthVerifier(username, password) if username and password else
        Unconfigured("postmark", "header.Authorization",
                     f"{postmark.username_env} and {postmark.password_env}"))
    resend = settings.resend
    svix_keys: list[bytes] = []
    for index, text in enumerate(_values(env, resend.secret_env)):
        try:
            svix_keys.append(svix_key(text))
        except ValueError as exc:
            raise ConfigurationError("webhooks.resend.secret_env",
                                     f"secret {index + 1} in {resend.secret_env} {exc}"
                                     ) from None
    verifiers["resend"] = (
        SvixVerifier(svix_keys, clock=clock, tolerance_s=resend.tolerance_s) if svix_keys
        else Unconfigured("resend", f"header.{SVIX_SIGNATURE_HEADER}", resend.secret_env))
    secrets = _values(env, settings.generic.secrets_env)
    verifiers["generic"] = (
        HmacVerifier(secrets, clock=clock, tolerance_s=settings.generic.tolerance_s)
        if secrets else
        Unconfigured("generic", f"header.{TIDINGS_SIGNATURE_HEADER}",
                     settings.generic.secrets_env))
    return verifiers
