"""Provider events as every SQL store records them: once each, on their intent's timeline.

The stores differ in how they find and insert (row by row under SQLite's one writer,
one statement per batch on PostgreSQL); what a batch means is the same, and is here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from tidings.stores.base import ProviderEvent, ProviderEventType, RecordResult
from tidings.stores.rows import EventRow, Shape

#: What makes a provider event one: a repeat of it is a duplicate.
Identity = tuple[str, str, str]


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
    received_at: float
    event: ProviderEvent
    owner: ReceiptOwner


def _adoption(*, id: int, provider: str, message_id: str, type: str, at: float,
              detail: str | None, received_at: float, key: str, channel: str, state: str,
              attempts: int | None) -> Adoption:
    event = ProviderEvent(provider=provider, message_id=message_id,
                          type=ProviderEventType(type), at=float(at), detail=detail)
    owner = ReceiptOwner(receipt=message_id, key=key, channel=channel, state=state,
                         attempts=attempts)
    return Adoption(id=id, received_at=float(received_at), event=event, owner=owner)


RECEIPT_OWNER = Shape(ReceiptOwner)
ADOPTION = Shape(_adoption)


def identity(event: ProviderEvent) -> Identity:
    return (event.provider, event.message_id, event.type.value)


def unique_provider_events(events: Sequence[ProviderEvent]) -> list[ProviderEvent]:
    """The first of each (provider, message id, type): a repeat in one batch is a
    duplicate, as it would be in the next batch."""
    seen: set[Identity] = set()
    unique: list[ProviderEvent] = []
    for event in events:
        if identity(event) not in seen:
            seen.add(identity(event))
            unique.append(event)
    return unique


def owner_key(owners: Mapping[str, ReceiptOwner], event: ProviderEvent) -> str | None:
    """The key of the intent ``event`` is about, None for an orphan."""
    owner = owners.get(event.message_id)
    return None if owner is None else owner.key


def recorded(events: Sequence[ProviderEvent], unique: Sequence[ProviderEvent],
             owners: Mapping[str, ReceiptOwner],
             inserted: Collection[Identity]) -> tuple[list[EventRow], RecordResult]:
    """What a batch of ``events`` recorded: the timeline rows of the ``unique`` ones
    stored now (``inserted``) whose message id has an owner, and the counts. A stored
    event without an owner is an orphan; everything else was a duplicate."""
    timeline: list[EventRow] = []
    orphaned = 0
    for event in unique:
        if identity(event) not in inserted:
            continue
        owner = owners.get(event.message_id)
        if owner is None:
            orphaned += 1
        else:
            timeline.append(timeline_row(event, owner))
    return timeline, RecordResult(recorded=len(timeline), orphaned=orphaned,
                                  duplicates=len(events) - len(timeline) - orphaned)


def timeline_row(event: ProviderEvent, owner: ReceiptOwner) -> EventRow:
    """The timeline event of a provider event attached to ``owner``: its state and
    attempts as they are (a provider event changes neither)."""
    return (owner.key, owner.channel, event.timeline_type, event.at, owner.state,
            owner.attempts, None, None, None, event.timeline_detail)
