"""``settings.TIDINGS`` as tidings' ``Settings``: a path to a ``tidings.toml``, or a dict of
the same shape, whose ``config`` key (a path) is read first and the rest laid over it.

Errors name the setting: ``TIDINGS.channels.email.provider.kind: …``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError

#: The key of an inline ``TIDINGS`` dict that names a settings file to start from.
CONFIG_KEY = "config"


def tidings_settings() -> Settings:
    """tidings' settings from Django's ``settings.TIDINGS`` (see the module)."""
    from django.conf import settings

    if not hasattr(settings, "TIDINGS"):
        raise ConfigurationError("TIDINGS", "is not in Django's settings: set it to the path "
                                            "of a tidings.toml, or to a dict of its shape")
    return settings_from(settings.TIDINGS)


def settings_from(value: object) -> Settings:
    """``Settings`` from what ``TIDINGS`` holds: a path, or a mapping (see the module)."""
    try:
        if isinstance(value, str | Path):
            return Settings.load(value)
        if not isinstance(value, Mapping):
            raise ConfigurationError("", "must be the path of a tidings.toml or a dict of its "
                                         f"shape, not {type(value).__name__}")
        inline: dict[str, Any] = dict(value)
        path = inline.pop(CONFIG_KEY, None)
        if path is None:
            return Settings.parse(inline)
        if not isinstance(path, str | Path):
            raise ConfigurationError(CONFIG_KEY, "must be the path of a tidings.toml, not "
                                                 f"{type(path).__name__}")
        return Settings.parse({**Settings.load(path).model_dump(), **inline})
    except ConfigurationError as exc:
        field = f"TIDINGS.{exc.field}" if exc.field else "TIDINGS"
        raise ConfigurationError(field, exc.message) from None
