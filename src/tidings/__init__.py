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

from tidings.core import moved as _moved
from tidings.core.lazy_names import lazy_getattr
from tidings.core.version import __version__

_moved.install()  # the import paths before the stage packages, with a warning

if TYPE_CHECKING:
    from tidings.admission.audience import Audience, GeneratorAudience, KeysetAudience, SqlAudience
    from tidings.admission.campaign import Campaign
    from tidings.admission.digests import Digested
    from tidings.admission.intake import NotifyRequest
    from tidings.client import Client, ClientError
    from tidings.config.settings import Settings
    from tidings.core.clock import Clock, FakeClock, SystemClock
    from tidings.core.cron import Schedule
    from tidings.core.digest import Digest
    from tidings.core.errors import (
        ConfigurationError,
        InvalidInput,
        InvalidTransition,
        KeyConflict,
        MessageDecodeError,
        SchemaOutOfDate,
        StoreError,
        TidingsError,
        TransportError,
    )
    from tidings.core.model import Recipient
    from tidings.core.repeats import Notified
    from tidings.core.states import State
    from tidings.runtime import Runtime, build_runtime

__all__ = [
    "Audience",
    "Campaign",
    "Client",
    "ClientError",
    "Clock",
    "ConfigurationError",
    "Digest",
    "Digested",
    "FakeClock",
    "GeneratorAudience",
    "InvalidInput",
    "InvalidTransition",
    "KeyConflict",
    "KeysetAudience",
    "MessageDecodeError",
    "Notified",
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
    "Audience": "tidings.admission.audience", "GeneratorAudience": "tidings.admission.audience",
    "KeysetAudience": "tidings.admission.audience", "SqlAudience": "tidings.admission.audience",
    "Campaign": "tidings.admission.campaign",
    "Digested": "tidings.admission.digests", "Digest": "tidings.core.digest",
    "Client": "tidings.client", "ClientError": "tidings.client",
    "Clock": "tidings.core.clock", "FakeClock": "tidings.core.clock",
    "SystemClock": "tidings.core.clock",
    "Schedule": "tidings.core.cron",
    "ConfigurationError": "tidings.core.errors", "InvalidInput": "tidings.core.errors",
    "InvalidTransition": "tidings.core.errors", "MessageDecodeError": "tidings.core.errors",
    "KeyConflict": "tidings.core.errors",
    "SchemaOutOfDate": "tidings.core.errors", "StoreError": "tidings.core.errors",
    "TidingsError": "tidings.core.errors", "TransportError": "tidings.core.errors",
    "NotifyRequest": "tidings.admission.intake",
    "Recipient": "tidings.core.model",
    "Notified": "tidings.core.repeats",
    "Runtime": "tidings.runtime", "build_runtime": "tidings.runtime",
    "Settings": "tidings.config.settings",
    "State": "tidings.core.states",
}


__getattr__ = lazy_getattr("tidings", _HOMES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
