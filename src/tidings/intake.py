"""One-off intents: ``notify`` and ``cancel``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tidings.errors import InvalidInput
from tidings.model import IntentDraft, Recipient, encode_data, notify_key, validate_key
from tidings.relay import publish
from tidings.states import State
from tidings.stores.base import Store
from tidings.transports.base import Transport


def recipient_of(value: Recipient | Mapping[str, Any]) -> Recipient:
    """Accept a Recipient or a mapping with ``id`` and ``email``/``phone``."""
    if isinstance(value, Recipient):
        return value
    if not isinstance(value, Mapping):
        raise InvalidInput("recipient", "must be a Recipient or a mapping with an 'id'")
    rid = value.get("id")
    if not isinstance(rid, str | int) or str(rid) == "":
        raise InvalidInput("recipient.id", "is missing")
    extra = {k: v for k, v in value.items() if k not in {"id", "email", "phone", "active"}}
    return Recipient(id=str(rid), email=value.get("email"), phone=value.get("phone"),
                     data=extra)


async def notify(
    store: Store,
    transport: Transport,
    *,
    known_channels: Collection[str],
    key: str,
    recipient: Recipient | Mapping[str, Any],
    channels: Sequence[str],
    template: str,
    data: Mapping[str, Any] | None,
    now: float,
    due_at: float | None = None,
    expires_at: float | None = None,
    horizon_s: float = 60.0,
    lease_s: float = 30.0,
) -> list[str]:
    """Create one intent per channel (``KEY:CHANNEL``); a repeated call is a no-op.

    Intents due within ``horizon_s`` are published now; later ones stay in the store
    until the relay's window reaches them.
    """
    validate_key(key)
    who = recipient_of(recipient)
    if not channels:
        raise InvalidInput("channels", "must name at least one channel")
    for index, channel in enumerate(channels):
        if channel not in known_channels:
            raise InvalidInput(f"channels[{index}]", f"unknown channel {channel!r}; declared: "
                               f"{', '.join(sorted(known_channels)) or 'none'}")
    if not template:
        raise InvalidInput("template", "must not be empty")
    due = now if due_at is None else float(due_at)
    if expires_at is not None and expires_at <= due:
        raise InvalidInput("expires_at", "must be after due_at")
    body = encode_data(dict(data or {}))
    drafts = []
    for channel in channels:
        address = who.address(channel)
        if not address:
            field = "recipient.phone" if channel == "sms" else "recipient.email"
            raise InvalidInput(field, f"is missing; channel {channel!r} needs it")
        drafts.append(IntentDraft(
            key=validate_key(notify_key(key, channel)), channel=channel, recipient_id=who.id,
            address=address, template=template, data=body, due_at=due, expires_at=expires_at))
    soon = due <= now + horizon_s
    new = await store.intent_admit(drafts, now=now,
                                   publish_lease_until=now + lease_s if soon else None)
    if new and soon:
        fresh = set(new)
        await publish(transport, ((d.key, d.channel, d.due_at) for d in drafts if d.key in fresh),
                      now=now)
        await store.intent_mark_enqueued(new, now=now)
    return [d.key for d in drafts]


async def cancel(store: Store, key: str, *, channels: Collection[str], now: float,
                 reason: str = "cancelled by caller") -> dict[str, State | None]:
    """Cancel an intent by its full key, or every channel of a ``notify`` key."""
    validate_key(key)
    state = await store.intent_request_cancel(key, now=now, reason=reason)
    if state is not None:
        return {key: state}
    found: dict[str, State | None] = {}
    for channel in sorted(channels):
        full = notify_key(key, channel)
        result = await store.intent_request_cancel(full, now=now, reason=reason)
        if result is not None:
            found[full] = result
    if not found:
        raise InvalidInput("key", f"no intent has key {key!r}")
    return found
