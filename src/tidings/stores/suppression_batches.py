"""What a batch of suppressions and soft bounces means, for every SQL store.

The stores differ in how they bind and run (a JSON array on SQLite, one array per
column on PostgreSQL); what a batch is, is here: the first entry per (address, kind)
stands, the entries a report of a batch makes (``tidings.core.suppression.from_report``),
the strikes its soft bounces make and the suppression they add up to, and the timeline
events of the suppressions added because of an intent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.core.addresses import normalize_address
from tidings.core.suppression import STRIKE, Reason, Suppression, SuppressionRules, from_report
from tidings.stores.provider_events import ReceiptOwner
from tidings.stores.records import ProviderEvent

Pair = tuple[str, str]
#: The columns of ``suppression_insert_many``, in order.
COLUMNS = ("address", "kind", "reason", "source", "created_at", "key", "detail")


@dataclass(frozen=True, kw_only=True)
class Strike:
    """One soft bounce of an address, toward its soft-bounce threshold."""

    address: str
    kind: str
    source: str
    at: float
    key: str


def first_per_pair(entries: Iterable[Suppression]) -> list[Suppression]:
    """The first entry of each (address, kind): a later one changes nothing."""
    seen: dict[Pair, Suppression] = {}
    for entry in entries:
        seen.setdefault((entry.address, entry.kind), entry)
    return list(seen.values())


def entry_rows(entries: Sequence[Suppression]) -> list[list[Any]]:
    """Each entry as a row of ``COLUMNS``."""
    return [[e.address, e.kind, e.reason.value, e.source, e.created_at, e.key, e.detail]
            for e in entries]


def added(entries: Sequence[Suppression], inserted: Iterable[Sequence[Any]]
          ) -> list[Suppression]:
    """The entries whose (address, kind) the insert returned: those added now."""
    now_in = {(str(address), str(kind)) for address, kind in inserted}
    return [e for e in entries if (e.address, e.kind) in now_in]


def timeline_entries(suppressions: Sequence[Suppression]) -> list[tuple[str, str]]:
    """``(key, detail)`` of the ``address_suppressed`` event of each suppression added
    because of an intent: the reason, and what the provider said."""
    return [(s.key, f"{s.reason.value}: {s.detail}" if s.detail else s.reason.value)
            for s in suppressions if s.key is not None]


def source_of(event: ProviderEvent) -> str:
    """The source a provider event's suppression names: the provider and message id."""
    return f"webhook:{event.provider}:{event.message_id}"


def from_reports(joined: Sequence[tuple[ProviderEvent, ReceiptOwner]],
                 rules: SuppressionRules, now: float
                 ) -> tuple[list[Suppression], list[Strike]]:
    """The suppressions and strikes of provider events just attached to their intents:
    hard bounces and complaints suppress, soft bounces strike."""
    entries: list[Suppression] = []
    strikes: list[Strike] = []
    for event, owner in joined:
        does = from_report(event.type.value, event.bounce)
        if does is None:
            continue
        kind = rules.kind_of(owner.channel)
        address = normalize_address(kind, owner.address)
        if does == STRIKE:
            if rules.soft_bounce_limit > 0:
                strikes.append(Strike(address=address, kind=kind, source=source_of(event),
                                      at=event.at, key=owner.key))
            continue
        entries.append(Suppression(address=address, kind=kind, reason=Reason(does),
                                   source=source_of(event), created_at=now, key=owner.key,
                                   detail=event.detail))
    return entries, strikes


def strike_pairs(strikes: Sequence[Strike]) -> tuple[list[str], list[str]]:
    """The distinct (address, kind) pairs of ``strikes``, as two columns."""
    pairs = list(dict.fromkeys((s.address, s.kind) for s in strikes))
    return [a for a, _ in pairs], [k for _, k in pairs]


def from_strikes(strikes: Sequence[Strike], counts: Iterable[Sequence[Any]],
                 rules: SuppressionRules, now: float) -> list[Suppression]:
    """The suppressions that strikes add up to: ``counts`` are ``(address, kind,
    strikes, last at, last source)`` rows within the window (the strikes just written
    included); a pair at ``soft_bounce_limit`` or over is suppressed, naming its latest
    strike's source and intent."""
    keys: Mapping[str, str] = {s.source: s.key for s in strikes}
    window = _span(rules.soft_bounce_window_s)
    found = []
    for address, kind, count, _, source in counts:
        if rules.soft_bounces_suppress(int(count)):
            found.append(Suppression(
                address=str(address), kind=str(kind), reason=Reason.SOFT_BOUNCES,
                source=str(source), created_at=now, key=keys.get(str(source)),
                detail=f"{int(count)} soft bounces within {window}"))
    return found


def _span(seconds: float) -> str:
    """A window as people say it: ``7 days``, ``12 hours``, ``90 s``."""
    for unit, size in (("days", 86400.0), ("hours", 3600.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
