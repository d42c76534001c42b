"""Rows to records by column name, and records to query parameters, for every SQL store.

A ``Shape`` says how the rows of a query become one record type: the record's fields,
matched by name to the columns the cursor describes, and a converter for the fields
the database cannot hand over as they are (a state name, a 0/1 flag). A query may
order its columns as it likes; a column it lacks is an error naming the column.

Reading stays as cheap as hand-written positional code, because the hot paths
(claims, the worker's reads) map thousands of rows a second: a shape compiles one
reader per column list it meets, once, as ``namedtuple`` and ``dataclasses`` compile
their methods, and that reader is a single call building the record from the row.
The compiled text holds only the record's own field names and column positions; no
text from the database reaches it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tidings.core.claims import CancelPlan, plan_cancel
from tidings.core.errors import StoreError
from tidings.core.keys import make_storable
from tidings.core.model import Event, Intent
from tidings.core.preferences import Preference
from tidings.core.repeats import IntentBody
from tidings.core.states import TERMINAL, State, check
from tidings.core.suppression import Reason, Suppression
from tidings.stores.base import (
    ApiToken,
    CampaignReports,
    Change,
    Hold,
    IdempotentResponse,
    IntentSummary,
    LatencyHistogram,
    Occurrence,
    OccurrenceProgress,
    OutcomeCount,
    ProviderEventCount,
    ProviderEventType,
    PublishItem,
    QueueAcks,
    Selection,
    StoredProviderEvent,
    Switch,
)
from tidings.stores.receipts import parse_receipt

R = TypeVar("R")
Row = Sequence[Any]
#: A cursor's ``description``: one entry per column, its name first (DB-API).
Description = Sequence[Sequence[Any]]
#: The parameters of one ``event_insert`` row, in the query's column order.
EventRow = tuple[
    str, str, str, float, str | None, int | None, str | None, str | None, str | None, str | None
]


def column_names(description: Description | None) -> tuple[str, ...]:
    """The column names of a cursor's ``description`` (sqlite3 tuples, psycopg Columns)."""
    if description is None:
        raise StoreError("the statement returned no columns")
    return tuple(name for name, *_ in description)


class Shape(Generic[R]):
    """How rows become ``R``: ``build``'s keyword parameters, read by column name.

    ``convert`` maps a field to the function that turns its stored value into the
    field's value.
    """

    def __init__(self, build: Callable[..., R],
                 convert: Mapping[str, Callable[[Any], Any]] | None = None) -> None:
        self.build = build
        self.name = getattr(build, "__name__", repr(build))
        self.fields = tuple(inspect.signature(build).parameters)
        self.convert = dict(convert or {})
        unknown = set(self.convert) - set(self.fields)
        if unknown:
            raise ValueError(f"{self.name} has no field(s) {sorted(unknown)}")
        self._readers: dict[tuple[str, ...], Callable[[Row], R]] = {}

    def reader(self, description: Description | None) -> Callable[[Row], R]:
        """The function from one row of this column list to one record."""
        columns = column_names(description)
        read = self._readers.get(columns)
        if read is None:
            read = self._readers[columns] = self._compile(columns)
        return read

    def one(self, description: Description | None, row: Row) -> R:
        """One row of a result with these columns."""
        return self.reader(description)(row)

    def all(self, description: Description | None, rows: Iterable[Row]) -> list[R]:
        """Every row of a result with these columns."""
        read = self.reader(description)
        return [read(row) for row in rows]

    def _compile(self, columns: tuple[str, ...]) -> Callable[[Row], R]:
        position = {name: i for i, name in enumerate(columns)}
        missing = [f for f in self.fields if f not in position]
        if missing:
            raise StoreError(f"a row for {self.name} lacks the column(s) {missing} "
                             f"(it has {list(columns)})")
        namespace: dict[str, Any] = {"build": self.build}
        arguments: list[str] = []
        for number, field in enumerate(self.fields):
            value = f"row[{position[field]}]"
            if field in self.convert:
                namespace[f"convert_{number}"] = self.convert[field]
                value = f"convert_{number}({value})"
            arguments.append(f"{field}={value}")
        # The text is made of this record's field names and column numbers only.
        read: Callable[[Row], R] = eval(f"lambda row: build({', '.join(arguments)})",
                                        namespace)
        return read


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _scopes(value: str) -> tuple[str, ...]:
    return tuple(value.split())


@dataclass(frozen=True, kw_only=True)
class CancelTarget:
    """What a cancellation needs to know of an intent (``intent_cancel_read``)."""

    state: State
    channel: str
    attempts: int
    cancel_requested: bool


