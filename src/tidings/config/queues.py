"""Settings of the publish route's named queues (``[api.queues.<name>]``): where a queue's
messages go, and whether a channel queue collects them into digests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tidings.core.digest import MAX_DIGEST_KEY, Digest, intent_key_room
from tidings.core.durations import Seconds
from tidings.core.errors import ConfigurationError, InvalidInput

#: The longest ``customer_id`` a publish takes: the most ``{customer_id}`` puts in a key.
LONGEST_CUSTOMER_ID = 200


class _QueueModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class QueueDigestSettings(_QueueModel):
    """A channel queue's messages collected into digests (``docs/digests.md``): each
    message is an item of the window of ``key``, not an intent of its own."""

    key: str = Field(default="{queue}:{customer_id}", min_length=1, max_length=200)
    """The digest key, from ``{queue}``, ``{customer_id}`` and ``{channel}``: one
    window at a time per key (default: per queue and customer). No whitespace; made
    from a customer_id of 200 characters, at most 400 characters (less with a long
    channel name: a window's intent keys add about 45 and ``:<channel>``)."""
    window_s: Seconds
    """How long a window stays open after its first item (after its latest with
    ``sliding``); at most a year."""
    max_items: int = Field(default=100, ge=1, le=1000)
    """A window closes at once when it holds this many items."""
    sliding: bool = False
    """Close ``window_s`` after the latest item (a quiet spell), within ``max_wait_s``."""
    max_wait_s: Seconds | None = None
    """A sliding window's longest wait after its first item (default: four windows)."""

    @field_validator("key")
    @classmethod
    def _known_fields(cls, value: str) -> str:
        import string

        try:
            names = {name for _, name, _, _ in string.Formatter().parse(value) if name}
        except ValueError as exc:
            raise ValueError(f"is not a key template: {exc}") from None
        unknown = sorted(names - {"queue", "customer_id", "channel"})
        if unknown:
            raise ValueError(f"names {', '.join(unknown)}; a digest key may use {{queue}}, "
                             "{customer_id} and {channel}")
        return value

    @model_validator(mode="after")
    def _wait(self) -> QueueDigestSettings:
        if self.max_wait_s is not None and not self.sliding:
            raise ValueError("max_wait_s bounds a sliding window only (sliding = true)")
        if self.max_wait_s is not None and self.max_wait_s < self.window_s:
            raise ValueError("max_wait_s must be at least window_s")
        return self


class QueueSettings(_QueueModel):
    """Where ``POST /v1/queue/publish`` puts a named queue's messages: a campaign's
    channels (recipient addresses from the payload, else its audience) or one channel
    (addresses from the payload), where ``digest`` may collect them into digests."""

    campaign: str | None = None
    channel: str | None = None
    digest: QueueDigestSettings | None = None
    """Channel queues only: each message becomes an item of a digest window."""
    lane: str | None = None
    """The lane of the channels' queues its intents go to (``channels.<name>.lanes``);
    default: ``transactional``, or each channel's first lane. A digest queue's digests
    go to the bulk lane when they close."""
    group: str | None = None
    """The group its intents belong to on channels with ``fair_share`` (a tenant)."""

    @model_validator(mode="after")
    def _one_target(self) -> QueueSettings:
        if (self.campaign is None) == (self.channel is None):
            raise ValueError("name exactly one of 'campaign' or 'channel'")
        if self.digest is not None and self.lane is not None:
            raise ValueError("a digest queue's digests go to the bulk lane when they "
                             "close; leave out 'lane'")
        if self.digest is not None and self.campaign is not None:
            # A campaign's publish writes the keys its scheduler writes, so the two never
            # send one day twice; an item in a digest would be sent beside that intent.
            raise ValueError("digest applies to channel queues only; a campaign queue "
                             "writes the campaign's own keys")
        return self


def check_queue_digest(name: str, queue: QueueSettings) -> None:
    """A digest queue's settings under the rules ``notify(digest=)`` applies to a
    ``Digest`` (``tidings.core.digest.check_digest``), its key made with the longest
    ``customer_id``: what would refuse every publish to the queue is refused at load,
    as a ``ConfigurationError`` naming ``api.queues.<name>.digest.<field>``."""
    spec, channel = queue.digest, queue.channel
    if spec is None or channel is None:
        return
    key = spec.key.format(queue=name, customer_id="c" * LONGEST_CUSTOMER_ID, channel=channel)
    # A digest key's limit, or less where the window's intent keys on this channel
    # would outgrow theirs.
    limit = min(MAX_DIGEST_KEY, intent_key_room(channel))
    try:
        if len(key) > limit:
            raise InvalidInput("digest.key", f"makes keys of up to {len(key)} characters "
                                             f"(with a customer_id of {LONGEST_CUSTOMER_ID}); "
                                             f"the limit is {limit}")
        Digest(key=key, window_s=spec.window_s, max_items=spec.max_items,
               sliding=spec.sliding, max_wait_s=spec.max_wait_s)
    except InvalidInput as exc:
        raise ConfigurationError(f"api.queues.{name}.{exc.field}", exc.message) from None


__all__ = ["LONGEST_CUSTOMER_ID", "QueueDigestSettings", "QueueSettings", "check_queue_digest"]
