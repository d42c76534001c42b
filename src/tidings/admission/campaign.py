"""Campaign and channel declarations."""

from __future__ import annotations

from dataclasses import dataclass

from tidings.admission.audience import Audience
from tidings.core.cron import Schedule
from tidings.core.errors import ConfigurationError


@dataclass(frozen=True, kw_only=True)
class Campaign:
    """A recurring delivery: a cron schedule, an audience and the channels to use.

    ``grace_s`` bounds how late an occurrence may still be admitted automatically;
    older ones need an explicit replay. ``expires_after_s`` is each intent's
    freshness deadline, counted from the occurrence's logical time.
    """

    name: str
    schedule: Schedule
    channels: tuple[str, ...]
    template: str
    version: int
    audience: Audience
    expires_after_s: float | None = 24 * 3600.0
    grace_s: float = 3600.0
    start_paused: bool = False
    """Its admission switch starts paused (``tidings.admission.rollout``)."""
    lane: str | None = None
    """The lane of its channels' queues its intents go to (``tidings.core.lanes``);
    default: ``bulk``, or each channel's last lane."""
    group: str | None = None
    """The group its intents belong to on channels that share their lanes among groups
    (``tidings.core.fair``): a tenant."""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or " " in self.name:
            raise ConfigurationError("campaign.name", f"{self.name!r} must be non-empty, "
                                     "without '/' or spaces")
        if not self.channels:
            raise ConfigurationError(f"campaigns.{self.name}.channels", "must not be empty")
        if self.version < 1:
            raise ConfigurationError(f"campaigns.{self.name}.version", "must be at least 1")
