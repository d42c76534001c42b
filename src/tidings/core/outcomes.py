"""What a provider answers: the outcome of a send, and of a lookup by key.

Kept apart from ``model`` so that ``states`` (which decides on outcomes) and ``model``
(which records states) never import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, kw_only=True)
class Accepted:
    receipt: str
    request_id: str | None = None
    via: str | None = None
    """The provider that accepted it, where the channel has fallbacks
    (``tidings.core.failover``); recorded as the acceptance's reason."""


@dataclass(frozen=True, kw_only=True)
class RateLimited:
    """HTTP 429 or equivalent; ``retry_after_s`` already parsed relative to the answer's time."""

    retry_after_s: float | None = None
    request_id: str | None = None
    reason: str = "rate limited"


@dataclass(frozen=True, kw_only=True)
class Transient:
    reason: str
    request_id: str | None = None


#: ``Permanent.code`` of a refusal because the recipient asked for no more messages
#: (an SMS recipient who replied STOP: Twilio's error 21610). The worker suppresses the
#: address (``tidings.core.suppression``), so no later send tries it.
RECIPIENT_STOPPED = "recipient_stopped"


@dataclass(frozen=True, kw_only=True)
class Permanent:
    reason: str
    request_id: str | None = None
    code: str | None = None
    """What kind of refusal, where tidings acts on it beyond rejecting this send
    (``RECIPIENT_STOPPED``); None for any other."""


@dataclass(frozen=True, kw_only=True)
class Uncertain:
    """The request may have been accepted but no answer came back."""

    reason: str
    request_id: str | None = None


Outcome = Accepted | RateLimited | Transient | Permanent | Uncertain


@dataclass(frozen=True, kw_only=True)
class LookupHint:
    """What a provider that cannot be searched by our key needs to find a send: the
    recipient and the window the request left in (Unix seconds)."""

    to: str
    sent_after: float
    sent_before: float


class LookupStatus(StrEnum):
    """The four answers a lookup by key can give."""

    ACCEPTED = "accepted"
    """Found: the provider took the message (``receipt`` is its id)."""
    FAILED = "failed"
    """Found: the provider took the request but reports the message failed."""
    NOT_FOUND = "not_found"
    """The provider's read API answered and has no message under the key."""
    UNKNOWN = "unknown"
    """The lookup itself failed (network, 5xx, 429): ask again later. Never read as
    not-found."""


@dataclass(frozen=True, kw_only=True)
class Lookup:
    """A provider's answer to "did you accept this key?"."""

    found: bool
    receipt: str | None = None
    failed: bool = False
    """Found, and the provider reports it failed (``found`` is True)."""
    unknown: bool = False
    """The lookup could not be answered (``found`` is False)."""
    detail: str | None = None

    @property
    def status(self) -> LookupStatus:
        if self.unknown:
            return LookupStatus.UNKNOWN
        if not self.found:
            return LookupStatus.NOT_FOUND
        return LookupStatus.FAILED if self.failed else LookupStatus.ACCEPTED

    @staticmethod
    def of_accepted(receipt: str | None, detail: str | None = None) -> Lookup:
        return Lookup(found=True, receipt=receipt, detail=detail)

    @staticmethod
    def of_failed(receipt: str | None, detail: str | None = None) -> Lookup:
        return Lookup(found=True, receipt=receipt, failed=True, detail=detail)

    @staticmethod
    def of_not_found(detail: str | None = None) -> Lookup:
        return Lookup(found=False, detail=detail)

    @staticmethod
    def of_unknown(detail: str) -> Lookup:
        return Lookup(found=False, unknown=True, detail=detail)


def describe(exc: BaseException) -> str:
    """``"Type: message"`` (or the type alone): how a failed call is told in a lookup's
    answer or a transient outcome."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
