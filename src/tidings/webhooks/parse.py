"""Provider payloads to normalized ``ProviderEvent``s, framework-free.

Each parser takes the raw body (already verified) and ``now`` (the time of an event
whose provider gives none) and returns the events tidings records plus a count of the
reports it ignores (opens, clicks, "queued", "sent", …). A malformed payload raises
``InvalidInput`` naming the field (``body[2].sg_message_id``); nothing of it is recorded.

=========  ==========================================  ============================
provider   payload                                     recorded
=========  ==========================================  ============================
twilio     status callback, form-encoded (or a JSON    delivered; undelivered ->
           object): ``MessageSid``, ``MessageStatus``  bounced; failed
sendgrid   JSON array of events: ``event``,            delivered; bounce ->
           ``sg_message_id``, ``timestamp``            bounced; dropped -> failed;
                                                       spamreport -> complained
postmark   one JSON record: ``RecordType``,            Delivery; Bounce;
           ``MessageID``, ``DeliveredAt``/``BouncedAt``  SpamComplaint
generic    JSON object or array: ``message_id``,       delivered, bounced,
           ``event``, ``at`` (optional), ``detail``      complained, failed
=========  ==========================================  ============================

A bounce carries how the provider classed it (``ProviderEvent.bounce``), which decides
whether it suppresses the address at once or counts toward the soft-bounce threshold
(``tidings.core.suppression``): SendGrid's ``type`` ``blocked`` is soft, ``bounce``
hard; Postmark's ``Type`` (``HardBounce``, ``BadEmailAddress`` and
``ManuallyDeactivated`` hard; ``SoftBounce``, ``Transient``, ``DnsError``, ``Blocked``
and ``Unknown`` soft; auto-replies and the like ``other``, neither); a Twilio
``undelivered``
with ``ErrorCode`` 30005 (unknown destination) or 30006 (landline or unreachable
carrier) hard, any other soft; the generic payload's ``bounce`` (``hard`` or
``soft``, hard when absent).

SendGrid's ``sg_message_id`` is the ``X-Message-Id`` it answered the send with (the
intent's receipt) followed by routing suffixes (``.filter0001.16648.5515E0B88.0``,
``.recvd-…``): the message id is the part before them. Details never carry an address
or a phone number: provider text goes through ``tidings.core.redaction.redact``.

Evidence. A report that names our delivery key, where the adapter put it, is also
``Evidence`` that settles an uncertain or held send (``tidings.recovery.evidence``):
SendGrid's ``custom_args`` come back as top-level event fields (``tidings_key``),
Postmark's ``Metadata`` as the record's ``Metadata`` (``tidings_key``, or
``tidings_key_sha256`` for a key over 80 characters), Twilio's status callback URL
carries ``?tidings_key=``, and the generic payload a ``key`` field. Every report of a
message the provider took is evidence of acceptance (SendGrid ``processed``,
``deferred``, opens and clicks included; Twilio ``queued``, ``sent`` …); SendGrid
``dropped`` and Twilio ``failed`` are evidence that it failed. A key that is no valid
delivery key is not evidence (the report is still recorded).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tidings.core.cron import check_instant
from tidings.core.errors import InvalidInput
from tidings.core.keys import check_text, make_storable, validate_key
from tidings.core.redaction import redact
from tidings.core.suppression import Bounce
from tidings.stores.base import ProviderEvent, ProviderEventType
from tidings.webhooks.verify import form_params

#: Longer is no provider's message id: refused rather than stored.
MAX_MESSAGE_ID = 256
#: Events one request may carry (SendGrid batches; the body limit bounds it too).
MAX_EVENTS = 10_000
_SENDGRID_SUFFIX = re.compile(r"\.(?:filter|recvd)")
T = ProviderEventType

TWILIO_TYPES = {"delivered": T.DELIVERED, "undelivered": T.BOUNCED, "failed": T.FAILED}
SENDGRID_TYPES = {"delivered": T.DELIVERED, "bounce": T.BOUNCED, "dropped": T.FAILED,
                  "spamreport": T.COMPLAINED}
POSTMARK_TYPES = {"Delivery": (T.DELIVERED, "DeliveredAt"), "Bounce": (T.BOUNCED, "BouncedAt"),
                  "SpamComplaint": (T.COMPLAINED, "BouncedAt")}
GENERIC_TYPES = {t.value: t for t in ProviderEventType}
#: Where the adapters put the delivery key (SendGrid custom_args, Postmark Metadata, the
#: Twilio status callback's query), and its SHA-256 when too long for Postmark.
KEY_FIELD = "tidings_key"
KEY_SHA256_FIELD = "tidings_key_sha256"
#: Reports that say the provider did not take the message (evidence of failure).
SENDGRID_FAILED = frozenset({"dropped"})
TWILIO_FAILED = frozenset({"failed"})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: How each provider's words class a bounce (see the module docstring).
SENDGRID_SOFT = frozenset({"blocked"})
POSTMARK_BOUNCES = {
    **dict.fromkeys(("HardBounce", "BadEmailAddress", "ManuallyDeactivated"), Bounce.HARD),
    **dict.fromkeys(("SoftBounce", "Transient", "DnsError", "Blocked", "Unknown"),
                    Bounce.SOFT)}
TWILIO_HARD = frozenset({"30005", "30006"})


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """A report naming our key (or its SHA-256): the provider took the message
    (``accepted``), or says it failed."""

    provider: str
    accepted: bool
    message_id: str | None = None
    key: str | None = None
    key_sha256: str | None = None
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class Parsed:
    """The events to record from one payload, and how many reports it ignored."""

    events: tuple[ProviderEvent, ...] = ()
    ignored: int = 0
    ignored_kinds: tuple[str, ...] = ()
    """The distinct kinds ignored (``open``, ``queued``, …), for logs and counters."""
    evidence: tuple[Evidence, ...] = ()
    """Reports that name our key, ignored ones included (see the module docstring)."""


class _Collector:
    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.events: list[ProviderEvent] = []
        self.ignored: list[str] = []
        self.evidence: list[Evidence] = []

    def witness(self, *, key: Any, key_sha256: Any = None, accepted: bool,
                message_id: str | None, detail: str | None) -> None:
        """Keep the report as evidence when it names a valid key (or a SHA-256 of one)."""
        digest = key_sha256.strip().lower() if isinstance(key_sha256, str) else None
        if isinstance(key, str):
            try:
                valid: str | None = validate_key(key.strip(), KEY_FIELD)
            except InvalidInput:
                valid = None
        else:
            valid = None
        if valid is None and not (digest and _SHA256.match(digest)):
            return
        self.evidence.append(Evidence(
            provider=self.provider, accepted=accepted, message_id=message_id, key=valid,
            key_sha256=None if valid is not None else digest, detail=detail))

    def parsed(self) -> Parsed:
        return Parsed(events=tuple(self.events), ignored=len(self.ignored),
                      ignored_kinds=tuple(sorted(set(self.ignored))),
                      evidence=tuple(self.evidence))


def _optional_id(obj: Mapping[str, Any], name: str) -> str | None:
    """``obj[name]`` as a message id when it is one, else None (evidence only)."""
    value = obj.get(name)
    if isinstance(value, str) and value.strip() and len(value) <= MAX_MESSAGE_ID \
            and not any(c.isspace() for c in value.strip()):
        return value.strip()
    return None


def key_from_url(url: str | None) -> str | None:
    """The ``tidings_key`` query parameter of a callback URL, if any."""
    if not url:
        return None
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=False):
        if name == KEY_FIELD:
            return value
    return None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput("body", f"is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput("body", "is nested too deeply to read") from None


def _text(obj: Mapping[str, Any], name: str, where: str) -> str:
    """The required non-empty string ``obj[name]``, stripped, that a store can hold."""
    value = obj.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{where}.{name}", "is missing" if value is None
                           else "must be a non-empty string")
    return check_text(value.strip(), f"{where}.{name}")


def _message_id(obj: Mapping[str, Any], name: str, where: str) -> str:
    value = _text(obj, name, where)
    if len(value) > MAX_MESSAGE_ID or any(c.isspace() for c in value):
        raise InvalidInput(f"{where}.{name}", f"must be at most {MAX_MESSAGE_ID} characters "
                                              "with no whitespace")
    return value


def _present(fields: Mapping[str, Any], *names: str) -> str:
    """The first of ``names`` that ``fields`` has (else the first: it is then missing)."""
    return next((n for n in names if n in fields), names[0])


def _unix(value: Any, field_name: str) -> float:
    # An int of 400 digits is no float: math.isfinite would raise OverflowError.
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or (isinstance(value, int) and abs(value) > 2**62)
            or not math.isfinite(value)):
        raise InvalidInput(field_name, "must be Unix seconds (a number)")
    return check_instant(value, field_name)


def _iso(value: Any, field_name: str) -> float:
    if not isinstance(value, str):
        raise InvalidInput(field_name, "must be an ISO 8601 time")
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(field_name, f"{value[:40]!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:  # a time without an offset is taken as UTC
        when = when.replace(tzinfo=UTC)
    return check_instant(when.timestamp(), field_name)


def _detail(*parts: Any) -> str | None:
    """Non-empty parts joined, with addresses and numbers scrubbed."""
    text = ": ".join(str(p).strip() for p in parts if p is not None and str(p).strip())
    # A provider's free text is kept, not refused (refusing would lose the report):
    # what a store cannot hold becomes U+FFFD, as an undecodable byte would.
    return make_storable(redact(text)) or None


def _objects(payload: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(field prefix, object)`` for a JSON object or each object of an array."""
    if isinstance(payload, dict):
        yield where, payload
        return
    if not isinstance(payload, list):
        raise InvalidInput(where, "must be a JSON object or an array of objects")
    if len(payload) > MAX_EVENTS:
        raise InvalidInput(where, f"holds {len(payload)} events, the limit is {MAX_EVENTS}")
    for index, item in enumerate(payload):
        if not isinstance(item, dict):
            raise InvalidInput(f"{where}[{index}]", "must be a JSON object")
        yield f"{where}[{index}]", item


