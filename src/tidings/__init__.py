"""tidings: scheduled, multi-channel notifications, exactly one business delivery per intent.

Build a runtime from settings (the one composition root), then ``notify``/``cancel``,
or run workers, schedulers and the reconciler::

    settings = Settings.load("tidings.toml")
    async with await build_runtime(settings) as runtime:
        await runtime.notify(key="shipment-4821:customer-73", recipient={...},
                             channels=["email", "sms"], template="shipment-update/v1")
"""

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
