"""Digest windows, the pure rules; many events for one recipient in a window become one
message.

A ``notify(..., digest=Digest(key=...))`` does not make an intent: it adds an *item*
(the event: its key and data) to the open *window* of its digest key (one per
recipient and topic, e.g. ``comments:cust_1042``), durably. A window opens with its
first item and closes:

- fixed (``sliding=False``): ``window_s`` after it opened;
- sliding: ``window_s`` after its latest item, but never later than ``max_wait_s``
  after it opened;
- at once when it holds ``max_items`` items, or when one more item would carry its
  data over the payload limit (that item opens the next window).

A closed window is *sealed* first (no item joins it any more; an item that arrives
then opens the next window) and then admitted: one intent per channel under a key made
from the window (``digest_intent_key``), whose template receives the items in order
(``items``, ``count``, ``digest_key``). Sealing, admitting and marking the window done
are each idempotent, so a closer killed between them is finished by the next one, and
two closers admit one digest once.

Closing is one job shared by every closer (the scheduler and each worker's reconcile
loop): a close pass takes a page of due windows and seals, admits and finishes it in
one store transaction that other closers pass over, so N closers at once each do a
share of the work, not all of it; a closer that dies mid-page leaves the page as it
found it, to the next. The ``notify`` call that fills a window (its cap) closes that
window alone.

An item is known by (digest key, item key) for good: a retried or replayed event is
the same item, in the window it first joined, never in two. Cancelling an item while
its window is open takes it out; a window whose every item was cancelled is sent
nothing. Pure: the stores apply what this module decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from tidings.core.errors import InvalidInput
from tidings.core.keys import MAX_KEY_LENGTH, check_text
from tidings.core.model import MAX_PAYLOAD_BYTES

#: The longest digest key (its window's id and intent keys add at most 45 characters
#: and the channel's name).
MAX_DIGEST_KEY: Final = 400
#: The most items a window may be told to hold.
MAX_ITEMS_LIMIT: Final = 1000
#: What a digest's template data may carry beside its items (``digest_key``, ``count``
#: and the recipient's own fields), so items alone never make the payload too big.
ITEMS_BUDGET: Final = MAX_PAYLOAD_BYTES - 16 * 1024


class WindowState(StrEnum):
    """Where a digest window is."""

    OPEN = "open"
    """Items join it."""
    SEALED = "sealed"
    """Closed to items; its digest is being admitted."""
    CLOSED = "closed"
    """Its digest was admitted (``intent_keys``)."""
    EMPTY = "empty"
    """Closed with every item cancelled: nothing was sent."""


@dataclass(frozen=True, kw_only=True)
class Digest:
    """Collect ``notify`` calls under ``key`` into one message per window.

    ``window_s``: how long a window stays open (fixed from its first item, or from its
    latest with ``sliding``); ``max_wait_s`` bounds a sliding window from its first
    item (default four windows); ``max_items`` closes a window at once when reached.
    """

    key: str
    window_s: float
    max_items: int = 100
    sliding: bool = False
    max_wait_s: float | None = None

    def __post_init__(self) -> None:
        check_digest(self)

    @property
    def wait_s(self) -> float:
        """The longest a window stays open after its first item."""
        if not self.sliding:
            return self.window_s
        return 4 * self.window_s if self.max_wait_s is None else self.max_wait_s


def _seconds(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(field, f"must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(field, "must be a positive, finite number of seconds")
    if value > 366 * 86400:
        raise InvalidInput(field, "must be at most a year (31622400 seconds)")
    return float(value)


def check_digest(digest: Digest) -> None:
    """Refuse, naming the field (``digest.window_s``, ...), what no window can be."""
    key = check_text(digest.key, "digest.key", max_length=MAX_DIGEST_KEY)
    if not key or any(ch.isspace() for ch in key):
        raise InvalidInput("digest.key", "must be a non-empty string without whitespace")
    _seconds(digest.window_s, "digest.window_s")
    if isinstance(digest.max_items, bool) or not isinstance(digest.max_items, int):
        raise InvalidInput("digest.max_items", "must be an integer")
    if not 1 <= digest.max_items <= MAX_ITEMS_LIMIT:
        raise InvalidInput("digest.max_items", f"must be 1 to {MAX_ITEMS_LIMIT}")
    if not isinstance(digest.sliding, bool):
        raise InvalidInput("digest.sliding", "must be true or false")
    if digest.max_wait_s is not None:
        if not digest.sliding:
            raise InvalidInput("digest.max_wait_s", "bounds a sliding window only; "
                                                    "a fixed window closes after window_s")
        if _seconds(digest.max_wait_s, "digest.max_wait_s") < digest.window_s:
            raise InvalidInput("digest.max_wait_s", "must be at least window_s")


def digest_of(value: Digest | Mapping[str, Any]) -> Digest:
    """A ``Digest``, or one made from a mapping of its fields (the publish route's JSON);
    an unknown field is named."""
    if isinstance(value, Digest):
        return value
    if not isinstance(value, Mapping):
        raise InvalidInput("digest", f"must be a Digest or a mapping, not "
                                     f"{type(value).__name__}")
    known = {"key", "window_s", "max_items", "sliding", "max_wait_s"}
    for name in value:
        if name not in known:
            raise InvalidInput(f"digest.{name}",
                               f"is not a digest field ({', '.join(sorted(known))})")
    if "key" not in value or "window_s" not in value:
        raise InvalidInput("digest.key" if "key" not in value else "digest.window_s",
                           "is missing")
    return Digest(**dict(value))


def window_id(digest_key: str, opened_at: float) -> str:
    """The id of the window of ``digest_key`` opened at ``opened_at``:
    ``digest/comments:cust_1/2026-12-05T21:00:00.123456Z``. A store opens a key's windows
    at distinct microseconds, so the id is the window's for good."""
    at = datetime.fromtimestamp(opened_at, UTC).isoformat(timespec="microseconds")
    return f"digest/{digest_key}/{at.replace('+00:00', 'Z')}"


def digest_intent_key(window: str, channel: str) -> str:
    """The key of a window's digest on one channel (``<window id>:<channel>``)."""
    return f"{window}:{channel}"


def intent_key_room(channel: str) -> int:
    """The longest digest key whose intent keys on ``channel`` fit ``MAX_KEY_LENGTH``."""
    return MAX_KEY_LENGTH - len(digest_intent_key(window_id("", 0.0), channel))


def opening(*, window_s: float, now: float,
            last_opened: float | None) -> tuple[float, float]:
    """When a new window opens and when it closes (before any item slides it): at
    ``now``, or a microsecond after the key's last window if that is later, so two
    windows of one key never share an id."""
    opened = now if last_opened is None else max(now, last_opened + 1e-6)
    return opened, opened + window_s


def slid(*, sliding: bool, window_s: float, wait_s: float, opened_at: float,
         closes_at: float, now: float) -> float:
    """When a window closes after an item added at ``now``: a sliding window moves to
    ``now + window_s`` within ``wait_s`` of its opening; a fixed one stays."""
    if not sliding:
        return closes_at
    return max(closes_at, min(now + window_s, opened_at + wait_s))


def over_budget(used_bytes: int, item_bytes: int) -> bool:
    """Whether an item of ``item_bytes`` would carry a window holding ``used_bytes`` over
    what a digest's payload may hold (then it opens the next window)."""
    return used_bytes > 0 and used_bytes + item_bytes + 1 > ITEMS_BUDGET


def digest_data(*, digest_key: str, items: Sequence[Mapping[str, Any]],
                base: Mapping[str, Any]) -> dict[str, Any]:
    """The template data of a digest: the recipient's fields (``base``), then ``items``
    (each item's data, in the order they were added), ``count`` and ``digest_key``."""
    return {**base, "items": list(items), "count": len(items), "digest_key": digest_key}