# ---------------------------------------------------------------- twilio


def parse_twilio(body: bytes, *, now: float, url: str | None = None) -> Parsed:
    """A Twilio status callback: one message's status; times are ``now`` (Twilio sends
    none). ``url`` is the callback URL Twilio called (and signed): its ``tidings_key``
    names the delivery."""
    fields: Mapping[str, Any]
    if body.lstrip().startswith(b"{"):
        fields = _json(body)  # JSON text opening with "{" is an object
    else:
        try:
            fields = dict(form_params(body))
        except ValueError:
            raise InvalidInput("body", "is not UTF-8 form data") from None
    out = _Collector("twilio")
    # SmsSid / SmsStatus: the names older callbacks carry (newer ones carry both).
    status = _text(fields, _present(fields, "MessageStatus", "SmsStatus"), "body").lower()
    kind = TWILIO_TYPES.get(status)
    code = str(fields.get("ErrorCode") or "").strip()
    detail = _detail(status, f"ErrorCode {code}" if code.isdigit() else None)
    if kind is None:
        out.ignored.append(status)
        out.witness(key=key_from_url(url), accepted=True, detail=detail,
                    message_id=_optional_id(fields, _present(fields, "MessageSid", "SmsSid")))
        return out.parsed()
    message_id = _message_id(fields, _present(fields, "MessageSid", "SmsSid"), "body")
    bounce = None
    if kind is T.BOUNCED:
        bounce = Bounce.HARD if code in TWILIO_HARD else Bounce.SOFT
    out.events.append(ProviderEvent(
        provider="twilio", message_id=message_id, type=kind, at=now, detail=detail,
        bounce=bounce))
    out.witness(key=key_from_url(url), accepted=status not in TWILIO_FAILED,
                message_id=message_id, detail=detail)
    return out.parsed()


