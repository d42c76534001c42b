"""What the command line prints by default (``--json`` prints the data instead): local
ISO times, tables whose cells wrap instead of being cut at the terminal's width, and
one readable sentence or block per command."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidings.core.states import TERMINAL, State
from tidings.operate.readmodel import Delivery, DigestStatus, LedgerStatus

if TYPE_CHECKING:
    # rich is imported by the commands that print a table, not with the CLI: a worker
    # starts through the CLI and prints none.
    from rich.table import Table


def when(at: float | None, *, empty: str = "") -> str:
    """An epoch time as local ISO 8601 with its UTC offset (``2026-12-01T09:40:50+01:00``)."""
    if at is None:
        return empty
    try:
        return datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        # A time no calendar of this platform shows (a row written by an older version,
        # or by hand): its epoch seconds, rather than a traceback instead of the report.
        return f"{at:.0f} (epoch seconds)"


def table(*headers: str, title: str | None = None, whole: Sequence[str] = ()) -> Table:
    """A table whose headers and cells fold onto more lines when the width runs out,
    so a piped or narrow terminal (80 columns) loses no text to an ellipsis; the
    ``whole`` columns (times) are kept on one line."""
    from rich.table import Column, Table

    return Table(*(Column(h, overflow="fold", no_wrap=h in whole) for h in headers),
                 title=title)


def fitted(headers: Sequence[str], rows: Sequence[Sequence[str]], *, width: int,
           title: str | None = None) -> Table:
    """``table`` of ``rows``, or, when it would not fit ``width`` columns, the same
    turned a quarter: one row per header and one column per row, named by its first
    cell (a dozen numbers per channel read as a list on an 80-column terminal instead of
    headers folded three letters a line)."""
    from rich.console import Console

    wide = table(*headers, title=title)
    for row in rows:
        wide.add_row(*row)
    if not rows or Console(width=10_000).measure(wide).maximum <= width:
        return wide
    tall = table(headers[0], *(row[0] for row in rows), title=title)
    for i, header in enumerate(headers[1:], start=1):
        tall.add_row(header, *(row[i] for row in rows))
    return tall


def plain(data: Any) -> str:
    """Data with no text of its own, as ``name: value`` lines (nested values compact)."""
    if isinstance(data, Mapping):
        width = max((len(str(k)) for k in data), default=0)
        return "\n".join(f"{str(k) + ':':<{width + 1}} {_value(v)}" for k, v in data.items())
    if isinstance(data, list | tuple):
        return "\n".join(_value(v) for v in data)
    return _value(data)


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str)
    return str(value)


def migrated(store: str, applied: Sequence[int], version: int) -> str:
    if not applied:
        return f"{store}: schema is current (version {version})"
    names = ", ".join(f"{v:04d}" for v in applied)
    return f"{store}: applied migration{'s' if len(applied) > 1 else ''} {names}; " \
           f"schema version {version}"


def switched(switch: Mapping[str, Any]) -> str:
    verb = "paused" if switch["paused"] else "resumed"
    reason = f" ({switch['reason']})" if switch.get("reason") else ""
    return (f"admission {verb} for {switch['scope']} {switch['name']!r} at "
            f"{when(switch['changed_at'])}{reason}")


def replayed(result: Mapping[str, Any]) -> str:
    """A replay's answer (or, with ``dry_run``, what it would admit)."""
    span = result["date"] if not result.get("to") else f"{result['date']} to {result['to']}"
    occurrences = result.get("occurrences", [])
    deadlines = sorted({o["expires_at"] for o in occurrences if o["expires_at"] is not None})
    until = f"; sendable until {when(deadlines[0])}" if deadlines else ""
    earlier = sorted({o["earlier_version"] for o in occurrences if o["earlier_version"]})
    again = (f"; admitted before under v{', v'.join(map(str, earlier))}: new intents"
             if earlier else "")
    if result.get("dry_run"):
        return (f"would replay {result['campaign']} {span}: {len(occurrences)} "
                f"occurrence{'s' if len(occurrences) != 1 else ''}{until}{again}")
    return (f"replayed {result['campaign']} {span}: {result['members']} members, "
            f"{result['admitted']} intents admitted ({result.get('sendable', 0)} sendable), "
            f"{result['skipped']} skipped, {result['published']} published{until}{again}")


def cancelled(states: Mapping[str, str | None]) -> str:
    lines = []
    for key, state in states.items():
        if state == State.CANCELLED.value:
            lines.append(f"{key}: cancelled")
        elif state == State.CLAIMED.value:
            lines.append(f"{key}: cancel requested (a worker holds it; it is cancelled "
                         "unless its send has started)")
        else:
            lines.append(f"{key}: {state}, too late to cancel")
    return "\n".join(lines)


