"""The exception tree of tidings.

    TidingsError
     ├── ConfigurationError      bad settings, campaign or channel declaration (names the field)
     ├── InvalidInput            bad caller input to notify()/cancel()/replay (names the field)
     │    └── KeyConflict        a notify under a key already used for another request
     ├── InvalidTransition       a state change not in the transition table (a bug)
     ├── StoreError              the store cannot do what was asked
     │    └── SchemaOutOfDate    the database schema is older than this code
     ├── TransportError          the queue cannot do what was asked
     └── MessageDecodeError      a queue message is not a tidings message (poison)

Provider answers are not exceptions: a provider returns an ``Outcome`` value
(accepted, rate limited, transient, permanent, uncertain) and the core decides.
"""

from __future__ import annotations

from collections.abc import Iterable


class TidingsError(Exception):
    """Base class of every error raised by tidings."""


#: Characters of a refused name echoed back (a pasted megabyte is not repeated).
_SHOWN = 80


def unknown_name(kind: str, name: str, declared: Iterable[str]) -> str:
    """The message for a name that is not declared: ``unknown channel 'x'; declared: a, b``."""
    shown = repr(name) if len(name) <= _SHOWN else f"{name[:_SHOWN]!r}… ({len(name):,} characters)"
    return f"unknown {kind} {shown}; declared: {', '.join(declared) or 'none'}"


class FieldError(TidingsError):
    """An error about one named field of the input."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class ConfigurationError(FieldError):
    """Settings, a channel or a campaign declaration is invalid."""


class InvalidInput(FieldError):
    """Caller input (a key, a recipient, a payload, a date) is invalid."""


class KeyConflict(InvalidInput):
    """A notify under a key already used for another request: another template, data,
    recipient, due time, expiry or set of channels. ``key`` is the notify key, ``field``
    the first that differs (``data.total``, ``template``, ``channels``…). Nothing was
    written; the same request again is answered with the keys it made."""

    def __init__(self, key: str, field: str, message: str, *, index: int = 0) -> None:
        self.key = key
        self.index = index
        """Which request of the batch (``notify_many``'s ``requests[index]``; 0 for
        ``notify``)."""
        super().__init__(field, message)


class InvalidTransition(TidingsError):
    """A state change that the transition table does not allow."""

    def __init__(self, from_state: str, to_state: str) -> None:
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(f"transition {from_state} -> {to_state} is not allowed")


class StoreError(TidingsError):
    """The store failed to do what was asked."""


class SchemaOutOfDate(StoreError):
    """The database schema is older than this version of tidings: run `tidings db migrate`.

    ``new`` says the database holds no tidings schema at all (a brand-new file or
    database), which is told apart from one that really is older.
    """

    def __init__(self, where: str, pending: tuple[int, ...], *, new: bool = False) -> None:
        self.pending = pending
        self.new = new
        self.where = where
        names = ", ".join(f"{v:04d}" for v in pending)
        if new:
            message = f"{where}: new database, no tidings schema yet; run `tidings db migrate`"
        else:
            message = (f"{where}: schema is out of date, pending migrations {names}; "
                       "run `tidings db migrate`")
        super().__init__(message)


class TransportError(TidingsError):
    """The transport failed to do what was asked."""


class MessageDecodeError(TidingsError):
    """A queue message cannot be decoded; it is dead-lettered with this reason."""


class ProviderCancelled(TidingsError):
    """A provider's ``send`` raised ``CancelledError`` while nothing cancelled it; the
    request may have left, so the send is uncertain."""


class SendDeadlineExceeded(TidingsError):
    """A provider call outlived the worker's send deadline and was cut off; by then the
    request may have reached the provider, so the send is uncertain."""