# ---------------------------------------------------------------- sendgrid


def sendgrid_message_id(sg_message_id: str) -> str:
    """The ``X-Message-Id`` an ``sg_message_id`` starts with (its routing suffix cut)."""
    match = _SENDGRID_SUFFIX.search(sg_message_id)
    return sg_message_id[:match.start()] if match and match.start() > 0 else sg_message_id


def parse_sendgrid(body: bytes, *, now: float) -> Parsed:
    """SendGrid's event webhook: a JSON array of events."""
    payload = _json(body)
    if not isinstance(payload, list):
        raise InvalidInput("body", "must be a JSON array of events")
    out = _Collector("sendgrid")
    for where, item in _objects(payload, "body"):
        name = _text(item, "event", where)
        kind = SENDGRID_TYPES.get(name)
        if kind is None:
            out.ignored.append(name)
            raw = _optional_id(item, "sg_message_id")
            out.witness(key=item.get(KEY_FIELD), accepted=True, detail=_detail(name),
                        message_id=sendgrid_message_id(raw) if raw else None)
            continue
        message_id = sendgrid_message_id(_message_id(item, "sg_message_id", where))
        at = now if item.get("timestamp") is None else _unix(item["timestamp"],
                                                              f"{where}.timestamp")
        bounce = None
        if kind is T.BOUNCED:
            detail = _detail(f"{name} ({item.get('type') or 'bounce'})", item.get("status"),
                             item.get("reason"))
            bounce = Bounce.SOFT if item.get("type") in SENDGRID_SOFT else Bounce.HARD
        elif kind is T.FAILED:
            detail = _detail(name, item.get("reason"))
        else:
            detail = _detail(name, item.get("response"))
        out.events.append(ProviderEvent(provider="sendgrid", message_id=message_id,
                                        type=kind, at=at, detail=detail, bounce=bounce))
        out.witness(key=item.get(KEY_FIELD), accepted=name not in SENDGRID_FAILED,
                    message_id=message_id, detail=detail)
    return out.parsed()


