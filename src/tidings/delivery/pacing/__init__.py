"""Pacing: one budget per channel shared by every worker process of that channel.

The algorithm (``algorithm``) is pure over a small JSON-able state; a backend only
gives an atomic read-modify-write of that state (``PacerBackend.pacer_transact``).
Every Store is a backend, so processes sharing a store share the budget.
"""

from tidings.core.pacing import Grant, PaceLimits, parse_quota
from tidings.delivery.pacing.memory import MemoryPacerBackend
from tidings.delivery.pacing.pacer import Pacer
from tidings.stores.base import PacerBackend

__all__ = ["Grant", "MemoryPacerBackend", "PaceLimits", "Pacer", "PacerBackend", "parse_quota"]