def _state_of() -> Callable[[Any], State]:
    """A stored state name to its ``State`` by one dict lookup (``State(name)`` goes
    through the enum's metaclass: a fifth of the relay's CPU reading a page of 5,000);
    a name that is no state raises ``ValueError`` as ``State(name)`` does."""
    by_name = {state.value: state for state in State}

    def state(name: Any) -> State:
        try:
            return by_name[name]
        except KeyError:
            raise ValueError(f"{name!r} is not a valid State") from None

    return state


_state = _state_of()

INTENT = Shape(Intent, {"state": _state, "cancel_requested": bool})
INTENT_BODY = Shape(IntentBody, {"due_at": float, "expires_at": _float_or_none,
                                 "created_at": float})
OCCURRENCE = Shape(Occurrence)
SWITCH = Shape(Switch, {"paused": bool})
HOLD = Shape(Hold)
OUTCOME_COUNT = Shape(OutcomeCount, {"bucket": int, "count": int})
API_TOKEN = Shape(ApiToken, {"scopes": _scopes})
IDEMPOTENT_RESPONSE = Shape(IdempotentResponse)
# float(): an aggregate over REAL columns can come back as the integer SQLite stored.
INTENT_SUMMARY = Shape(IntentSummary, {"oldest_due_at": _float_or_none,
                                       "earliest_expiry": _float_or_none})
STORED_PROVIDER_EVENT = Shape(StoredProviderEvent, {
    "type": ProviderEventType, "at": float, "received_at": float})
PROVIDER_EVENT_COUNT = Shape(ProviderEventCount, {"total": int, "orphaned": int})
CAMPAIGN_REPORTS = Shape(CampaignReports, {"bounced": int, "complained": int})
EVENT = Shape(Event)
# float(): RETURNING hands back a whole REAL as the integer SQLite stored it as.
PUBLISH_ITEM = Shape(PublishItem, {"due_at": float, "state": _state})
PREFERENCE = Shape(Preference, {"opted_out": bool})
SUPPRESSION = Shape(Suppression, {"reason": Reason, "created_at": float})
CANCEL_TARGET = Shape(CancelTarget, {"state": _state, "cancel_requested": bool})


def present(record: R | None, what: str) -> R:
    """``record``, read back inside the transaction that wrote it or found it: absent,
    it vanished, which no store allows (a StoreError rather than a None passed on)."""
    if record is None:
        raise StoreError(f"{what} vanished")
    return record


# ---------------------------------------------------------------- records to parameters

#: Characters of provider text kept per field: a reason is a sentence, a receipt an id.
MAX_RECORDED = 2000


def _recorded(text: object) -> str | None:
    """Text a provider or a plug-in wrote (a reason, a receipt, a request id), as a
    store can hold it: one NUL would fail the whole batch's commit on PostgreSQL, and
    a plug-in's number where text belongs the same; either would be tried again. Cut
    to ``MAX_RECORDED`` characters: a provider's 5 MB error page is no reason."""
    if text is None:
        return None
    value = text if isinstance(text, str) else str(text)
    if len(value) > MAX_RECORDED:
        cut = f"… (cut: {len(value):,} characters in all)"
        value = value[:MAX_RECORDED - len(cut)] + cut
    return make_storable(value)


def event_row(e: Event) -> EventRow:
    """The ``event_insert`` parameters of one event."""
    return (e.key, e.channel, e.type, e.at, e.state, e.attempt, e.worker, e.message_id,
            _recorded(e.provider_request_id), _recorded(e.detail))


