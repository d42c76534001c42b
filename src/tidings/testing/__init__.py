"""What a plug-in author and an application's tests use.

For a provider plug-in's author: the provider contract kit (``assert_conforms``,
``Scenario``, ``ProviderCase``) and the fake clock. For an application's own tests:
what it notified, read from the store and asserted on (``assert_notified``,
``notifications``), and delivery with no worker to an in-memory provider (``Outbox``,
``deliver``, ``eager``); ``tidings.testing.pytest_plugin`` has them as fixtures.

Public: every name in ``__all__`` (see docs/compatibility.md).
"""

from tidings.core.clock import FakeClock
from tidings.testing.notifications import (
    Notification,
    Notifications,
    anotifications,
    assert_not_notified,
    assert_notified,
    notifications,
)
from tidings.testing.outbox import Outbox, adeliver, aeager, aoutbox, deliver, eager, outbox
from tidings.testing.provider_kit import (
    BATCH_CHECKS,
    CHECKS,
    KEY,
    RETRY_AFTER_S,
    CheckResult,
    ContractBroken,
    ProviderCase,
    ProviderSide,
    Scenario,
    assert_conforms,
    run_contract,
)

__all__ = [
    "BATCH_CHECKS",
    "CHECKS",
    "KEY",
    "RETRY_AFTER_S",
    "CheckResult",
    "ContractBroken",
    "FakeClock",
    "Notification",
    "Notifications",
    "Outbox",
    "ProviderCase",
    "ProviderSide",
    "Scenario",
    "adeliver",
    "aeager",
    "anotifications",
    "aoutbox",
    "assert_conforms",
    "assert_not_notified",
    "assert_notified",
    "deliver",
    "eager",
    "notifications",
    "outbox",
    "run_contract",
]
