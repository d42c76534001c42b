"""tidings: scheduled, multi-channel notifications, exactly one business delivery per intent."""

__version__ = "0.1.0"
__all__ = ["__version__"]