def selection_params(selection: Selection,
                     array: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
    """A selection's filters as query parameters; ``array`` binds a list as one."""
    return {"states": array([State(s).value for s in selection.states]),
            "campaign": selection.campaign, "occurrence": selection.occurrence,
            "channel": selection.channel, "due_before": selection.due_before,
            "expires_by": selection.expires_by, "updated_after": selection.updated_after,
            "not_channels": array(selection.not_channels),
            "not_campaigns": array(selection.not_campaigns),
            "not_occurrences": array(selection.not_occurrences)}


def api_token_params(token: ApiToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "scopes": " ".join(token.scopes),
            "secret_hash": token.secret_hash, "created_at": token.created_at,
            "revoked_at": token.revoked_at, "expires_at": token.expires_at}


def idempotent_params(record: IdempotentResponse) -> dict[str, Any]:
    return {"key": record.key, "request_hash": record.request_hash,
            "status": record.status, "body": record.body, "created_at": record.created_at}


def preference_params(preference: Preference, *, now: float) -> dict[str, Any]:
    return {"recipient_id": preference.recipient_id, "channel": preference.channel,
            "opted_out": preference.opted_out, "quiet_start": preference.quiet_start,
            "quiet_end": preference.quiet_end, "timezone": preference.timezone, "now": now}


def progress_params(progress: OccurrenceProgress, *, admitted: int) -> dict[str, Any]:
    """The ``occurrence_progress`` parameters of a page that admitted ``admitted``."""
    return {"id": progress.occurrence, "high_water": progress.high_water,
            "after": progress.after, "members": progress.members, "admitted": admitted,
            "skipped": progress.skipped, "suppressed": progress.suppressed}


def check_changes(changes: Sequence[Change], acks: QueueAcks | None) -> None:
    """Refuse, before anything is written, a change not in the transition table
    (InvalidTransition) and acks that do not pair one receipt (or None) with each change."""
    for change in changes:
        check(change.from_state, change.to_state)
    if acks is not None and len(acks.receipts) != len(changes):
        raise ValueError(f"acks name {len(acks.receipts)} receipts for {len(changes)} "
                         "changes; they pair one to one (None: not acked)")


def acked_ids(acks: QueueAcks | None, applied: Iterable[int]) -> list[int]:
    """The queue rows a commit of outcomes deletes: the messages of the changes at the
    positions ``applied`` that ``acks`` gives a receipt, each row once, in id order."""
    if acks is None:
        return []
    return sorted({parse_receipt(receipt)[0] for i in applied
                   if (receipt := acks.receipts[i]) is not None})


def change_params(change: Change, now: float) -> dict[str, Any]:
    """Bind one change to ``intent_apply``, deciding its field effects from ``states``.

    The flags are booleans (SQLite binds them as 0 and 1); the counts are integers,
    which both dialects add to a column.
    """
    to_terminal = change.to_state in TERMINAL
    return {
        "key": change.key,
        "from_state": change.from_state.value,
        "to_state": change.to_state.value,
        "lease_token": change.lease_token,
        "lease_expired_by": change.lease_expired_by,
        "now": now,
        "receipt": _recorded(change.receipt),
        "next_attempt_at": change.next_attempt_at,
        "leaves_claimed": change.from_state is State.CLAIMED
        and change.to_state is not State.CLAIMED,
        "terminal": to_terminal,
        # An operator's redrive (dead -> retryable) makes the intent live again.
        "reopens": change.from_state in TERMINAL and not to_terminal,
        "reason": _recorded(change.reason),
        "count_attempt": int(change.count_attempt),
        "count_failure": int(change.count_failure),
        "reset_failures": change.reset_failures,
        "provider_request_id": _recorded(change.provider_request_id),
        "unstarted": change.unstarted,
    }


def change_event(change: Change, *, channel: str, attempts: int, now: float) -> EventRow:
    """The ``event_insert`` parameters of the event a change applied leaves behind."""
    return (change.key, channel, change.event, now, change.to_state.value, attempts,
            change.worker, change.message_id, _recorded(change.provider_request_id),
            _recorded(change.detail if change.detail is not None else change.reason))


def cancel_plan(key: str, target: CancelTarget, *, now: float, reason: str) -> CancelPlan:
    """The core's decision (``claims.plan_cancel``) on the intent as read."""
    return plan_cancel(key, target.state, channel=target.channel, attempts=target.attempts,
                       cancel_requested=target.cancel_requested, now=now, reason=reason)


def cancel_events(plan: CancelPlan, target: CancelTarget, *, now: float) -> list[EventRow]:
    """The ``event_insert`` rows of a cancel plan: the change's event, or the flag's."""
    found = [event_row(e) for e in plan.events]
    if plan.change is not None:
        found.append(change_event(plan.change, channel=target.channel,
                                  attempts=target.attempts, now=now))
    return found


def latency_histograms(bounds: Sequence[float],
                       rows: Iterable[Row]) -> list[LatencyHistogram]:
    """Fold ``(channel, bucket or None, count, sum)`` rows into one histogram per channel."""
    counts: dict[str, list[int]] = {}
    sums: dict[str, float] = {}
    for channel, bucket, count, total in rows:
        per = counts.setdefault(channel, [0] * (len(bounds) + 1))
        per[len(bounds) if bucket is None else int(bucket)] += int(count)
        sums[channel] = sums.get(channel, 0.0) + float(total or 0.0)
    return [LatencyHistogram(channel=channel, bounds=tuple(bounds), counts=tuple(per),
                             sum=sums[channel], count=sum(per))
            for channel, per in sorted(counts.items())]


def pacer_state(stored: str | None) -> dict[str, Any] | None:
    """A channel's pacer state as ``pacer_read`` stores it (JSON text, or none yet)."""
    state: dict[str, Any] | None = None if stored is None else json.loads(stored)
    return state
