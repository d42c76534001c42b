"""Dead letters: a channel's list, each with its intent's state, and their redrive."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.core.errors import InvalidInput
from tidings.core.model import DeadLetter, Message
from tidings.core.states import State
from tidings.operate.readmodel import DeadLetterRow
from tidings.stores.base import Change, Store
from tidings.transports.base import Transport


def _key_of(letter: DeadLetter) -> str | None:
    try:
        return Message.decode(letter.body).key
    except Exception:
        return None


async def dead_letters(store: Store, transport: Transport, channel: str, *,
                       limit: int = 100) -> list[DeadLetterRow]:
    """A channel's dead letters, oldest first, each with its intent's current state."""
    rows = []
    for letter in await transport.dead_letters(channel, limit=limit):
        key = _key_of(letter)
        intent = await store.intent_get(key) if key is not None else None
        rows.append(DeadLetterRow(
            id=letter.id, channel=channel, message_id=letter.message_id, key=key,
            reason=letter.reason, receive_count=letter.receive_count, dead_at=letter.dead_at,
            intent_state=None if intent is None else intent.state.value))
    return rows


@dataclass(frozen=True, kw_only=True)
class RedriveResult:
    """What a redrive did with each dead letter it looked at."""

    channel: str
    redriven: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)


async def redrive(store: Store, transport: Transport, channel: str, *, now: float,
                  ids: Sequence[str] | None = None, limit: int = 100,
                  reason: str = "operator redrive") -> RedriveResult:
    """Put dead letters back on their queue (all of the oldest ``limit``, or ``ids``).

    A dead intent is reopened first (dead -> retryable, failures reset), then its
    message goes back: the worker claims it against the ledger before any send, so a
    message whose intent was accepted meanwhile is acked as a duplicate with no send.
    Letters that are not tidings messages, or whose intent does not exist, stay dead.
    """
    letters = await transport.dead_letters(channel, limit=limit if ids is None else 10_000)
    if ids is not None:
        wanted = set(ids)
        unknown = sorted(wanted - {letter.id for letter in letters})
        if unknown:
            raise InvalidInput("ids", f"no dead letter of channel {channel!r} has id "
                               f"{', '.join(unknown)}")
        letters = [letter for letter in letters if letter.id in wanted]
    result = RedriveResult(channel=channel)
    reopen: list[Change] = []
    chosen: list[tuple[DeadLetter, str, str]] = []
    for letter in letters:
        key = _key_of(letter)
        intent = await store.intent_get(key) if key is not None else None
        if key is None or intent is None:
            why = "not a tidings message" if key is None else "no intent has this key"
            result.kept.append({"id": letter.id, "key": key, "why": why})
            continue
        if intent.state is State.DEAD:
            reopen.append(Change(key=key, from_state=State.DEAD, to_state=State.RETRYABLE,
                                 event="redriven", reason=reason, next_attempt_at=now,
                                 reset_failures=True, message_id=letter.message_id))
        chosen.append((letter, key, intent.state.value))
    reopened = set(await store.intent_apply_many(reopen, now=now)) if reopen else set()
    moved = await transport.redrive(channel, [letter.id for letter, _, _ in chosen], now=now)
    if moved != len(chosen):
        # Another operator redrove some of them at the same moment: report what we chose.
        result.kept.append({"id": None, "key": None,
                            "why": f"{len(chosen) - moved} were redriven by someone else"})
    for letter, key, state in chosen:
        result.redriven.append({"id": letter.id, "key": key, "state_before": state,
                                "reopened": key in reopened})
    return result
