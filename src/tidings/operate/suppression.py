"""The suppression list for an operator: list, add, remove, import and export it.

What the CLI (``tidings suppression ...``) and the API (``/v1/suppressions``) both do,
written once. An address is checked and normalised before it is looked up or stored
(``tidings.core.addresses.checked_address``), so ``Ann@Example.com`` and
``ann@example.com`` are one entry, and a typo is refused naming the field. Every
addition and removal is an audit event naming who made it, keyed by the address's
recipient surrogate (``tidings.core.suppression.audit_key``), never the address; an
import leaves one event for the whole file. Nothing here decides what a provider's
report suppresses: that is ``tidings.core.suppression``'s.

CSV (import and export): a header row, then one address a row. Import reads
``address`` and ``kind`` (required), ``reason`` (default ``manual``) and ``note``
(or ``detail``, as an export names it); export writes ``address, kind, reason,
source, created_at, key, detail``, the time as ISO 8601 UTC, and an export imports
again as it is: its ``source``, ``created_at`` and ``key`` are read and set aside
(the entries an import makes are the importing operator's, made now). An import is
all or nothing as far as its rows go: every row is checked before any is stored,
and one bad row refuses the file naming its line and column, with nothing stored;
rows whose address is suppressed already keep the entry they have.

Who took an address off the list, when and why is its history
(``history``): the audit events under its ``audit_key``, besides the entry it has.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from tidings.core.addresses import CHANNEL_KINDS, checked_address
from tidings.core.errors import InvalidInput
from tidings.core.keys import check_line, make_storable
from tidings.core.model import Event
from tidings.core.suppression import Reason, Suppression, audit_key
from tidings.core.surrogate import surrogate
from tidings.stores.base import Ledger, Suppressions

log = logging.getLogger("tidings.suppression")

#: Rows of an import written per transaction, and rows of a listing page.
BATCH = 1000
#: The most rows one import takes (a bigger list is split into several files).
MAX_IMPORT_ROWS = 200_000
EXPORT_COLUMNS = ("address", "kind", "reason", "source", "created_at", "key", "detail")
IMPORT_COLUMNS = ("address", "kind", "reason", "note")
#: Columns of an export an import reads past (``detail`` is read as ``note``).
EXPORT_ONLY = ("source", "created_at", "key", "detail")
#: The longest note an operator's entry carries, and the longest name of who made it.
NOTE_LENGTH = 500
BY_LENGTH = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


class SuppressionStore(Suppressions, Ledger, Protocol):
    """What an operator's action reaches: the list, and the audit trail."""


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One address an operator suppresses, checked and normalised."""

    address: str
    kind: str
    reason: Reason = Reason.MANUAL
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class ImportResult:
    """What an import did: ``added`` new entries, ``already`` suppressed (kept as they
    were), ``rows`` read."""

    rows: int
    added: int
    already: int


def check_kind(kind: str, field: str = "kind") -> str:
    if kind not in CHANNEL_KINDS:
        raise InvalidInput(field, f"must be one of {', '.join(sorted(CHANNEL_KINDS))}, "
                                  f"not {kind!r}")
    return kind


def check_reason(reason: str, field: str = "reason") -> Reason:
    try:
        return Reason(reason)
    except ValueError:
        raise InvalidInput(field, f"must be one of {', '.join(r.value for r in Reason)}, "
                                  f"not {reason!r}") from None


def entry(address: str, kind: str, *, reason: str = Reason.MANUAL, note: str | None = None,
          where: str = "") -> Entry:
    """An operator's entry, each field checked (InvalidInput naming it, after ``where``)."""
    check_kind(kind, f"{where}kind")
    if note is not None:
        check_line(note, f"{where}note", max_length=NOTE_LENGTH)
    return Entry(address=checked_address(kind, address, f"{where}address"), kind=kind,
                 reason=check_reason(reason, f"{where}reason"), note=note or None)


def _suppression(item: Entry, *, now: float, source: str) -> Suppression:
    return Suppression(address=item.address, kind=item.kind, reason=item.reason,
                       source=source, created_at=now, detail=item.note)


def _audit(kind: str, address: str, type: str, *, by: str, now: float,
           detail: str) -> Event:
    return Event(key=audit_key(kind, surrogate(address)), channel="-", type=type, at=now,
                 state="suppressed" if type == "suppression_added" else "removed",
                 worker=by, detail=detail)


async def add(store: SuppressionStore, item: Entry, *, by: str, now: float
              ) -> Suppression | None:
    """Suppress one address; the entry if added now (None: it was suppressed already,
    and keeps its first reason)."""
    check_line(by, "by", max_length=BY_LENGTH)
    made = await store.suppression_add_many(
        [_suppression(item, now=now, source=f"operator:{by}")], now=now)
    added = made[0] if made else None
    if added is not None:
        await store.event_append_many([_audit(
            item.kind, item.address, "suppression_added", by=by, now=now,
            detail=f"{item.reason.value}: {item.note}" if item.note else item.reason.value)])
        log.warning("address suppressed", extra={
            "recipient": surrogate(item.address), "channel": item.kind, "by": by,
            "reason": item.reason.value})
    return added


