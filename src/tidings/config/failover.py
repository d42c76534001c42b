"""Settings of a channel's failover (``channels.<name>.fallbacks`` and ``.failover``):
the providers tried after the first, and when one is taken out (docs/failover.md)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tidings.core.durations import Seconds
from tidings.core.errors import ConfigurationError
from tidings.core.failover import CircuitRule, route_names
from tidings.core.pacing import parse_quota


class FailoverSettings(BaseModel):
    """When a provider is out (``tidings.core.failover``): each provider of a channel
    with ``fallbacks`` has a circuit per worker process."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    failures_to_open: int = Field(default=3, ge=1, le=1000)
    """Sends a provider proves it did not accept, within ``window_s``, that take it out."""
    window_s: Seconds = 10.0
    """The window in which ``failures_to_open`` proofs are counted."""
    open_s: Seconds = Field(default=15.0, le=3600.0)
    """How long a provider taken out is tried for nothing; then one send at a time
    probes it, and the first it accepts brings the traffic back."""

    on_pause_over_s: Seconds | None = None
    """Move a send on when its provider answers 429 asking for a longer pause than this
    (the provider is then out until the pause ends); default never: the pause is the
    provider's word, and the channel waits."""
    quotas: dict[str, str] = Field(default_factory=dict)
    """A provider's own quota, by its name (its kind, numbered where a kind repeats:
    ``{ sendgrid = "50/s" }``), pacing the sends it carries besides the channel's
    ``quota``, across every worker: a fallback with a smaller quota than the first."""

    @field_validator("quotas")
    @classmethod
    def _quotas(cls, value: dict[str, str]) -> dict[str, str]:
        for name, quota in value.items():
            try:
                parse_quota(quota)
            except ConfigurationError as exc:
                raise ValueError(f"{name}: {exc.message}") from None
        return value

    def rule(self) -> CircuitRule:
        return CircuitRule(failures_to_open=self.failures_to_open, window_s=self.window_s,
                           open_s=self.open_s, on_pause_over_s=self.on_pause_over_s)


def check_fallbacks(channel: str, kinds: Sequence[str], failover: FailoverSettings, *,
                    batch: bool, uncertain: str | None) -> None:
    """What a channel with fallbacks (``kinds``: its providers' kinds, first to last)
    may not combine with them, naming the field."""
    names = route_names(kinds)
    for name in failover.quotas:
        if name not in names:
            raise ConfigurationError(f"channels.{channel}.failover.quotas.{name}",
                                     f"no provider of the channel is named {name!r}; "
                                     f"its providers: {', '.join(names)}")
    if len(kinds) < 2:
        return
    field = f"channels.{channel}.fallbacks"
    if batch:
        raise ConfigurationError(field, "not with batch sends (channels.<name>.batch): "
                                        "each provider's batch endpoint differs; "
                                        "leave one of them out")
    if uncertain == "resend":
        raise ConfigurationError(field, "not with uncertain = \"resend\": a resend may "
                                        "reach a provider that never saw the key, and "
                                        "nothing deduplicates it; use lookup or hold")
