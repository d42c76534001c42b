"""The Provider port, its adapters, and the plug-in API.

A provider of your own implements ``Provider`` (``send`` answering an ``Outcome``,
optionally ``lookup``; with a batch endpoint, ``BatchProvider``'s ``send_batch`` too),
and imports everything it needs from here: these names are public and keep their
import path (docs/compatibility.md); ``tidings.testing`` checks an adapter against the
contract. The built-in adapters live in the modules beside this one (``sandbox``,
``smtp``, ``http``, ``twilio``, ``sendgrid``, ``postmark``, ``resend``).
"""

from tidings.core.clock import Clock
from tidings.core.model import Content, SendData, SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    LookupHint,
    LookupStatus,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.providers.base import BatchProvider, Provider, batch_limit

__all__ = [
    "Accepted",
    "BatchProvider",
    "Clock",
    "Content",
    "Lookup",
    "LookupHint",
    "LookupStatus",
    "Outcome",
    "Permanent",
    "Provider",
    "RateLimited",
    "SendData",
    "SendRequest",
    "Transient",
    "Uncertain",
    "batch_limit",
]
