"""Settings: frozen, validated, loaded from a TOML file and the environment.

Every error names the field it is about (``channels.email.quota: ...``).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tidings.errors import ConfigurationError
from tidings.pacing.algorithm import parse_quota
from tidings.schedule import Schedule


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProviderSettings(_Model):
    """Which provider a channel sends through.

    ``sandbox`` talks HTTP to a sandbox server at ``url``; ``sandbox-twin`` is the
    in-process sandbox (one process only).
    """

    kind: Literal["sandbox", "sandbox-twin"] = "sandbox"
    url: str | None = None
    timeout_s: float = Field(default=5.0, gt=0)


class ChannelSettings(_Model):
    provider: ProviderSettings = ProviderSettings(kind="sandbox-twin")
    quota: str | None = None
    quota_safety: float = Field(default=0.95, gt=0, le=1)
    """Share of the quota the pacer aims at, leaving room for timing noise."""
    max_in_flight: int = Field(default=64, ge=1)
    min_interval_s: float = Field(default=0.0, ge=0)

    @field_validator("quota")
    @classmethod
    def _quota(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_quota(value)
            except ConfigurationError as exc:
                raise ValueError(exc.message) from None
        return value


class CampaignSettings(_Model):
    cron: str
    timezone: str = "UTC"
    channels: list[str]
    template: str
    version: int = Field(default=1, ge=1)
    expires_after_s: float | None = Field(default=24 * 3600.0, gt=0)
    grace_s: float = Field(default=3600.0, ge=0)
    audience: dict[str, Any]


class RetrySettings(_Model):
    max_failures: int = Field(default=5, ge=1)
    base_s: float = Field(default=1.0, gt=0)
    cap_s: float = Field(default=300.0, gt=0)
    rate_limit_floor_s: float = Field(default=0.25, gt=0)
    rate_limit_cap_s: float = Field(default=60.0, gt=0)


class WorkerSettings(_Model):
    batch_size: int = Field(default=200, ge=1, le=5000)
    lease_s: float = Field(default=30.0, gt=0)
    visibility_s: float = Field(default=60.0, gt=0)
    max_receives: int = Field(default=50, ge=1)
    reconcile_every_s: float = Field(default=5.0, gt=0)


class SchedulerSettings(_Model):
    page_size: int = Field(default=5000, ge=1, le=50_000)
    max_pages: int = Field(default=20, ge=1)
    interval_s: float = Field(default=1.0, gt=0)
    relay_horizon_s: float = Field(default=60.0, ge=0)
    relay_lease_s: float = Field(default=30.0, gt=0)


class ReconcilerSettings(_Model):
    lost_after_s: float = Field(default=60.0, gt=0)
    uncertain_after_s: float = Field(default=1.0, ge=0)


class Settings(_Model):
    """Everything the composition root needs to build a runtime."""

    store: str = "sqlite:///tidings.db"
    transport: Literal["sql"] = "sql"
    clock_offset_s: float = 0.0
    channels: dict[str, ChannelSettings] = Field(default_factory=dict)
    campaigns: dict[str, CampaignSettings] = Field(default_factory=dict)
    retry: RetrySettings = RetrySettings()
    worker: WorkerSettings = WorkerSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    reconciler: ReconcilerSettings = ReconcilerSettings()

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Settings:
        """Validate a mapping; the first error becomes a ConfigurationError naming its field."""
        try:
            settings = cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "settings"
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigurationError(field, message) from None
        for name, campaign in settings.campaigns.items():
            try:
                # Parsing the schedule here makes a bad cron or zone a settings error.
                Schedule(campaign.cron, campaign.timezone)
            except ConfigurationError as exc:
                raise ConfigurationError(f"campaigns.{name}.{exc.field}", exc.message) from None
            for index, channel in enumerate(campaign.channels):
                if channel not in settings.channels:
                    raise ConfigurationError(
                        f"campaigns.{name}.channels[{index}]",
                        f"unknown channel {channel!r}; declared: "
                        f"{', '.join(sorted(settings.channels)) or 'none'}")
        return settings

    @classmethod
    def load(cls, path: str | Path | None = None, *, env: dict[str, str] | None = None
             ) -> Settings:
        """Read ``path`` (TOML) if given, then apply ``TIDINGS_STORE`` from the environment."""
        data: dict[str, Any] = {}
        if path is not None:
            try:
                data = tomllib.loads(Path(path).read_text())
            except FileNotFoundError:
                raise ConfigurationError("config", f"{path} does not exist") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigurationError("config", f"{path} is not valid TOML: {exc}") from None
        environ = os.environ if env is None else env
        if environ.get("TIDINGS_STORE"):
            data["store"] = environ["TIDINGS_STORE"]
        return cls.parse(data)
