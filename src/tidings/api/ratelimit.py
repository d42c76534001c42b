"""The publish intake limit: a token bucket shared by every API process through the
store (``Store.pacer_transact`` under its own name), so N processes together admit
the configured rate, not N times it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidings.delivery.pacing import PacerBackend

#: The bucket's row among the pacer states; no channel can have this name.
BUCKET = "api:publish"


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """``rate_per_s`` tokens per second, holding at most ``burst``."""

    rate_per_s: float
    burst: float

    def take(self, state: dict[str, Any] | None, now: float) -> tuple[dict[str, Any], float]:
        """Take one token. Returns the new state and 0.0, or the old state and the
        seconds until a token will be there. Pure."""
        tokens = self.burst if state is None else float(state.get("tokens", self.burst))
        at = now if state is None else float(state.get("at", now))
        tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate_per_s)
        if tokens >= 1.0:
            return {"tokens": tokens - 1.0, "at": now}, 0.0
        return {"tokens": tokens, "at": now}, (1.0 - tokens) / self.rate_per_s


async def take(store: PacerBackend, bucket: Bucket, now: float) -> float:
    """Take a token from the shared bucket; 0.0 if admitted, else seconds to wait."""
    return await store.pacer_transact(BUCKET, lambda state: bucket.take(state, now))
