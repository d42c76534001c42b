"""Provider events as every SQL store records them: once each, on their intent's timeline.

The stores differ in how they find and insert (row by row under SQLite's one writer,
one statement per batch on PostgreSQL); what a batch means is the same, and is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidings.stores.base import ProviderEvent, ProviderEventType
from tidings.stores.rows import EventRow, Shape


@dataclass(frozen=True, kw_only=True)
class ReceiptOwner:
    """The intent a provider message id names (its receipt), as its timeline needs it."""

    receipt: str
    key: str
    channel: str
    state: str
    attempts: int | None


@dataclass(frozen=True, kw_only=True)
class Adoption:
    """An orphaned provider event and the intent that now holds its message id."""

    id: int
    event: ProviderEvent
    owner: ReceiptOwner


def _adoption(*, id: int, provider: str, message_id: str, type: str, at: float,
              detail: str | None, key: str, channel: str, state: str,
              attempts: int | None) -> Adoption:
    event = ProviderEvent(provider=provider, message_id=message_id,
                          type=ProviderEventType(type), at=float(at), detail=detail)
    owner = ReceiptOwner(receipt=message_id, key=key, channel=channel, state=state,
                         attempts=attempts)
    return Adoption(id=id, event=event, owner=owner)


RECEIPT_OWNER = Shape(ReceiptOwner)
ADOPTION = Shape(_adoption)


def unique_provider_events(events: Sequence[ProviderEvent]) -> list[ProviderEvent]:
    """The first of each (provider, message id, type): a repeat in one batch is a
    duplicate, as it would be in the next batch."""
    seen: set[tuple[str, str, str]] = set()
    unique: list[ProviderEvent] = []
    for event in events:
        identity = (event.provider, event.message_id, event.type.value)
        if identity not in seen:
            seen.add(identity)
            unique.append(event)
    return unique


def timeline_row(event: ProviderEvent, owner: ReceiptOwner) -> EventRow:
    """The timeline event of a provider event attached to ``owner``: its state and
    attempts as they are (a provider event changes neither)."""
    return (owner.key, owner.channel, event.timeline_type, event.at, owner.state,
            owner.attempts, None, None, None, event.timeline_detail)
