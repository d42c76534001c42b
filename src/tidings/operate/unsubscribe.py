"""A recipient's one-click unsubscribe, recorded: what ``POST /v1/unsubscribe/{token}``
does once the token verifies.

The token (``tidings.core.unsubscribe``) names a recipient id, an address, a channel
and a campaign. Recording it does two things, both idempotent:

- the recipient's preference on that channel becomes opted out (quiet hours they had
  are kept), so every later send of the channel to them is cancelled ``opted_out``
  (a long recipient id, carried by its digest, is read from the intent the mail was
  sent for; once retention has pruned that intent only the address is suppressed);
- the address (normalised) is suppressed on the channel's kind with reason
  ``unsubscribe`` and source ``unsubscribe:<campaign>`` (``unsubscribe:notify`` for
  mail sent by ``notify``), so the next send to it ends ``suppressed`` with no provider
  call, whoever it is addressed to. The first suppression of an address stands.

The first time the address is suppressed an audit event is left under its
``audit_key`` (recipient surrogate, never the address). A replayed token writes the
same preference again and adds nothing. A token that does not verify, or names a
channel this deployment does not have, records nothing, and the caller is told only
that the link is not valid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Protocol

from tidings.core.addresses import normalize_address
from tidings.core.model import Event
from tidings.core.preferences import Preference
from tidings.core.suppression import Reason, Suppression, audit_key
from tidings.core.surrogate import surrogate
from tidings.core.unsubscribe import Subject
from tidings.delivery.unsubscribe import UnsubscribeLinks
from tidings.stores.base import Ledger, PreferenceRecords, Suppressions

log = logging.getLogger("tidings.unsubscribe")


class UnsubscribeStore(PreferenceRecords, Suppressions, Ledger, Protocol):
    """What recording an unsubscribe writes: a preference, a suppression, an event."""


@dataclass(frozen=True, kw_only=True)
class Unsubscribed:
    """What a verified token recorded: its subject, and whether the address was newly
    suppressed (False on a replay, or when the list had it already)."""

    subject: Subject
    newly_suppressed: bool


def source_of(subject: Subject) -> str:
    """The suppression's source: ``unsubscribe:<campaign>``, or ``unsubscribe:notify``."""
    return f"unsubscribe:{subject.campaign or 'notify'}"


async def recipient_of(store: Ledger, subject: Subject) -> str | None:
    """The recipient id a subject names: its own, or, for a long id carried by its
    digest, the one of the intent it names, if that intent is still kept and its id has
    that digest. None: not known any more (the address is suppressed all the same)."""
    if subject.recipient_id:
        return subject.recipient_id
    intent = await store.intent_get(subject.key)
    if intent is None or not subject.names(intent.recipient_id):
        return None
    return intent.recipient_id


async def one_click(store: UnsubscribeStore, links: UnsubscribeLinks, token: str, *,
                    channels: Collection[str], kind_of: Callable[[str], str],
                    now: float) -> Unsubscribed | None:
    """Record the unsubscribe ``token`` asks for; None (nothing recorded) when it does
    not verify or names a channel not in ``channels``. ``kind_of`` is a channel's
    address kind (``email``, ``sms``)."""
    subject = links.verify(token)
    if subject is None or subject.channel not in channels:
        return None
    recipient_id = await recipient_of(store, subject)
    if recipient_id is not None:
        key = (recipient_id, subject.channel)
        found = (await store.preferences_for([key])).get(key)
        wanted = (Preference(recipient_id=recipient_id, channel=subject.channel,
                             opted_out=True) if found is None
                  else replace(found, opted_out=True))
        if found != wanted:
            await store.preference_set(wanted, now=now)
    kind = kind_of(subject.channel)
    address = normalize_address(kind, subject.address)
    made = await store.suppression_add_many([Suppression(
        address=address, kind=kind, reason=Reason.UNSUBSCRIBE, source=source_of(subject),
        created_at=now)], now=now)
    if made:
        await store.event_append_many([Event(
            key=audit_key(kind, surrogate(address)), channel="-", type="suppression_added",
            at=now, state="suppressed", worker=source_of(subject),
            detail=f"{Reason.UNSUBSCRIBE.value}: one-click link")])
        log.info("unsubscribed", extra={"recipient": surrogate(address),
                                        "channel": subject.channel,
                                        "campaign": subject.campaign or None})
    return Unsubscribed(subject=subject, newly_suppressed=bool(made))
