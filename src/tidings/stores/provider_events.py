"""Provider events as every SQL store records them: once each, on their intent's timeline.

The stores differ in how they find and insert (row by row under SQLite's one writer,
one statement per batch on PostgreSQL); what a batch means is the same, and is here:
which events are new, which intent each is about, the state each moves its intent to
(``tidings.core.states.report_move``) and the timeline rows they leave.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from tidings.core.states import ReportMove, report_move
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
    address: str


@dataclass(frozen=True, kw_only=True)
class Adoption:
    """An orphaned provider event and the intent that now holds its message id."""

    id: int
    received_at: float
    event: ProviderEvent
    owner: ReceiptOwner


def _adoption(*, id: int, provider: str, message_id: str, type: str, at: float,
              detail: str | None, bounce: str | None, received_at: float, key: str,
              channel: str, state: str, attempts: int | None, address: str) -> Adoption:
    event = ProviderEvent(provider=provider, message_id=message_id,
                          type=ProviderEventType(type), at=float(at), detail=detail,
                          bounce=bounce)
    owner = ReceiptOwner(receipt=message_id, key=key, channel=channel, state=state,
                         attempts=attempts, address=address)
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


@dataclass(frozen=True, kw_only=True)
class Move:
    """The state a provider event stored now moves its intent to (``report_move``)."""

    event: Identity
    key: str
    move: ReportMove


def moves(attached: Sequence[tuple[ProviderEvent, ReceiptOwner]]) -> list[Move]:
    """The moves of events just attached to their intents, in the order to apply them:
    one intent's reports as they came, intents in key order (two batches at once then
    lock their rows in one order)."""
    found = [Move(event=identity(event), key=owner.key, move=move)
             for event, owner in attached
             if (move := report_move(event.type.value)) is not None]
    found.sort(key=lambda m: m.key)  # stable: one intent's reports keep their order
    return found


def attached(unique: Sequence[ProviderEvent], owners: Mapping[str, ReceiptOwner],
             inserted: Collection[Identity]) -> list[tuple[ProviderEvent, ReceiptOwner]]:
    """The ``unique`` events stored now (``inserted``) whose message id has an owner."""
    return [(event, owner) for event in unique
            if identity(event) in inserted and (owner := owners.get(event.message_id))]


def recorded(events: Sequence[ProviderEvent], unique: Sequence[ProviderEvent],
             owners: Mapping[str, ReceiptOwner], inserted: Collection[Identity],
             moved: Mapping[Identity, str]) -> tuple[list[EventRow], RecordResult]:
    """What a batch of ``events`` recorded: the timeline rows of the ``unique`` ones
    stored now (``inserted``) whose message id has an owner, and the counts. A stored
    event without an owner is an orphan; everything else was a duplicate. ``moved``:
    the state each event that moved its intent moved it to."""
    joined = attached(unique, owners, inserted)
    orphaned = sum(1 for event in unique if identity(event) in inserted) - len(joined)
    timeline = timeline_rows(joined, moved)
    return timeline, RecordResult(recorded=len(timeline), orphaned=orphaned,
                                  duplicates=len(events) - len(timeline) - orphaned,
                                  moved=len(moved))


def timeline_rows(joined: Sequence[tuple[ProviderEvent, ReceiptOwner]],
                  moved: Mapping[Identity, str]) -> list[EventRow]:
    """The timeline events of provider events attached to their owners, each with its
    intent's state after it (``moved``: where an event moved it)."""
    states: dict[str, str] = {}
    rows: list[EventRow] = []
    for event, owner in joined:
        state = moved.get(identity(event)) or states.get(owner.key, owner.state)
        states[owner.key] = state
        rows.append(timeline_row(event, owner, state))
    return rows


def timeline_row(event: ProviderEvent, owner: ReceiptOwner, state: str | None = None
                 ) -> EventRow:
    """The timeline event of a provider event attached to ``owner``: the intent's state
    after it (``state``; as read, when it moved nothing) and its attempts."""
    return (owner.key, owner.channel, event.timeline_type, event.at, state or owner.state,
            owner.attempts, None, None, None, event.timeline_detail)
