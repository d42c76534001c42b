"""The public surface is explicit: adding or removing a name is a decision, not an accident."""

import tidings

PUBLIC = {
    "Audience", "Campaign", "Client", "ClientError", "Clock", "ConfigurationError", "Digest",
    "Digested", "FakeClock",
    "GeneratorAudience",
    "InvalidInput", "InvalidTransition", "KeyConflict", "KeysetAudience", "MessageDecodeError",
    "NotifyRequest", "Notified", "Recipient", "Runtime", "Schedule", "SchemaOutOfDate", "Settings",
    "SqlAudience", "State", "StoreError", "SystemClock", "TidingsError", "TransportError",
    "__version__", "build_runtime",
}


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert set(tidings.__all__) == PUBLIC
    for name in tidings.__all__:
        assert getattr(tidings, name) is not None


def test_every_public_name_has_a_home() -> None:
    # The package imports its names when first used: each must say where it lives.
    assert set(tidings._HOMES) == PUBLIC - {"__version__"}
