"""The suppression list's rules: what suppresses an address, and what a suppression does.

An address is suppressed per channel kind (``email``, ``sms``) in its normalised form
(``tidings.core.addresses.normalize_address``), with a reason and a source:

==============  ==================================================  ====================
reason          what put it there                                   source
==============  ==================================================  ====================
hard_bounce     a provider's verified report of a hard bounce       ``webhook:<provider>:
                                                                    <message id>``
complaint       a provider's verified spam complaint                the same
soft_bounces    ``soft_bounce_limit`` soft bounces within           the last one's
                ``soft_bounce_window_s``
sms_stop        the provider refused a send because the recipient   ``intent:<key>``
                replied STOP (``outcomes.RECIPIENT_STOPPED``)
unsubscribe     the recipient asked (an operator or an import       ``operator:<who>``
                recording it)
manual          an operator                                         ``operator:<who>``
==============  ==================================================  ====================

A suppressed address is checked before every send (``tidings.delivery.compose``): the
intent ends ``suppressed`` with no provider call. Campaign admission skips it
(``tidings.admission.scheduler``). The first suppression of an address stands; a later
one changes nothing, and only an operator's audited removal takes it off. Pure: the
stores apply what these rules decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Literal

from tidings.core.model import address_kind
from tidings.core.outcomes import RECIPIENT_STOPPED


class Reason(StrEnum):
    """Why an address is suppressed."""

    HARD_BOUNCE = "hard_bounce"
    COMPLAINT = "complaint"
    SOFT_BOUNCES = "soft_bounces"
    SMS_STOP = "sms_stop"
    UNSUBSCRIBE = "unsubscribe"
    MANUAL = "manual"


class Bounce(StrEnum):
    """How a provider classed a bounce (``ProviderEvent.bounce``)."""

    HARD = "hard"
    """Permanent: the address does not exist, or never will take mail (or texts)."""
    SOFT = "soft"
    """For now: a full mailbox, a greylisting server, a handset out of reach."""
    OTHER = "other"
    """Nothing about the address (an auto-reply, an address change): neither."""


#: What a soft bounce is: a strike toward ``soft_bounce_limit``, no suppression alone.
STRIKE: Final = "strike"


@dataclass(frozen=True, kw_only=True)
class Suppression:
    """One suppressed address (normalised) on one channel kind."""

    address: str
    kind: str
    reason: Reason
    source: str
    created_at: float
    key: str | None = None
    """The intent whose report or answer suppressed the address, if one did."""
    detail: str | None = None
    """What the provider said (scrubbed), or the operator's note."""


@dataclass(frozen=True, kw_only=True)
class SuppressionRules:
    """What the stores need to turn provider reports into suppressions: each channel's
    address kind (``model.address_kind``: a channel without one is addressed by email
    unless named ``sms``) and the soft-bounce threshold."""

    kinds: Mapping[str, str] = field(default_factory=dict)
    soft_bounce_limit: int = 3
    """Soft bounces within the window that suppress an address (0: they never do)."""
    soft_bounce_window_s: float = 7 * 86400.0

    def kind_of(self, channel: str) -> str:
        return address_kind(channel, self.kinds.get(channel))

    def soft_bounces_suppress(self, count: int) -> bool:
        """Whether ``count`` soft bounces within the window suppress the address."""
        return 0 < self.soft_bounce_limit <= count


def from_report(report: str, bounce: str | None) -> Reason | Literal["strike"] | None:
    """What a provider's report of type ``report`` (``delivered``, ``bounced``,
    ``complained``, ``failed``) does to its address: a suppression's reason, a strike
    toward the soft-bounce threshold, or nothing. A bounce the provider did not class
    is taken as hard: providers report a bounce once they give up on the address."""
    if report == "complained":
        return Reason.COMPLAINT
    if report != "bounced" or bounce == Bounce.OTHER:
        return None
    return STRIKE if bounce == Bounce.SOFT else Reason.HARD_BOUNCE


def from_refusal(code: str | None) -> Reason | None:
    """The reason a provider's permanent refusal with ``code`` (``Permanent.code``)
    suppresses the address for, or None: most refusals are about one message."""
    return Reason.SMS_STOP if code == RECIPIENT_STOPPED else None


def audit_key(kind: str, surrogate: str) -> str:
    """The key of the audit events of one suppressed address: its kind and its
    recipient surrogate (``core.surrogate``), never the address."""
    return f"suppression/{kind}/{surrogate}"
