"""tidings: scheduled, multi-channel notifications, exactly one business delivery per intent.

Build a runtime from settings (the one composition root), then ``notify``/``cancel``,
or run workers, schedulers and the reconciler::

    settings = Settings.load("tidings.toml")
    async with await build_runtime(settings) as runtime:
        await runtime.notify(key="shipment-4821:customer-73", recipient={...},
                             channels=["email", "sms"], template="shipment-update/v1")

The names below are imported when first used (PEP 562), not with the package: every
``tidings`` process (a worker restarted after a crash above all) imports ``tidings``
first, and most of them need only a few of these modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from tidings.audience import Audience, GeneratorAudience, KeysetAudience, SqlAudience
    from tidings.campaign import Campaign
    from tidings.clock import Clock, FakeClock, SystemClock
    from tidings.cron import Schedule
    from tidings.errors import (
        ConfigurationError,
        InvalidInput,
        InvalidTransition,
        MessageDecodeError,
        SchemaOutOfDate,
        StoreError,
        TidingsError,
        TransportError,
    )
    from tidings.intake import NotifyRequest
    from tidings.model import Recipient
    from tidings.runtime import Runtime, build_runtime
    from tidings.settings import Settings
    from tidings.states import State

__version__ = "0.1.0"
__all__ = [
    "Audience",
    "Campaign",
    "Clock",
    "ConfigurationError",
    "FakeClock",
    "GeneratorAudience",
    "InvalidInput",
    "InvalidTransition",
    "KeysetAudience",
    "MessageDecodeError",
    "NotifyRequest",
    "Recipient",
    "Runtime",
    "Schedule",
    "SchemaOutOfDate",
    "Settings",
    "SqlAudience",
    "State",
    "StoreError",
    "SystemClock",
    "TidingsError",
    "TransportError",
    "__version__",
    "build_runtime",
]

#: Where each public name lives.
_HOMES = {
    "Audience": "tidings.audience", "GeneratorAudience": "tidings.audience",
    "KeysetAudience": "tidings.audience", "SqlAudience": "tidings.audience",
    "Campaign": "tidings.campaign",
    "Clock": "tidings.clock", "FakeClock": "tidings.clock", "SystemClock": "tidings.clock",
    "Schedule": "tidings.cron",
    "ConfigurationError": "tidings.errors", "InvalidInput": "tidings.errors",
    "InvalidTransition": "tidings.errors", "MessageDecodeError": "tidings.errors",
    "SchemaOutOfDate": "tidings.errors", "StoreError": "tidings.errors",
    "TidingsError": "tidings.errors", "TransportError": "tidings.errors",
    "NotifyRequest": "tidings.intake",
    "Recipient": "tidings.model",
    "Runtime": "tidings.runtime", "build_runtime": "tidings.runtime",
    "Settings": "tidings.settings",
    "State": "tidings.states",
}


__getattr__ = lazy_getattr("tidings", _HOMES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
