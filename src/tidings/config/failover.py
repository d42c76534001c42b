"""Settings of a channel's failover (``channels.<name>.fallbacks`` and ``.failover``):
the providers tried after the first, and when one is taken out (docs/failover.md)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from tidings.core.durations import Seconds
from tidings.core.errors import ConfigurationError
from tidings.core.failover import CircuitRule


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

    def rule(self) -> CircuitRule:
        return CircuitRule(failures_to_open=self.failures_to_open, window_s=self.window_s,
                           open_s=self.open_s)


def check_fallbacks(channel: str, fallbacks: Sequence[object], *, batch: bool,
                    uncertain: str | None) -> None:
    """What a channel with fallbacks may not combine with them, naming the field."""
    if not fallbacks:
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
