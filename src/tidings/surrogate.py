"""Recipient surrogates: a keyed hash that identifies a recipient in logs and events
without carrying the address or phone number."""

from __future__ import annotations

import hashlib
import hmac
import os

_KEY = os.environ.get("TIDINGS_SURROGATE_KEY", "tidings-surrogate").encode()


def surrogate(value: str, key: bytes | None = None) -> str:
    """A short, stable, keyed digest of ``value`` (``r_`` + 16 hex characters)."""
    digest = hmac.new(key or _KEY, value.encode(), hashlib.sha256).hexdigest()
    return f"r_{digest[:16]}"
