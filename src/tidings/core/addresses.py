"""Address checks at send time: is this an address the channel can deliver to at all?

``check_address`` answers with a short rejection reason or None. A reason never
contains the address (it is personal data and reasons land in the ledger and logs).
``normalize_address`` is the one form an address is suppressed and looked up under
(``tidings.core.suppression``), whoever typed it and however.

Email uses ``email-validator`` for syntax only (no DNS): dot-atom and quoted-string
rules, the RFC 5321 length limits, internationalized local parts and IDNA domains are
easy to get wrong by hand, and a false rejection here is a lost delivery. SMS wants
E.164: ``+``, a country code that does not start with 0, 8 to 15 digits in all. No
numbering-plan check: plans change faster than a pinned library, and a valid number
refused here could never be sent, whereas the provider's own refusal is already a
permanent outcome.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, get_args

from tidings.core.errors import InvalidInput

ChannelKind = Literal["email", "sms"]
#: The channel kinds tidings knows how to address and render for.
CHANNEL_KINDS: frozenset[str] = frozenset(get_args(ChannelKind))

_E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")
#: What people put between a phone number's digits: dropped by ``normalize_address``.
_PHONE_PUNCTUATION = re.compile(r"[\s().\-/]")
_DETAIL = re.compile(r"\s*\([^)]*\)")


def check_address(channel_kind: str, address: str, *, test_domains: bool = False) -> str | None:
    """Why ``address`` cannot be used on a channel of ``channel_kind``, or None if it can.

    ``test_domains`` also accepts email domains that are not globally deliverable but
    serve test set-ups: ``*.test`` and single-label names (``user@mailhost``).
    Raises ValueError for a channel kind other than ``email`` or ``sms``.
    """
    if channel_kind == "email":
        return _check_email(address, test_domains=test_domains)
    if channel_kind == "sms":
        return _check_phone(address)
    raise ValueError(f"unknown channel kind {channel_kind!r}; known: "
                     f"{', '.join(sorted(CHANNEL_KINDS))}")


def _check_email(address: str, *, test_domains: bool) -> str | None:
    if not isinstance(address, str) or not address:
        return "email address is empty"
    # Imported at the first email address checked, not with the module: most processes
    # that load the send-time gate never check one.
    from email_validator import EmailNotValidError, validate_email

    try:
        validate_email(address, check_deliverability=False, test_environment=test_domains,
                       globally_deliverable=not test_domains)
    except EmailNotValidError as exc:
        return f"invalid email address: {_without_address(str(exc), address)}"
    return None


def _check_phone(address: str) -> str | None:
    if not isinstance(address, str) or not address:
        return "phone number is empty"
    if _E164.match(address):
        return None
    digits = sum(c.isdigit() for c in address)
    if not address.startswith("+"):
        return "phone number is not in E.164 form: it must start with '+' and the country code"
    if not address[1:].isdigit() or not address[1:].isascii():
        return "phone number is not in E.164 form: only digits may follow the '+'"
    if address[1] == "0":
        return "phone number is not in E.164 form: a country code never starts with 0"
    return f"phone number is not in E.164 form: it has {digits} digits, 8 to 15 are allowed"


def _without_address(message: str, address: str) -> str:
    """The validator's message, unless it quotes a piece of the address.

    Parenthesized details (IDNA codec errors) may quote the domain, so they go; the
    listed bad characters stay (single characters identify no one).
    """
    message = _DETAIL.sub("", message).strip()
    for piece in re.split(r"[@.+]", address):
        if len(piece) >= 2 and re.search(rf"(?<!\w){re.escape(piece)}(?!\w)", message,
                                         re.IGNORECASE):
            return "the address is not valid"
    return message[:160]


def normalize_address(channel_kind: str, address: str) -> str:
    """The form ``address`` is suppressed and looked up under on a channel of
    ``channel_kind``. Total: it never refuses, so a send's own address always has one.

    Email: trimmed, Unicode NFC, and lower-cased whole, domain and local part alike.
    RFC 5321 lets a server tell ``Ann@`` from ``ann@``, but no mailbox provider does,
    and a suppression that misses the address a bounce was for would let the next send
    go out. SMS: trimmed, the spaces, dots, dashes, slashes and brackets people write
    between digits dropped, and a leading ``00`` read as ``+`` (E.164 as the send-time
    check wants it).
    """
    text = unicodedata.normalize("NFC", address.strip())
    if channel_kind == "sms":
        digits = _PHONE_PUNCTUATION.sub("", text)
        return "+" + digits[2:] if digits.startswith("00") else digits
    return text.lower()


def checked_address(channel_kind: str, address: str, field: str) -> str:
    """``address`` normalised, or InvalidInput naming ``field`` when no channel of
    ``channel_kind`` could send to it (an operator's entry: test domains allowed)."""
    if channel_kind not in CHANNEL_KINDS:
        raise InvalidInput("kind", f"must be one of {', '.join(sorted(CHANNEL_KINDS))}, "
                                   f"not {channel_kind!r}")
    if not isinstance(address, str) or not address.strip():
        raise InvalidInput(field, "is empty")
    normalized = normalize_address(channel_kind, address)
    problem = check_address(channel_kind, normalized, test_domains=True)
    if problem is not None:
        raise InvalidInput(field, problem)
    return normalized
