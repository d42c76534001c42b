"""Recipient surrogates: a keyed hash that identifies a recipient in logs and events
without carrying the address or phone number."""

from __future__ import annotations

import hashlib
import hmac
import os

_KEY = os.environ.get("TIDINGS_SURROGATE_KEY", "tidings-surrogate").encode()
# The keyed state of the default key, made once: every outcome a worker records carries
# a surrogate, and copying a keyed HMAC costs a fraction of keying a new one.
_KEYED = hmac.new(_KEY, digestmod=hashlib.sha256)


def surrogate(value: str, key: bytes | None = None) -> str:
    """A short, stable, keyed digest of ``value`` (``r_`` + 16 hex characters)."""
    if key is None or key == _KEY:
        mac = _KEYED.copy()
        mac.update(value.encode())
    else:
        mac = hmac.new(key, value.encode(), hashlib.sha256)
    return f"r_{mac.hexdigest()[:16]}"
