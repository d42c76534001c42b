"""Unsubscribe tokens: who a one-click unsubscribe link is for, signed so it cannot be forged.

A token names one recipient on one channel of one campaign: ``Subject(recipient_id,
address, channel, campaign)`` (``campaign`` is ``""`` for mail sent by ``notify``). It
is the versioned canonical payload, a JSON array ``["u1", recipient_id, address,
channel, campaign]``, and its HMAC-SHA256 under a secret, both base64url without
padding, joined by a dot::

    <payload>.<mac>

A recipient id longer than ``MAX_WHOLE_ID`` characters is not carried whole (a
2,000-character id made a token over ``MAX_TOKEN_CHARS``, and a header line over RFC
5322's 998): the payload is then ``["u2", digest, address, channel, campaign, key]``,
the digest the SHA-256 of the id (base64url) and ``key`` the intent the mail was sent
for, by which the id is found again (``Subject.names`` checks it is the one).

The MAC covers a domain label and the payload's exact bytes, so a changed character
of either part, a payload taken from another token, or a token signed under another
secret fails; ``verify`` compares in constant time and answers None for every kind of
failure alike (it never says which part failed). A token carries no time: the link in
a mail read a year later still unsubscribes, and a replayed one only repeats what was
recorded. Several secrets verify (a rotation: the first signs). The payload is signed,
not encrypted: the address it names is readable by whoever holds the link, as it is
from the mail itself. Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

VERSION: Final = "u1"
"""The payload's version: a later shape gets a new one, and ``verify`` refuses what it
does not know."""

VERSION_DIGEST: Final = "u2"
"""The payload that carries a long recipient id by its digest, and the intent's key."""

MAX_WHOLE_ID: Final = 64
"""The longest recipient id a token carries whole; a longer one goes as its digest."""

MAX_TOKEN_CHARS: Final = 2048
"""A longer token is refused before any decoding (a URL of a megabyte is no link of ours)."""

_LABEL: Final = b"tidings-unsubscribe\x00"


@dataclass(frozen=True, kw_only=True)
class Subject:
    """Whom a token unsubscribes: a recipient's address on a channel, for a campaign."""

    recipient_id: str
    address: str
    channel: str
    campaign: str = ""
    """The campaign the mail was sent for; ``""`` for a send of ``notify``."""
    key: str = ""
    """The intent the mail was sent for: carried only with a long id's digest."""
    recipient_digest: str = ""
    """A verified ``u2`` token's digest of the recipient id (``recipient_id`` is then
    ``""``: the intent ``key`` names it)."""

    def names(self, recipient_id: str) -> bool:
        """Whether this subject is ``recipient_id`` (by its digest where it has one)."""
        if self.recipient_digest:
            return hmac.compare_digest(digest_of(recipient_id), self.recipient_digest)
        return recipient_id == self.recipient_id


def digest_of(recipient_id: str) -> str:
    """The SHA-256 of a recipient id, base64url without padding (43 characters)."""
    return _b64(hashlib.sha256(recipient_id.encode("utf-8")).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    """The bytes of unpadded base64url ``text``, or None; only the canonical spelling of
    those bytes is taken (no padding, no stray bits), so two spellings never verify."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if _b64(raw) == text else None


def payload(subject: Subject) -> bytes:
    """The canonical bytes a token signs (JSON, no spaces, UTF-8): the recipient id
    whole (``u1``), or past ``MAX_WHOLE_ID`` characters its digest and the intent's key
    (``u2``)."""
    fields: list[str]
    if subject.recipient_digest or len(subject.recipient_id) > MAX_WHOLE_ID:
        fields = [VERSION_DIGEST, subject.recipient_digest or digest_of(subject.recipient_id),
                  subject.address, subject.channel, subject.campaign, subject.key]
    else:
        fields = [VERSION, subject.recipient_id, subject.address, subject.channel,
                  subject.campaign]
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _mac(secret: bytes, body: bytes) -> bytes:
    return hmac.new(secret, _LABEL + body, hashlib.sha256).digest()


def sign(subject: Subject, secret: bytes) -> str:
    """The token for ``subject`` under ``secret`` (URL-safe: letters, digits, ``-_.``)."""
    if not secret:
        raise ValueError("an unsubscribe token needs a secret")
    body = payload(subject)
    return f"{_b64(body)}.{_b64(_mac(secret, body))}"


def verify(token: str, secrets: Sequence[bytes]) -> Subject | None:
    """The subject ``token`` was signed for under one of ``secrets``, or None: a forged,
    altered, truncated or unknown-version token, or text that is no token at all. Never
    raises."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        return None
    head, tail = token.split(".")
    body, mac = _unb64(head), _unb64(tail)
    if body is None or mac is None or len(mac) != hashlib.sha256().digest_size:
        return None
    valid = False
    for secret in secrets:
        # Every secret is tried, so the time taken does not say which one matched.
        valid |= bool(secret) and hmac.compare_digest(_mac(secret, body), mac)
    if not valid:
        return None
    try:
        fields = json.loads(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        return None
    if len(fields) == 5 and fields[0] == VERSION:
        _, recipient_id, address, channel, campaign = fields
        subject = Subject(recipient_id=recipient_id, address=address, channel=channel,
                          campaign=campaign)
    elif len(fields) == 6 and fields[0] == VERSION_DIGEST:
        _, digest, address, channel, campaign, key = fields
        if not digest or not key:
            return None
        subject = Subject(recipient_id="", recipient_digest=digest, address=address,
                          channel=channel, campaign=campaign, key=key)
    else:
        return None
    if not (subject.recipient_id or subject.recipient_digest) or not address or not channel:
        return None
    # Signed bytes that are not this payload's canonical form are not ours.
    return subject if payload(subject) == body else None


def secrets_from(value: str | None) -> list[bytes]:
    """Comma-separated secrets as an environment variable holds them (blanks dropped)."""
    return [s.strip().encode("utf-8") for s in (value or "").split(",") if s.strip()]