# ---------------------------------------------------------------- postmark


def parse_postmark(body: bytes, *, now: float) -> Parsed:
    """One Postmark webhook record (Delivery, Bounce, SpamComplaint; others ignored)."""
    payload = _json(body)
    if not isinstance(payload, dict):
        raise InvalidInput("body", "must be a JSON object (one Postmark record)")
    out = _Collector("postmark")
    record = _text(payload, "RecordType", "body")
    known = POSTMARK_TYPES.get(record)
    raw_metadata = payload.get("Metadata")
    metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    if known is None:
        out.ignored.append(record)
        # Opens, clicks, subscription changes: Postmark took the message.
        out.witness(key=metadata.get(KEY_FIELD), key_sha256=metadata.get(KEY_SHA256_FIELD),
                    accepted=True, message_id=_optional_id(payload, "MessageID"),
                    detail=_detail(record))
        return out.parsed()
    kind, time_field = known
    message_id = _message_id(payload, "MessageID", "body")
    at = now if payload.get(time_field) is None else _iso(payload[time_field],
                                                           f"body.{time_field}")
    bounce = None
    if kind is T.DELIVERED:
        detail = _detail(record, payload.get("Details"))
    else:
        # Never Email or Details verbatim: both carry the recipient's address.
        detail = _detail(record, payload.get("Type"), payload.get("Description"))
    if kind is T.BOUNCED and payload.get("Type") is not None:
        # Auto-replies, address changes, challenge mails: nothing about the address.
        bounce = POSTMARK_BOUNCES.get(str(payload["Type"]), Bounce.OTHER)
    out.events.append(ProviderEvent(provider="postmark", message_id=message_id, type=kind,
                                    at=at, detail=detail, bounce=bounce))
    out.witness(key=metadata.get(KEY_FIELD), key_sha256=metadata.get(KEY_SHA256_FIELD),
                accepted=True, message_id=message_id, detail=detail)
    return out.parsed()


# ---------------------------------------------------------------- resend

#: Resend's event types tidings records (the others: ignored, their key witnessed).
RESEND_TYPES = {"email.delivered": T.DELIVERED, "email.bounced": T.BOUNCED,
                "email.complained": T.COMPLAINED}
#: Resend's word for a message it took and could not send at all.
RESEND_FAILED = frozenset({"email.failed"})


