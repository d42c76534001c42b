"""What a plug-in author and an application's tests use: the provider contract kit
(``assert_conforms``, ``Scenario``, ``ProviderCase``) and the fake clock.

Public: every name in ``__all__`` (see docs/compatibility.md).
"""

from tidings.core.clock import FakeClock
from tidings.testing.provider_kit import (
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
    "CHECKS",
    "KEY",
    "RETRY_AFTER_S",
    "CheckResult",
    "ContractBroken",
    "FakeClock",
    "ProviderCase",
    "ProviderSide",
    "Scenario",
    "assert_conforms",
    "run_contract",
]