async def remove(store: SuppressionStore, *, address: str, kind: str, by: str, now: float,
                 note: str | None = None) -> Suppression | None:
    """Take an address off the list, audited with ``note``; what was removed (None: it
    was not suppressed, and the attempt is on the record all the same)."""
    check_line(by, "by", max_length=BY_LENGTH)
    if note is not None:
        check_line(note, "note", max_length=NOTE_LENGTH)
    normal = checked_address(check_kind(kind), address, "address")
    removed = await store.suppression_remove(normal, kind)
    what = ("not suppressed" if removed is None
            else f"was {removed.reason.value} from {removed.source}")
    await store.event_append_many([_audit(
        kind, normal, "suppression_removed", by=by, now=now,
        detail=f"{what}: {note}" if note else what)])
    log.warning("address taken off the suppression list", extra={
        "recipient": surrogate(normal), "channel": kind, "by": by,
        "reason": removed.reason.value if removed else None})
    return removed


async def listing(store: Suppressions, *, kind: str | None = None, reason: str | None = None,
                  after: tuple[str, str] | None = None, limit: int = 100
                  ) -> list[Suppression]:
    """A page of the list in (address, kind) order after ``after``."""
    if kind is not None:
        check_kind(kind)
    if reason is not None:
        check_reason(reason)
    if not 1 <= limit <= BATCH:
        raise InvalidInput("limit", f"must be between 1 and {BATCH}")
    return await store.suppression_list(kind=kind, reason=reason, after=after, limit=limit)


async def page(store: Suppressions, *, kind: str | None = None, reason: str | None = None,
               after: tuple[str, str] | None = None, limit: int = 100
               ) -> tuple[list[Suppression], bool]:
    """A page of the list (``listing``) and whether another row follows it."""
    if not 1 <= limit <= BATCH:
        raise InvalidInput("limit", f"must be between 1 and {BATCH}")
    found = await listing(store, kind=kind, reason=reason, after=after, limit=BATCH)
    if limit < BATCH:
        return found[:limit], len(found) > limit
    if len(found) < BATCH:
        return found, False
    last = found[-1]
    more = await listing(store, kind=kind, reason=reason, after=(last.address, last.kind),
                         limit=1)
    return found, bool(more)


#: The longest address filter ``find`` takes (an address's own limit).
ADDRESS_LENGTH = 320


async def find(store: Suppressions, *, address: str, exact: bool = False,
               kind: str | None = None, reason: str | None = None,
               after: tuple[str, str] | None = None, limit: int = 100
               ) -> tuple[list[Suppression], bool]:
    """A page of the entries whose address is ``address`` (``exact``: normalised as an
    entry is, so any spelling finds it) or holds it (case-insensitive), narrowed by
    kind and reason, in (address, kind) order after ``after``; and whether another
    follows. A substring has no index to use: it reads the list a page at a time."""
    if kind is not None:
        check_kind(kind)
    if reason is not None:
        check_reason(reason)
    if not 1 <= limit <= BATCH:
        raise InvalidInput("limit", f"must be between 1 and {BATCH}")
    needle = address.strip()
    if not needle:
        raise InvalidInput("address", "is empty")
    check_line(needle, "address", max_length=ADDRESS_LENGTH)
    if exact:
        return await _exactly(store, needle, kind=kind, reason=reason, after=after), False
    needle = needle.lower()
    found: list[Suppression] = []
    while len(found) <= limit:
        batch = await listing(store, kind=kind, reason=reason, after=after, limit=BATCH)
        found += [s for s in batch if needle in s.address.lower()]
        if len(batch) < BATCH:
            break
        after = (batch[-1].address, batch[-1].kind)
    return found[:limit], len(found) > limit


async def _exactly(store: Suppressions, address: str, *, kind: str | None,
                   reason: str | None, after: tuple[str, str] | None) -> list[Suppression]:
    pairs: list[tuple[str, str]] = []
    problem: InvalidInput | None = None
    for k in [kind] if kind is not None else sorted(CHANNEL_KINDS):
        try:
            pairs.append((checked_address(k, address, "address"), k))
        except InvalidInput as exc:
            problem = problem or exc
    if not pairs:
        assert problem is not None
        raise problem
    found = await store.suppressions_for(pairs)
    return sorted((s for s in found.values()
                   if (reason is None or s.reason.value == reason)
                   and (after is None or (s.address, s.kind) > after)),
                  key=lambda s: (s.address, s.kind))


@dataclass(frozen=True, kw_only=True)
class History:
    """One address on one kind: the entry it has now (None: not suppressed), and every
    operator's addition and removal of it (``Event.worker`` is who, ``at`` when,
    ``detail`` why), oldest first."""

    address: str
    kind: str
    entry: Suppression | None
    events: list[Event]


async def history(store: SuppressionStore, *, address: str, kind: str) -> History:
    """Whether ``address`` is suppressed on ``kind``, and who added and removed it."""
    normal = checked_address(check_kind(kind), address, "address")
    found = await store.suppressions_for([(normal, kind)])
    events = await store.events_for(audit_key(kind, surrogate(normal)))
    return History(address=normal, kind=kind, entry=found.get((normal, kind)),
                   events=events)