def _resend_tags(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Resend event's tags: an object of names to values (a list of ``{name, value}``
    as sends give them is read too)."""
    tags = data.get("tags")
    if isinstance(tags, dict):
        return tags
    if isinstance(tags, list):
        return {str(t.get("name")): t.get("value") for t in tags if isinstance(t, dict)}
    return {}


def parse_resend(body: bytes, *, now: float) -> Parsed:
    """One Resend webhook event (``email.delivered``, ``email.bounced``,
    ``email.complained``; ``email.sent``, opens and clicks witness the key only). The key
    is the ``tidings_key_sha256`` tag every send carries."""
    payload = _json(body)
    if not isinstance(payload, dict):
        raise InvalidInput("body", "must be a JSON object (one Resend event)")
    out = _Collector("resend")
    kind_name = _text(payload, "type", "body")
    data = payload.get("data")
    if not isinstance(data, dict):
        raise InvalidInput("body.data", "must be an object")
    key_sha256 = _resend_tags(data).get(KEY_SHA256_FIELD)
    kind = RESEND_TYPES.get(kind_name)
    if kind is None:
        out.ignored.append(kind_name)
        out.witness(key=None, key_sha256=key_sha256, accepted=kind_name not in RESEND_FAILED,
                    message_id=_optional_id(data, "email_id"), detail=_detail(kind_name))
        return out.parsed()
    message_id = _message_id(data, "email_id", "body.data")
    at = now if payload.get("created_at") is None else _iso(payload["created_at"],
                                                           "body.created_at")
    bounce = None
    raw_bounce = data.get("bounce")
    details: Mapping[str, Any] = raw_bounce if isinstance(raw_bounce, dict) else {}
    # Never the recipient or the message text: the address may be in either.
    detail = _detail(kind_name, details.get("type"), details.get("subType"))
    if kind is T.BOUNCED:
        bounce = {"Permanent": Bounce.HARD, "Transient": Bounce.SOFT}.get(
            str(details.get("type")), Bounce.OTHER)
    out.events.append(ProviderEvent(provider="resend", message_id=message_id, type=kind,
                                    at=at, detail=detail, bounce=bounce))
    out.witness(key=None, key_sha256=key_sha256, accepted=True, message_id=message_id,
                detail=detail)
    return out.parsed()


# ---------------------------------------------------------------- generic


def parse_generic(body: bytes, *, now: float) -> Parsed:
    """``{"message_id", "event", "at", "detail", "key", "bounce"}`` or an array of them;
    ``at`` is Unix seconds or ISO 8601 (``now`` when absent); ``key``, when given, names
    the delivery (evidence); ``bounce`` (``hard``, ``soft`` or ``other``) classes a
    ``bounced`` event."""
    out = _Collector("generic")
    for where, item in _objects(_json(body), "body"):
        name = _text(item, "event", where)
        kind = GENERIC_TYPES.get(name)
        if kind is None:
            out.ignored.append(name)
            continue
        message_id = _message_id(item, "message_id", where)
        raw_at = item.get("at")
        if raw_at is None:
            at = now
        elif isinstance(raw_at, str):
            at = _iso(raw_at, f"{where}.at")
        else:
            at = _unix(raw_at, f"{where}.at")
        detail = item.get("detail")
        if detail is not None:
            check_text(detail, f"{where}.detail")
        bounce = item.get("bounce")
        if bounce is not None and (kind is not T.BOUNCED or not isinstance(bounce, str)
                                   or bounce not in {b.value for b in Bounce}):
            raise InvalidInput(f"{where}.bounce", "classes a bounced event only: one of "
                                                  f"{', '.join(Bounce)}")
        out.events.append(ProviderEvent(provider="generic", message_id=message_id, type=kind,
                                        at=at, detail=_detail(detail),
                                        bounce=None if bounce is None else Bounce(bounce)))
        out.witness(key=item.get("key"), accepted=kind is not T.FAILED,
                    message_id=message_id, detail=_detail(name, detail))
    return out.parsed()


PARSERS: Mapping[str, Callable[..., Parsed]] = {
    "twilio": parse_twilio, "sendgrid": parse_sendgrid, "postmark": parse_postmark,
    "resend": parse_resend, "generic": parse_generic,
}


def parse(provider: str, body: bytes, *, now: float, url: str | None = None) -> Parsed:
    """The events of ``provider``'s payload ``body`` (``url``: the URL it called, for the
    key a Twilio status callback carries); InvalidInput naming the field."""
    parser = PARSERS.get(provider)
    if parser is None:
        raise InvalidInput("provider", f"unknown provider {provider!r}; one of: "
                                       f"{', '.join(PARSERS)}")
    if provider == "twilio":
        return parse_twilio(body, now=now, url=url)
    return parser(body, now=now)
