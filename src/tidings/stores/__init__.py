"""Store port and its adapters."""

from tidings.stores.base import (
    Change,
    Claim,
    ClaimKind,
    Occurrence,
    OccurrenceProgress,
    PublishItem,
    Store,
    Switch,
)

__all__ = [
    "Change",
    "Claim",
    "ClaimKind",
    "Occurrence",
    "OccurrenceProgress",
    "PublishItem",
    "Store",
    "Switch",
]
