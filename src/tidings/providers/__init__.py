"""Provider port and its adapters."""

from tidings.providers.base import Provider

__all__ = ["Provider"]
