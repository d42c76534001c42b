"""The one rule for text that every store can hold, and every delivery key's shape.

PostgreSQL ``text`` cannot hold NUL, and no UTF-8 column can hold a lone surrogate
(``"\\ud800"``): such a value reaches the store only to fail there, on every retry,
for ever. So every entry point (the API, ``notify``, the CLI, a queue message) checks
its text here first and refuses it with an error naming the field.

A key is stricter: it is an idempotency key, a message id, a log field and a path
segment, so it is bounded and holds no whitespace and no control character either.

Every key tidings makes is made here, by the scheduler, the API, ``notify`` and (from
``campaign_key_parts``) the PostgreSQL server-side admission alike; the format is
pinned by a golden file in the tests, because a key that changes between versions
turns every redelivery and replay into a second send.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidings.core.errors import InvalidInput

MAX_KEY_LENGTH = 512

# NUL and the surrogate range: what no store's text column takes.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# ... plus whitespace and the C0/C1 control characters: what no key holds.
_NOT_IN_KEY = re.compile(r"[\s\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# A JSON object key shown as ``.name`` in an error's field; others as ``['a key']``.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def _describe(char: str) -> str:
    if char == "\x00":
        return "a NUL character"
    if "\ud800" <= char <= "\udfff":
        return f"a lone surrogate (U+{ord(char):04X})"
    if char.isspace():
        return f"whitespace (U+{ord(char):04X})"
    return f"a control character (U+{ord(char):04X})"


def check_text(value: object, field: str, *, max_length: int | None = None) -> str:
    """``value`` if it is a string every store can hold, else ``InvalidInput`` on ``field``."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, not {type(value).__name__}")
    if max_length is not None and len(value) > max_length:
        raise InvalidInput(field, f"is {len(value)} characters, the limit is {max_length}")
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        raise InvalidInput(field, f"must not contain {_describe(bad.group())}")
    return value


def storable(value: str) -> bool:
    """True when ``check_text`` would accept ``value`` (for validators that raise their own)."""
    return _UNSTORABLE.search(value) is None


#: What a line of free text (a reason, a note, a name) must not hold: a line break would
#: forge an output line and an escape would recolour an operator's terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Characters of one line of free text an operator writes.
MAX_LINE = 500


def check_line(value: object, field: str, *, max_length: int = MAX_LINE) -> str:
    """``value`` if it is one line of text (no control character) of at most
    ``max_length`` characters every store can hold, else ``InvalidInput`` on ``field``."""
    text = check_text(value, field, max_length=max_length)
    bad = _CONTROL.search(text)
    if bad is not None:
        raise InvalidInput(field, f"must be one line without control characters (found "
                                  f"U+{ord(bad.group()):04X})")
    return text


def make_storable(value: str) -> str:
    """``value`` with what no store can hold replaced by U+FFFD: for text tidings did not
    take from a caller but must record (a provider's answer, an exception's message)."""
    return _UNSTORABLE.sub("\ufffd", value) if _UNSTORABLE.search(value) else value


def validate_key(key: object, field: str = "key") -> str:
    """``key`` if it can be a delivery key: 1 to 512 characters, no whitespace, no control
    character, nothing a store cannot hold."""
    if not isinstance(key, str) or not key:
        raise InvalidInput(field, "must be a non-empty string")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(field, f"is {len(key)} characters, the limit is {MAX_KEY_LENGTH}")
    bad = _NOT_IN_KEY.search(key)
    if bad is not None:
        raise InvalidInput(field, f"must not contain {_describe(bad.group())}")
    return key


#: Values ``check_json_text`` visits at most: a JSON text of the payload limit holds
#: fewer, and a Python value that refers to itself (or shares one list many times over,
#: 2**100 paths in 100 levels) would hold the check, and the event loop, for ever.
MAX_JSON_VALUES = 256 * 1024


