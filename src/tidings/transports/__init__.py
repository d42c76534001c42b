"""Transport port and its adapters."""

from tidings.transports.base import Transport

__all__ = ["Transport"]
