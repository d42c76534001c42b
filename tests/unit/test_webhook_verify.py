"""Webhook verifiers: Twilio's signature (with its published vectors), SendGrid's signed
event webhook (with its published vector and keys made here), the generic HMAC with
rotation and tolerance, basic auth, and building them from settings."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tidings.config.settings import WebhookSettings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.webhooks.verify import (
    BasicAuthVerifier,
    HmacVerifier,
    SendGridVerifier,
    SignatureError,
    TwilioVerifier,
    Unconfigured,
    WebhookRequest,
    load_public_key,
    signature_header,
    twilio_body_hash,
    twilio_signature,
    verifiers_from,
)

# ---------------------------------------------------------------- twilio
# Twilio's documented example (its helper libraries test against the same vectors).
TWILIO_TOKEN = "12345"
TWILIO_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
TWILIO_PARAMS = {"CallSid": "CA1234567890ABCDE", "Caller": "+14158675309", "Digits": "1234",
                 "From": "+14158675309", "To": "+18005551212"}
TWILIO_SIGNATURE = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
TWILIO_JSON_BODY = b'{"property": "value", "boolean": true}'
TWILIO_JSON_HASH = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"


def form(params: dict[str, str] | list[tuple[str, str]]) -> bytes:
    from urllib.parse import urlencode

    return urlencode(params).encode()


def twilio_request(signature: str | None, *, url: str = TWILIO_URL,
                   body: bytes | None = None) -> WebhookRequest:
    headers = {} if signature is None else {"X-Twilio-Signature": signature}
    return WebhookRequest(url=url, headers=headers,
                          body=form(TWILIO_PARAMS) if body is None else body)


def test_twilio_signature_reproduces_the_documented_example() -> None:
    assert twilio_signature(TWILIO_TOKEN, TWILIO_URL, TWILIO_PARAMS.items()) == TWILIO_SIGNATURE


def test_twilio_signature_sorts_repeated_parameters_by_value() -> None:
    params = [("Sid", "CA123"), ("SidAccount", "AC123"), ("Digits", "5678"), ("Digits", "1234")]

    assert twilio_signature(TWILIO_TOKEN, TWILIO_URL, params) == "IK+Dwps556ElfBT0I3Rgjkr1wJU="


def test_the_documented_request_verifies() -> None:
    TwilioVerifier([TWILIO_TOKEN]).verify(twilio_request(TWILIO_SIGNATURE))


def test_the_header_name_is_matched_in_any_case() -> None:
    request = WebhookRequest(url=TWILIO_URL, headers={"x-twilio-signature": TWILIO_SIGNATURE},
                             body=form(TWILIO_PARAMS))

    TwilioVerifier([TWILIO_TOKEN]).verify(request)


@pytest.mark.parametrize(("url", "signature"), [
    # Twilio signs with or without the port; its helpers try both (their vectors).
    (TWILIO_URL.replace(".com", ".com:1234"), TWILIO_SIGNATURE),
    (TWILIO_URL, "kvajT1Ptam85bY51eRf/AJRuM3w="),  # signed with :443
    (TWILIO_URL.replace("https", "http"), "0ZXoZLH/DfblKGATFgpif+LLRf4="),  # signed with :80
    (TWILIO_URL.replace(".com", ".com:1234").replace("https", "http"),
     "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),
])
def test_a_signature_over_the_url_with_or_without_its_port_verifies(url: str,
                                                                     signature: str) -> None:
    TwilioVerifier([TWILIO_TOKEN]).verify(twilio_request(signature, url=url))


def test_a_json_body_is_covered_by_its_hash_in_the_url() -> None:
    url = f"{TWILIO_URL}&bodySHA256={TWILIO_JSON_HASH}"
    assert twilio_body_hash(TWILIO_JSON_BODY) == TWILIO_JSON_HASH

    TwilioVerifier([TWILIO_TOKEN]).verify(
        twilio_request("a9nBmqA0ju/hNViExpshrM61xv4=", url=url, body=TWILIO_JSON_BODY))

    with pytest.raises(SignatureError) as refused:
        TwilioVerifier([TWILIO_TOKEN]).verify(twilio_request(
            "a9nBmqA0ju/hNViExpshrM61xv4=", url=url, body=TWILIO_JSON_BODY + b" "))
    assert refused.value.field == "query.bodySHA256"


def test_either_auth_token_verifies_during_a_rotation() -> None:
    verifier = TwilioVerifier(["new-token", TWILIO_TOKEN])

    verifier.verify(twilio_request(TWILIO_SIGNATURE))
    verifier.verify(twilio_request(
        twilio_signature("new-token", TWILIO_URL, TWILIO_PARAMS.items())))


@pytest.mark.parametrize(("request_", "message"), [
    (twilio_request(None), "is missing"),
    (twilio_request(""), "is missing"),
    (twilio_request(TWILIO_SIGNATURE, url=TWILIO_URL + "&x=1"), "does not match"),
    (twilio_request(TWILIO_SIGNATURE, body=form({**TWILIO_PARAMS, "Digits": "9"})),
     "does not match"),
    (twilio_request(TWILIO_SIGNATURE.lower()), "does not match"),
])
def test_a_bad_or_missing_twilio_signature_is_refused_naming_the_header(
    request_: WebhookRequest, message: str,
) -> None:
    with pytest.raises(SignatureError) as refused:
        TwilioVerifier([TWILIO_TOKEN]).verify(request_)

    assert refused.value.field == "header.X-Twilio-Signature"
    assert message in refused.value.message
    assert TWILIO_TOKEN not in str(refused.value)


# ---------------------------------------------------------------- sendgrid
# SendGrid's published vector (its helper libraries test against it).
SENDGRID_KEY = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdb"
                "cwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==")
SENDGRID_SIGNATURE = ("MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsb"
                      "VRamr2nlxFDWYNH2j/0=")
SENDGRID_TIMESTAMP = "1588788367"
SENDGRID_PAYLOAD = (b'{"category":"example_payload","event":"test_event",'
                    b'"message_id":"message_id"}')


def sendgrid_request(signature: str | None, timestamp: str | None,
                     body: bytes = SENDGRID_PAYLOAD) -> WebhookRequest:
    headers = {}
    if signature is not None:
        headers["X-Twilio-Email-Event-Webhook-Signature"] = signature
    if timestamp is not None:
        headers["X-Twilio-Email-Event-Webhook-Timestamp"] = timestamp
    return WebhookRequest(url="https://h.test/v1/webhooks/sendgrid", headers=headers, body=body)


def sendgrid_verifier(*keys: str, at: float = 1588788367 + 10) -> SendGridVerifier:
    return SendGridVerifier([load_public_key(k) for k in keys or (SENDGRID_KEY,)],
                            clock=FakeClock(at), tolerance_s=300)


def new_key() -> tuple[ec.EllipticCurvePrivateKey, str]:
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, base64.b64encode(der).decode()


def sendgrid_sign(private: ec.EllipticCurvePrivateKey, timestamp: str, body: bytes) -> str:
    signature = private.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return base64.b64encode(signature).decode()


def test_sendgrids_published_vector_verifies() -> None:
    sendgrid_verifier().verify(sendgrid_request(SENDGRID_SIGNATURE, SENDGRID_TIMESTAMP))


def test_a_signature_made_here_verifies_under_its_key_and_no_other() -> None:
    private, public = new_key()
    _, other = new_key()
    body = json.dumps([{"event": "delivered", "sg_message_id": "abc.filter1"}]).encode()
    request = sendgrid_request(sendgrid_sign(private, "1780000000", body), "1780000000", body)

    sendgrid_verifier(public, at=1780000000).verify(request)
    sendgrid_verifier(other, public, at=1780000000).verify(request)  # a key rotation
    with pytest.raises(SignatureError, match="does not match"):
        sendgrid_verifier(other, at=1780000000).verify(request)


@pytest.mark.parametrize(("request_", "field", "message"), [
    (sendgrid_request(None, SENDGRID_TIMESTAMP), "Signature", "is missing"),
    (sendgrid_request(SENDGRID_SIGNATURE, None), "Timestamp", "is missing"),
    (sendgrid_request("not base64!", SENDGRID_TIMESTAMP), "Signature", "is not base64"),
    (sendgrid_request(SENDGRID_SIGNATURE, "1588788368"), "Signature", "does not match"),
    (sendgrid_request(SENDGRID_SIGNATURE, SENDGRID_TIMESTAMP, SENDGRID_PAYLOAD + b"\n"),
     "Signature", "does not match"),
])
def test_a_bad_or_missing_sendgrid_signature_is_refused_naming_the_header(
    request_: WebhookRequest, field: str, message: str,
) -> None:
    with pytest.raises(SignatureError) as refused:
        sendgrid_verifier().verify(request_)

    assert refused.value.field == f"header.X-Twilio-Email-Event-Webhook-{field}"
    assert message in refused.value.message


def test_a_validly_signed_but_stale_sendgrid_timestamp_is_refused() -> None:
    with pytest.raises(SignatureError) as refused:
        sendgrid_verifier(at=1588788367 + 301).verify(
            sendgrid_request(SENDGRID_SIGNATURE, SENDGRID_TIMESTAMP))

    assert refused.value.field == "header.X-Twilio-Email-Event-Webhook-Timestamp"
    assert "301 s from the server's clock" in refused.value.message


def test_a_public_key_loads_from_base64_der_or_pem_and_must_be_p256() -> None:
    private, public = new_key()
    pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)

    assert load_public_key(public).public_numbers() == load_public_key(
        pem.decode()).public_numbers()
    with pytest.raises(ValueError, match="not a base64 DER or PEM"):
        load_public_key("definitely not a key")
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ValueError, match="P-256"):
        load_public_key(base64.b64encode(p384).decode())


# ---------------------------------------------------------------- generic HMAC
NOW = 1_780_000_000


def hmac_request(header: str | None, body: bytes = b'{"event":"delivered"}') -> WebhookRequest:
    headers = {} if header is None else {"X-Tidings-Signature": header}
    return WebhookRequest(url="https://h.test/v1/webhooks/generic", headers=headers, body=body)


def hmac_verifier(*secrets: str, at: float = NOW) -> HmacVerifier:
    return HmacVerifier(list(secrets or ("current",)), clock=FakeClock(at), tolerance_s=300)


def test_a_constructed_hmac_vector_verifies() -> None:
    # printf '%s' '1780000000.{"event":"delivered"}' | openssl dgst -sha256 -hmac current
    header = signature_header("current", NOW, b'{"event":"delivered"}')
    assert header == ("t=1780000000,v1=3967a0acfc7edcd108501dbcb02ad8cf"
                      "76b4760cecec31862ff30eb16b31f5eb")

    hmac_verifier().verify(hmac_request(header))


def test_either_secret_verifies_during_a_rotation_and_several_v1_are_accepted() -> None:
    body = b"[]"
    verifier = hmac_verifier("new", "old")

    verifier.verify(hmac_request(signature_header("old", NOW, body), body))
    verifier.verify(hmac_request(signature_header("new", NOW, body), body))
    both = (f"t={NOW},v1={signature_header('unknown', NOW, body).split('v1=')[1]},"
            f"v1={signature_header('new', NOW, body).split('v1=')[1]}")
    verifier.verify(hmac_request(both, body))


@pytest.mark.parametrize("skew", [-300, 300])
def test_a_timestamp_within_the_tolerance_verifies(skew: int) -> None:
    hmac_verifier(at=NOW + skew).verify(hmac_request(
        signature_header("current", NOW, b'{"event":"delivered"}')))


@pytest.mark.parametrize(("header", "message"), [
    (None, "is missing"),
    ("v1=abc", "exactly one t="),
    (f"t={NOW},t={NOW},v1=00", "exactly one t="),
    (f"t={NOW}", "must carry v1="),
    ("t=soon,v1=00", "t must be Unix seconds"),
    (signature_header("wrong", NOW, b'{"event":"delivered"}'), "does not match"),
    (signature_header("current", NOW, b'{"event":"bounced"}'), "does not match"),
    (signature_header("current", NOW - 301, b'{"event":"delivered"}'), "301 s from"),
    (signature_header("current", NOW + 301, b'{"event":"delivered"}'), "301 s from"),
    # Validly signed by a sender with a bug: no float holds it, so no skew to subtract.
    (signature_header("current", int("9" * 400), b'{"event":"delivered"}'), "inf s from"),
])
def test_a_bad_missing_or_stale_hmac_signature_is_refused(header: str | None,
                                                          message: str) -> None:
    with pytest.raises(SignatureError) as refused:
        hmac_verifier().verify(hmac_request(header))

    assert refused.value.field == "header.X-Tidings-Signature"
    assert message in refused.value.message
    assert "current" not in str(refused.value)


# ---------------------------------------------------------------- basic auth


def basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_basic_auth_with_the_configured_credentials_verifies() -> None:
    verifier = BasicAuthVerifier("postmark", "pa:ss wörd")

    verifier.verify(WebhookRequest(url="https://h.test", headers=basic("postmark", "pa:ss wörd"),
                                   body=b"{}"))


@pytest.mark.parametrize(("headers", "message"), [
    ({}, "is missing"),
    ({"Authorization": "Bearer abc"}, "must be 'Basic"),
    ({"Authorization": "Basic !!!"}, "not base64"),
    (basic("postmark", "wrong"), "username or password is wrong"),
    (basic("someone", "secret-pw"), "username or password is wrong"),
    (basic("postmark", ""), "username or password is wrong"),
])
def test_bad_or_missing_basic_auth_is_refused_with_a_challenge(headers: dict[str, str],
                                                               message: str) -> None:
    with pytest.raises(SignatureError) as refused:
        BasicAuthVerifier("postmark", "secret-pw").verify(
            WebhookRequest(url="https://h.test", headers=headers, body=b"{}"))

    assert refused.value.field == "header.Authorization"
    assert message in refused.value.message
    assert refused.value.challenge == 'Basic realm="tidings webhooks"'
    assert "secret-pw" not in str(refused.value)


# ---------------------------------------------------------------- from settings


def test_verifiers_are_built_from_the_variables_the_settings_name() -> None:
    _, public = new_key()
    settings = WebhookSettings.model_validate({"generic": {"secrets_env": "HOOK_A, HOOK_B"}})
    env = {"TWILIO_AUTH_TOKEN": "tok-1, tok-2", "SENDGRID_WEBHOOK_PUBLIC_KEY": public,
           "POSTMARK_WEBHOOK_USERNAME": "pm", "POSTMARK_WEBHOOK_PASSWORD": "pw",
           "HOOK_A": "a1", "HOOK_B": "b1,b2",
           "RESEND_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"rk").decode()}

    verifiers = verifiers_from(settings, env, FakeClock(NOW))

    assert {name: type(v).__name__ for name, v in verifiers.items()} == {
        "twilio": "TwilioVerifier", "sendgrid": "SendGridVerifier",
        "postmark": "BasicAuthVerifier", "resend": "SvixVerifier",
        "generic": "HmacVerifier"}
    for secret in ("a1", "b1", "b2"):
        verifiers["generic"].verify(hmac_request(signature_header(secret, NOW, b"x"), b"x"))
    verifiers["twilio"].verify(twilio_request(
        twilio_signature("tok-2", TWILIO_URL, TWILIO_PARAMS.items())))


def test_a_provider_without_its_secrets_refuses_everything_naming_the_variable() -> None:
    verifiers = verifiers_from(WebhookSettings(), {"POSTMARK_WEBHOOK_USERNAME": "pm"},
                               FakeClock(NOW))

    assert all(isinstance(v, Unconfigured) for v in verifiers.values())
    with pytest.raises(SignatureError) as refused:
        verifiers["postmark"].verify(WebhookRequest(url="https://h.test",
                                                    headers=basic("pm", "x"), body=b""))
    assert refused.value.field == "header.Authorization"
    assert refused.value.message == ("postmark webhooks are not configured (set "
                                     "POSTMARK_WEBHOOK_USERNAME and POSTMARK_WEBHOOK_PASSWORD)")


def test_a_sendgrid_key_that_does_not_load_is_a_settings_error_without_its_value() -> None:
    with pytest.raises(ConfigurationError) as refused:
        verifiers_from(WebhookSettings(), {"SENDGRID_WEBHOOK_PUBLIC_KEY": "Zm9vYmFy"},
                       FakeClock(NOW))

    assert refused.value.field == "webhooks.sendgrid.public_key_env"
    assert "SENDGRID_WEBHOOK_PUBLIC_KEY" in refused.value.message
    assert "Zm9vYmFy" not in refused.value.message


def test_a_resend_secret_that_is_not_one_names_its_setting_not_its_value() -> None:
    with pytest.raises(ConfigurationError) as caught:
        verifiers_from(WebhookSettings(), {"RESEND_WEBHOOK_SECRET": "whsec_not*base64!"},
                       FakeClock(0.0))
    assert caught.value.field == "webhooks.resend.secret_env"
    assert "RESEND_WEBHOOK_SECRET" in caught.value.message
    assert "not*base64" not in caught.value.message