async def everything(store: Suppressions, *, kind: str | None = None,
                     reason: str | None = None) -> AsyncIterator[Suppression]:
    """The whole list (narrowed by kind and reason), a page at a time."""
    after: tuple[str, str] | None = None
    while True:
        page = await listing(store, kind=kind, reason=reason, after=after, limit=BATCH)
        for found in page:
            yield found
        if len(page) < BATCH:
            return
        after = (page[-1].address, page[-1].kind)


# ---------------------------------------------------------------- CSV


def read_csv(text: str) -> list[Entry]:
    """The entries of an import file, every row checked before any is stored: an error
    names the line and the column (``line 7: address``)."""
    text = text.removeprefix("\ufeff")  # the byte order mark spreadsheets write
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [name.strip().lower() for name in reader.fieldnames or []]
    except csv.Error as exc:
        raise InvalidInput("line 1", f"is not CSV: {exc}") from None
    if "address" not in header or "kind" not in header:
        raise InvalidInput("csv", "the first row must name the columns: address,kind "
                                  "(and optionally reason,note)")
    unknown = sorted(set(header) - set(IMPORT_COLUMNS) - set(EXPORT_ONLY))
    if unknown:
        raise InvalidInput("csv", f"unknown column {unknown[0]!r}; the columns are "
                                  f"{', '.join(IMPORT_COLUMNS)}")
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise InvalidInput("csv", f"column {twice[0]!r} is named twice")
    if "note" in header and "detail" in header:
        raise InvalidInput("csv", "name the column note or detail, not both")
    reader.fieldnames = header
    found: list[Entry] = []
    rows = iter(reader)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except csv.Error as exc:
            # The reader counts the lines it has read whole: the bad one is the next.
            raise InvalidInput(f"line {reader.line_num + 1}", f"is not CSV: {exc}") from None
        line = reader.line_num
        if len(found) >= MAX_IMPORT_ROWS:
            raise InvalidInput("csv", f"holds more than {MAX_IMPORT_ROWS} rows; split it")
        if None in row:
            raise InvalidInput(f"line {line}", "has more values than the header has columns")
        values = {k: (v or "").strip() for k, v in row.items()}
        if not any(values.values()):
            continue  # a blank line
        note = values.get("note") or _exported_detail(values.get("detail")) or None
        found.append(entry(values["address"], values["kind"],
                           reason=values.get("reason") or Reason.MANUAL,
                           note=note, where=f"line {line}: "))
    return found


def recorded_by(name: str) -> str:
    """Who the audit trail names, when tidings made the name (an API token's name and
    id): put on one line and cut to ``BY_LENGTH`` in its middle (the end names the
    token's id), never refused, since no caller could correct it (a typed ``--by`` is
    checked, and refused naming it)."""
    text = _CONTROL.sub(" ", make_storable(name)).strip()
    if len(text) <= BY_LENGTH:
        return text or "?"
    tail = 16
    return text[:BY_LENGTH - tail - 1] + "\u2026" + text[-tail:]


def _exported_detail(detail: str | None) -> str | None:
    """An exported ``detail`` as a note: a provider's words may run over lines and past
    a note's length, and an export must import again, so they are put on one line and
    cut, not refused."""
    if not detail:
        return None
    return _CONTROL.sub(" ", make_storable(detail)).strip()[:NOTE_LENGTH] or None


async def import_entries(store: SuppressionStore, entries: Sequence[Entry], *, by: str,
                         now: float) -> ImportResult:
    """Suppress every entry not suppressed yet, ``BATCH`` per transaction; one audit
    event for the whole import."""
    check_line(by, "by", max_length=BY_LENGTH)
    added = 0
    for start in range(0, len(entries), BATCH):
        chunk = entries[start:start + BATCH]
        added += len(await store.suppression_add_many(
            [_suppression(e, now=now, source=f"operator:{by} (import)")
             for e in chunk], now=now))
    result = ImportResult(rows=len(entries), added=added, already=len(entries) - added)
    await store.event_append_many([Event(
        key="suppression/import", channel="-", type="suppression_import", at=now,
        worker=by, detail=f"{result.added} added, {result.already} already suppressed, "
                          f"of {result.rows} rows")])
    log.warning("suppression list imported", extra={"by": by, "added": result.added,
                                                    "already": result.already})
    return result


def csv_header() -> str:
    return _csv_row(EXPORT_COLUMNS)


def csv_line(found: Suppression) -> str:
    """One exported row (``EXPORT_COLUMNS``)."""
    when = datetime.fromtimestamp(found.created_at, UTC).isoformat(timespec="seconds")
    return _csv_row((found.address, found.kind, found.reason.value, found.source, when,
                     found.key or "", found.detail or ""))


def _csv_row(values: Sequence[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(values)
    return out.getvalue()


async def export_csv(store: Suppressions, *, kind: str | None = None,
                     reason: str | None = None) -> AsyncIterator[str]:
    """The list as CSV text, a row at a time (header first), read a page at a time."""
    yield csv_header()
    async for found in everything(store, kind=kind, reason=reason):
        yield csv_line(found)
