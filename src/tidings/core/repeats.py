"""A notify under a key already used: the same request again, or another one.

A notify's key is its identity. The same request again (a retried call, a redelivered
event) writes nothing and is answered with the keys it made, as ``existing``
(``Notified``); another request under that key, with another template, data,
recipient, due time, expiry or set of channels, is refused (``KeyConflict``), never
kept silently as the first one was. "The same" is one rule with the publish route's
(one Idempotency-Key, one body): each field equal, the data by their canonical JSON
text (``keys.canonical_json``).

``Asked`` is what one request asked for, ``IntentBody`` what the ledger holds under a
key, ``difference`` compares them, and ``AdmitGuard`` carries the comparison into the
transaction that writes the intents: the store reads back, in that transaction, the
rows under the keys it did not create and hands them to ``AdmitGuard.check``, whose
``KeyConflict`` rolls the whole write back. The store decides nothing.

A request that leaves ``due_at`` out means "now", whenever it is made: it matches an
intent that was due when it was written (``due_at <= created_at``), not one written
for later.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tidings.core.errors import KeyConflict
from tidings.core.keys import canonical_json
from tidings.core.model import IntentDraft


@dataclass(frozen=True, kw_only=True)
class IntentBody:
    """What the ledger holds under a key, as far as a repeat is compared
    (``intent_bodies``)."""

    key: str
    channel: str
    recipient_id: str
    address: str
    template: str
    data: str
    due_at: float
    expires_at: float | None
    created_at: float


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What one notify asked for: its drafts (one per channel it named), whether it
    named its due time, the key it has on every declared channel (``channel_keys``:
    what was written under any of them counts), and the field naming each channel's
    address (``recipient.email``, ``recipient.phone``)."""

    key: str
    drafts: tuple[IntentDraft, ...]
    due_given: bool
    channel_keys: Mapping[str, str]
    address_fields: Mapping[str, str]
    where: str = ""
    """The prefix of every field named (``requests[2].``)."""


class Notified(list[str]):
    """The intent keys of one notify, one per channel in the order its channels were
    given (a ``list``, as before), and which of them it ``created`` and which were
    ``existing`` already: the same request, made before."""

    __slots__ = ("created", "existing")

    def __init__(self, keys: Iterable[str] = (), created: Collection[str] = ()) -> None:
        super().__init__(keys)
        made = set(created)
        self.created: tuple[str, ...] = tuple(k for k in self if k in made)
        self.existing: tuple[str, ...] = tuple(k for k in self if k not in made)

    def __repr__(self) -> str:
        return (f"Notified({list(self)!r}, created={list(self.created)!r}, "
                f"existing={list(self.existing)!r})")


def body_of(draft: IntentDraft, *, created_at: float) -> IntentBody:
    """A draft as the ledger will hold it, written at ``created_at``."""
    return IntentBody(key=draft.key, channel=draft.channel, recipient_id=draft.recipient_id,
                      address=draft.address, template=draft.template, data=draft.data,
                      due_at=draft.due_at, expires_at=draft.expires_at, created_at=created_at)


def difference(asked: Asked, held: Mapping[str, IntentBody]) -> tuple[str, str] | None:
    """The first field in which ``asked`` differs from what is held under its keys
    (``held``, by intent key), as ``(field, message)``; None when nothing is held or
    everything matches. Messages name the key and the field, never a value (data may
    be personal), but due times."""
    found = {ch: held[key] for ch, key in asked.channel_keys.items() if key in held}
    if not found:
        return None
    wanted = [d.channel for d in asked.drafts]
    if set(found) != set(wanted):
        return "channels", (f"are {sorted(wanted)}, but key {asked.key!r} has intents on "
                            f"{sorted(found)} already: a new message needs a new key")
    for draft in asked.drafts:
        body = found[draft.channel]
        field_name = _differing(asked, draft, body)
        if field_name is not None:
            return field_name, _told(asked, draft, body, field_name)
    return None