def canonical_json(value: Any, *, allow_nan: bool = True) -> str:
    """The one text of a JSON value that two requests are compared by: object keys
    sorted, no spaces. The publish route hashes a request's body by it (one
    Idempotency-Key, one body), template data are stored in it, and a notify repeated
    under its key is the same one only if its data's text is this same text
    (``tidings.core.repeats``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=allow_nan)


def check_json_text(value: object, field: str) -> None:
    """``check_text`` on every string of a JSON value, object keys included; the error
    names where (``data.items[2].name``). Iterative: any depth the parser took.

    Where a value sits is kept as a link to its parent and spelled out only for an
    error, so a walk costs the same at any depth."""
    pending: list[tuple[object, _Where]] = [(value, (None, field))]
    visited = 0
    while pending:
        item, where = pending.pop()
        visited += 1
        if visited > MAX_JSON_VALUES:
            raise InvalidInput(field, f"holds more than {MAX_JSON_VALUES} values, or refers "
                                      "to itself: no payload within the limit does")
        if isinstance(item, str):
            if not storable(item):
                check_text(item, _spelled(where))
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidInput(_spelled(where), f"has a key that is "
                                                        f"{type(key).__name__}, not a string")
                # !a: the field must show a key it refuses, not carry it.
                named = (where, f".{key}" if _PLAIN_NAME.fullmatch(key) else f"[{key[:40]!a}]")
                if not storable(key):
                    check_text(key, _spelled(named))
                pending.append((child, named))
        elif isinstance(item, list | tuple):
            pending.extend((child, (where, f"[{index}]")) for index, child in enumerate(item))


#: Where a JSON value sits: its parent's place and its own step (``.name``, ``[2]``),
#: or ``(None, field)`` for the value checked.
_Where = tuple["_Where | None", str]


def _spelled(where: _Where) -> str:
    steps: list[str] = []
    link: _Where | None = where
    while link is not None:
        link, step = link
        steps.append(step)
    return "".join(reversed(steps))


# ---------------------------------------------------------------- the keys tidings makes

# A key part: no '/', no whitespace, no control character, nothing a store cannot hold.
# Whole part: fullmatch (a "$" would let "x\n" by).
_KEY_PART = re.compile(r"[^\s/\x00-\x1f\x7f-\x9f\ud800-\udfff]+")


def campaign_key(campaign: str, logical_date: str, recipient_id: str, channel: str,
                 version: int) -> str:
    """The delivery key of one campaign occurrence for one recipient on one channel.

    >>> campaign_key("weekly-digest", "2026-08-14", "cust_1042", "email", 3)
    'weekly-digest/2026-08-14/cust_1042/email/v3'
    """
    for name, part in (("campaign", campaign), ("logical_date", logical_date),
                       ("recipient.id", recipient_id), ("channel", channel)):
        if not _KEY_PART.fullmatch(part):
            raise InvalidInput(name, f"{part!r} must be non-empty with no '/' or spaces")
    return f"{campaign}/{logical_date}/{recipient_id}/{channel}/v{version}"


def is_key_part(name: str) -> bool:
    """Whether ``name`` (a campaign's, a channel's) can be one part of a delivery key:
    non-empty, no '/', no whitespace, no control character."""
    return _KEY_PART.fullmatch(name) is not None


def campaign_key_parts(campaign: str, logical_date: str, channel: str,
                       version: int) -> tuple[str, str]:
    """What ``campaign_key`` puts before and after the recipient id (checked once)."""
    campaign_key(campaign, logical_date, "-", channel, version)
    return f"{campaign}/{logical_date}/", f"/{channel}/v{version}"


def campaign_key_maker(campaign: str, logical_date: str, channel: str,
                       version: int) -> Callable[[str], str]:
    """``campaign_key`` with every part but the recipient id fixed and checked once."""
    prefix, suffix = campaign_key_parts(campaign, logical_date, channel, version)

    def key(recipient_id: str) -> str:
        check_recipient_ids([recipient_id])
        return prefix + recipient_id + suffix

    return key


_BAD_ID_CHAR = re.compile(r"[\s/\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_recipient_ids(ids: Sequence[str]) -> None:
    """Refuse a recipient id that cannot be part of a key (empty, '/' or whitespace).

    One scan over the joined ids, not one regex call per id: this runs for every
    member of every page.
    """
    joined = "".join(ids)  # bad characters are bad one at a time: no separator needed
    if all(ids) and _BAD_ID_CHAR.search(joined) is None:
        return
    bad = next(i for i in ids if not _KEY_PART.fullmatch(i))
    raise InvalidInput("recipient.id", f"{bad!r} must be non-empty with no '/', spaces or "
                       "control characters")


def notify_key(key: str, channel: str) -> str:
    """The delivery key of a one-off intent on one channel: ``shipment-4821:customer-73:sms``."""
    return f"{key}:{channel}"


def template_ref(template: str, version: int) -> str:
    """The versioned template a campaign's intents name: ``weekly-digest/v3``."""
    return f"{template}/v{version}"


def queue_key(queue: str, day: str, customer_id: str, channel: str, segment: str) -> str:
    """The key of a publish to a channel queue (``POST /v1/queue/publish``):
    ``receipts/2026-08-14/cust_1042/email/v2``."""
    return f"{queue}/{day}/{customer_id}/{channel}/{segment}"
