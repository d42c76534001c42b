"""An exception, told as a reason the ledger and the logs may keep.

A provider adapter should answer with an outcome, but a client library can still
raise ("Too many connections"), and its message may echo the recipient or a
credential. ``describe_raised`` gives the exception's type and message with the
recipient, anything shaped like an email address or phone number, bearer tokens and
URL passwords replaced (``logs.scrub_text``, ``redaction.redact``), capped, and
storable (``keys.make_storable``).
"""

from __future__ import annotations

from tidings.core.logs import scrub_text
from tidings.core.redaction import redact


def describe_raised(exc: BaseException, *, address: str | None = None) -> str:
    """``"module.Type: message"`` (builtins unqualified), fit for a reason."""
    kind = type(exc)
    name = (kind.__qualname__ if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}")
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not make the failure worse
        message = "(its message could not be read)"
    return redact(scrub_text(f"{name}: {message}" if message else name), address=address)
