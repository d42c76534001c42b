"""Scrubbing provider text before it becomes an outcome's reason.

Providers echo what they were sent: "550 5.1.1 <ada@example.com>: user unknown",
"The 'To' number +15551234567 is not a valid phone number". Reasons are stored in
the ledger and logged, so every adapter passes provider text through ``redact``:
the recipient (exactly, and an SMS number by its digits too), anything shaped like
an email address or an international phone number, and the adapter's own
credentials are replaced, whitespace is collapsed, the text is capped and made
storable (``keys.make_storable``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tidings.core.keys import make_storable

MAX_REASON_CHARS = 300
# An address starts after a delimiter (or at the start) and ends in a named domain: the
# user of ``postgresql://user@127.0.0.1:5432/db`` or ``redis://:***@cache:6379`` is no
# address (the host would go with it).
_EMAIL = re.compile(r"(?<![^\s<>()\[\]{},;:\"'=])[^\s<>()\[\]{},;:\"'=/]+"
                    r"@(?:[^\s<>()\[\]{},;:\"'/.@]+\.)+[A-Za-z][A-Za-z0-9-]*")
_PHONE = re.compile(r"\+\d[\d ().-]{5,}\d")
_SPACE = re.compile(r"\s+")
# A secret shorter than this would blank out ordinary words; none real is this short.
_MIN_SECRET = 4


def redact(text: str, *, address: str | None = None, secrets: Iterable[str] = ()) -> str:
    """``text`` without the recipient, email addresses, phone numbers or ``secrets``."""
    for secret in secrets:
        if len(secret) >= _MIN_SECRET:
            text = text.replace(secret, "[secret]")
    if address:
        text = re.sub(re.escape(address), "[recipient]", text, flags=re.IGNORECASE)
        digits = re.sub(r"\D", "", address)
        if "@" not in address and len(digits) >= 7:
            text = text.replace(digits, "[recipient]")
    text = scrub(text)
    text = _SPACE.sub(" ", text).strip()
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 1] + "…"
    return make_storable(text)


def scrub(text: str, *, address: str = "[address]", number: str = "[number]") -> str:
    """``text`` with anything shaped like an email address or an international phone
    number replaced (by ``address`` / ``number``), and nothing else changed: no
    whitespace collapsed, no cap (for log lines, tracebacks, API error bodies and the
    dashboard). Cheap when there is nothing to find: each pattern runs only if its
    ``@`` or ``+`` is there."""
    if "@" in text:
        text = _EMAIL.sub(address, text)
    if "+" in text:
        text = _PHONE.sub(number, text)
    return text