def pruned(result: Mapping[str, Any]) -> str:
    """A prune's answer (or, with ``dry_run``, what it would remove)."""
    counts = result["pruned"]
    parts = [f"{counts[name]} {name}" for name in ("intents", "events", "occurrences")]
    if counts.get("partitions"):
        parts.append(f"{counts['partitions']} event partitions dropped")
    verb = "would prune" if result.get("dry_run") else "pruned"
    oldest = when(result["oldest_kept"], empty="none (the ledger is empty)")
    return (f"{verb} {', '.join(parts)} (finished more than {result['bound_days']:g} days "
            f"ago); oldest intent kept: {oldest}")


def ledger(data: LedgerStatus) -> str:
    """``tidings status``'s line on the ledger's age span and its next prune."""
    if data.oldest_intent_at is None:
        span = "ledger: no intents"
    else:
        span = (f"ledger: intents from {when(data.oldest_intent_at)} to "
                f"{when(data.newest_intent_at)} ({(data.age_s or 0.0) / 86400:.1f} days)")
    if data.retention_days is None:
        return span
    nxt = ("never (retention.enabled = false)" if data.next_prune_at is None
           else f"{when(data.next_prune_at)} (by a running reconciler)")
    return (f"{span}; finished work kept {data.retention_days:g} days; "
            f"next prune {nxt}")


def digests(data: DigestStatus) -> str | None:
    """``tidings status``'s line on digests waiting for their windows (None: none)."""
    if not data.windows:
        return None
    return (f"digests: {data.windows} window(s) open or closing, {data.items} item(s); "
            f"oldest opened {data.oldest_age_s or 0.0:.0f} s ago")


def reconciled(result: Mapping[str, int]) -> str:
    done = [f"{name.replace('_', ' ')} {count}" for name, count in result.items() if count]
    return "reconciled: " + (", ".join(done) if done else "nothing to repair")


def revoked(token: Mapping[str, Any]) -> str:
    return (f"revoked token {token['id']} ({token['name']}; {', '.join(token['scopes'])}) at "
            f"{when(token['revoked_at'])}")


#: The columns of an inspect's events.
EVENT_HEADERS = ("at", "event", "state", "try", "worker", "provider request id",
                 "recipient / detail")


def inspected(delivery: Delivery, *, width: int | None = None) -> tuple[list[str], Table | str]:
    """One delivery: what it is and the three answers, the provider's receipt and
    request id, why it failed and when it is tried again; then its events, as a table,
    or, when that table would not fit ``width`` columns, one block per event (a table
    squeezed into 80 columns folds its cells two characters a line)."""
    a, i = delivery.answers, delivery.intent
    lines = [
        delivery.key,
        f"  state      {a.state.value}" + (f" ({a.disposition})" if a.disposition
                                            not in (None, a.state.value) else ""),
        f"  selected   {_at(a.selected_at)}",
        f"  enqueued   {_at(a.enqueued_at)}",
        f"  accepted   {_at(a.accepted_at)}",
        f"  recipient  {i.recipient_surrogate} ({i.channel})",
        f"  due        {when(i.due_at)}"
        + (f", expires {when(i.expires_at)}" if i.expires_at else ""),
        f"  attempts   {a.attempts} ({i.failures} counted failures)",
    ]
    optional = [("receipt", i.receipt), ("request id", i.provider_request_id),
                ("reason", a.reason),
                # After a 429 this is the channel's Retry-After; else the backoff's end.
                ("retry at", when(i.next_attempt_at) if i.next_attempt_at and
                 a.state not in TERMINAL else None),
                ("lease", f"{i.lease_owner} until {when(i.lease_expires_at)}"
                 if i.lease_owner else None)]
    lines += [f"  {label:<10} {value}" for label, value in optional if value]
    rows = [(when(e.at), e.type, e.state or "", str(e.attempt or ""), e.worker or "",
             e.provider_request_id or "", e.detail or "") for e in delivery.events]
    events = table(*EVENT_HEADERS, whole=("at", "event", "state"))
    for row in rows:
        events.add_row(*row)
    if width is None or not rows or _natural_width(events) <= width:
        return lines, events
    return lines, _event_blocks(rows)


def _natural_width(wide: Table) -> int:
    """The columns ``wide`` takes when nothing limits it."""
    from rich.console import Console

    return Console(width=10_000).measure(wide).maximum


def _event_blocks(rows: Sequence[Sequence[str]]) -> str:
    """Events one block each: when, what and the state on a line, then what else is
    known, a line per field (a long worker id or detail runs on as one line)."""
    label = max(len(h) for h in EVENT_HEADERS[4:])
    blocks = []
    for at, event, state, attempt, *rest in rows:
        head = "  ".join(p for p in (at, event, state, f"try {attempt}" if attempt else "") if p)
        blocks.append("\n".join([head, *(f"  {name:<{label}}  {value}"
                                        for name, value in zip(EVENT_HEADERS[4:], rest,
                                                               strict=True) if value)]))
    return "\n".join(blocks)


def _at(at: float | None) -> str:
    return "no" if at is None else f"yes, {when(at)}"