def _differing(asked: Asked, draft: IntentDraft, body: IntentBody) -> str | None:
    if body.recipient_id != draft.recipient_id:
        return "recipient.id"
    if body.address != draft.address:
        return asked.address_fields.get(draft.channel, "recipient")
    if body.template != draft.template:
        return "template"
    if body.data != draft.data:
        name = _data_difference(body.data, draft.data)
        if name is not None:
            return name
    due_matches = (body.due_at == draft.due_at if asked.due_given
                   else body.due_at <= body.created_at)
    if not due_matches:
        return "due_at"
    if body.expires_at != draft.expires_at:
        return "expires_at"
    return None


def _told(asked: Asked, draft: IntentDraft, body: IntentBody, field_name: str) -> str:
    where = f"the intent already under key {asked.key!r} (channel {draft.channel!r})"
    if field_name == "due_at":
        said = _when(draft.due_at) if asked.due_given else "not given (now)"
        return (f"is {said}, but {where} is due at {_when(body.due_at)}: a new message "
                "needs a new key")
    return f"differs from {where}: a new message needs a new key"


def _data_difference(held: str, asked: str) -> str | None:
    """``data.<name>`` of the first top-level name whose value differs, ``data`` when
    the two are not both objects, None when they are the same JSON."""
    try:
        old, new = json.loads(held or "{}"), json.loads(asked or "{}")
    except ValueError:
        return "data"
    if canonical_json(old) == canonical_json(new):
        return None  # the same values, written before in another spelling
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "data"
    for name in sorted(old.keys() | new.keys()):
        if name not in old or name not in new or \
                canonical_json(old[name]) != canonical_json(new[name]):
            return f"data.{name}"
    return "data"  # pragma: no cover - equal members make equal objects


def _when(at: float) -> str:
    try:
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return f"{at:g} (epoch seconds)"


def check_repeats(asked: Sequence[Asked], held: Mapping[str, IntentBody], *,
                  now: float) -> None:
    """Raise ``KeyConflict`` for the first request of a batch that differs from what
    is held under its keys, or from an earlier request of the batch under the same key
    (written at ``now``); its ``index`` is that request's place in ``asked``."""
    seen: dict[str, IntentBody] = dict(held)
    for index, one in enumerate(asked):
        found = difference(one, seen)
        if found is not None:
            name, message = found
            raise KeyConflict(one.key, f"{one.where}{name}", message, index=index)
        for draft in one.drafts:
            seen.setdefault(draft.key, body_of(draft, created_at=now))


def conflicting(error: Exception) -> int | None:
    """Which request of a batch a failed write's ``error`` is about: a ``KeyConflict``'s
    ``index``; None for any other error (a group commit's ``culprit``)."""
    return error.index if isinstance(error, KeyConflict) else None


def notified(asked: Sequence[Asked], created: Collection[str]) -> list[Notified]:
    """Each request's keys, and which of them it created: a key created by a batch is
    its first request's (a later one under the same key found it existing)."""
    unclaimed = set(created)
    answers = []
    for one in asked:
        keys = [d.key for d in one.drafts]
        mine = [k for k in keys if k in unclaimed]
        unclaimed.difference_update(mine)
        answers.append(Notified(keys, created=mine))
    return answers


@dataclass(frozen=True, kw_only=True)
class AdmitGuard:
    """The repeat check of one batch, run by the store in the transaction that writes
    it: the rows under ``keys`` that the write did not create go to ``check``."""

    asked: tuple[Asked, ...]
    now: float
    keys: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        keys = dict.fromkeys(k for one in self.asked for k in one.channel_keys.values())
        object.__setattr__(self, "keys", tuple(keys))

    def check(self, held: Mapping[str, IntentBody]) -> None:
        """Raise ``KeyConflict`` (see ``check_repeats``); ``held``: what is under
        ``keys`` besides what this write created."""
        check_repeats(self.asked, held, now=self.now)


def guard_for(asked: Iterable[Asked], *, now: float) -> AdmitGuard:
    """The guard of a batch written at ``now``."""
    return AdmitGuard(asked=tuple(asked), now=now)
