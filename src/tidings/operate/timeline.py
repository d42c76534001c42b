"""Timelines: deliveries with their answers and events, by key or by recipient."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tidings.core.errors import InvalidInput
from tidings.core.keys import check_text, validate_key
from tidings.core.model import Intent
from tidings.core.surrogate import surrogate
from tidings.operate import readmodel
from tidings.operate.readmodel import Answers, Delivery, IntentView
from tidings.stores.base import Store

#: ``r_`` + 16 hex digits: what ``tidings.core.surrogate.surrogate`` hands out.
SURROGATE = re.compile(r"^r_[0-9a-f]{16}$")


def answers(intent: Intent) -> Answers:
    """The three questions about one delivery, and where it stands."""
    return Answers(
        selected=intent.selected_at is not None, selected_at=intent.selected_at,
        enqueued=intent.enqueued_at is not None, enqueued_at=intent.enqueued_at,
        accepted=intent.accepted_at is not None, accepted_at=intent.accepted_at,
        state=intent.state, disposition=intent.disposition,
        reason=intent.reason, attempts=intent.attempts,
    )


def intent_view(intent: Intent) -> IntentView:
    """An intent for an operator: never the raw address; the recipient's surrogate."""
    return readmodel.intent_view(intent, surrogate(intent.recipient_id))


async def timeline(store: Store, *, key: str | None = None, recipient: str | None = None,
                   channels: Sequence[str] = (), limit: int = 50) -> list[Delivery]:
    """Deliveries with their answers and events, by key or by recipient.

    ``key`` is a full intent key, or a ``notify`` key (every channel of it). ``recipient``
    is a recipient id, or a surrogate (``r_`` + 16 hex, as in the logs): surrogates are
    found through the send outcomes that carry them, so an intent never sent yet is
    found by recipient id only.
    """
    if (key is None) == (recipient is None):
        raise InvalidInput("key", "give exactly one of key or recipient")
    intents: list[Intent] = []
    if key is not None:
        # What no key holds is no key's timeline (and PostgreSQL refuses a NUL outright).
        validate_key(key)
        found = await store.intent_get(key)
        if found is not None:
            intents.append(found)
        else:
            for channel in sorted(channels):
                one = await store.intent_get(f"{key}:{channel}")
                if one is not None:
                    intents.append(one)
    else:
        assert recipient is not None
        check_text(recipient, "recipient")
        if SURROGATE.match(recipient):
            for k in await store.event_keys_by_detail(recipient, limit=limit):
                one = await store.intent_get(k)
                if one is not None:
                    intents.append(one)
        else:
            intents = await store.intent_find_by_recipient(recipient, limit=limit)
    return [Delivery(key=i.key, answers=answers(i), intent=intent_view(i),
                     events=tuple(await store.events_for(i.key)))
            for i in intents]
