"""Settings of a channel's batch sends (``channels.<name>.batch``, docs/batching.md):
many messages per provider request, where the provider has a batch endpoint."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidings.core.durations import SecondsOrZero


class BatchSettings(BaseModel):
    """Many messages per provider request, where the provider has a batch endpoint
    (``tidings.delivery.batching``, docs/batching.md). Each message keeps its own pacer
    slot, outcome and receipt; pacing counts messages."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    max_messages: int = Field(default=100, ge=2, le=10_000)
    """The most messages in one request (capped by the provider's own limit: Postmark
    takes 500). The channel's ``max_in_flight`` bounds it too: a batch takes a slot per
    message."""
    linger_s: SecondsOrZero = Field(default=0.02, le=5.0)
    """The longest a lone message waits for others to share its request."""
