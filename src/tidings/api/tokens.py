"""API tokens: ``tid_<id>_<secret>``, shown once; the store keeps sha256(secret) only.
A token may carry an expiry (``expires_at``), from which on it is refused as a revoked
one is (``unusable``).

The secret carries 256 bits from ``secrets``, so one sha256 is enough (no password
stretching: nothing here is guessable). The id lets a verifier fetch one row and
compare one hash in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum

from tidings.core.errors import InvalidInput
from tidings.stores.base import ApiToken

PREFIX = "tid"
_TOKEN = re.compile(r"^tid_(?P<id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})$")


class Scope(StrEnum):
    """What a token may do. ``operator`` includes ``viewer``."""

    VIEWER = "viewer"
    """Read status, plans, timelines, dead letters and metrics."""
    OPERATOR = "operator"
    """Steer: admission switches, replay, cancel, dead-letter redrive."""
    TRIGGER = "trigger"
    """Call the cron trigger endpoint (instead of signing it)."""
    PUBLISH = "publish"
    """Publish messages through the queue-compatible endpoint."""


IMPLIED: dict[Scope, frozenset[Scope]] = {Scope.OPERATOR: frozenset({Scope.VIEWER})}


def grants(scopes: Iterable[str], wanted: Scope) -> bool:
    """Whether a token holding ``scopes`` may act with ``wanted``."""
    for name in scopes:
        try:
            held = Scope(name)
        except ValueError:
            continue
        if held is wanted or wanted in IMPLIED.get(held, frozenset()):
            return True
    return False


def parse_scopes(values: Iterable[str], field: str = "scope") -> tuple[str, ...]:
    """Validate scope names (comma-separated values allowed); sorted, without repeats."""
    names: set[str] = set()
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if not name:
                continue
            if name not in {s.value for s in Scope}:
                raise InvalidInput(field, f"unknown scope {name!r}; use "
                                   f"{', '.join(s.value for s in Scope)}")
            names.add(name)
    if not names:
        raise InvalidInput(field, "name at least one scope")
    return tuple(sorted(names))


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


#: The longest life a token may be given: far beyond any rotation, short enough that
#: its expiry is a date every tool can print.
MAX_LIFETIME_S = 100 * 365 * 86400.0


def check_lifetime(seconds: float, field: str = "expires_in") -> float:
    """``seconds`` if it is a token lifetime (above zero, at most a century), else
    InvalidInput naming ``field``."""
    if not 0 < seconds <= MAX_LIFETIME_S:
        raise InvalidInput(field, "must be above zero and at most 100 years (36500d)")
    return seconds


def new_token(*, name: str, scopes: Iterable[str], now: float,
              expires_in_s: float | None = None) -> tuple[str, ApiToken]:
    """A fresh token: the text to show once, and the row to store. With
    ``expires_in_s`` (``check_lifetime``) it is refused from ``now + expires_in_s`` on."""
    if not name.strip():
        raise InvalidInput("name", "must not be empty")
    if expires_in_s is not None:
        check_lifetime(expires_in_s)
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = ApiToken(id=token_id, name=name.strip(), scopes=parse_scopes(scopes),
                   secret_hash=hash_secret(secret), created_at=now,
                   expires_at=None if expires_in_s is None else now + expires_in_s)
    return f"{PREFIX}_{token_id}_{secret}", row


def expired(row: ApiToken, now: float) -> bool:
    """Whether ``row`` carries an expiry that ``now`` has reached."""
    return row.expires_at is not None and now >= row.expires_at


def unusable(row: ApiToken, now: float) -> str | None:
    """Why ``row`` may not be used at ``now`` (revoked, expired), or None."""
    if row.revoked_at is not None:
        return f"token tid_{row.id} is revoked"
    if row.expires_at is not None and expired(row, now):
        when = datetime.fromtimestamp(row.expires_at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        return f"token tid_{row.id} expired at {when}"
    return None


def split_token(text: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed token, else None."""
    match = _TOKEN.match(text)
    return None if match is None else (match["id"], match["secret"])


def matches(row: ApiToken, secret: str) -> bool:
    """Constant-time check of a presented secret against the stored hash."""
    return hmac.compare_digest(hash_secret(secret), row.secret_hash)
