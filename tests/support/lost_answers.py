"""A provider whose every answer is lost: what the uncertain-send tests send through."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tidings.core.model import SendRequest
from tidings.core.outcomes import Lookup, Uncertain


@dataclass
class LostAnswers:
    """A provider whose every answer is lost; it counts the requests it received.

    ``answers`` are what its lookup says per key (``raises`` makes the lookup fail,
    ``hangs`` makes it never answer)."""

    supports_lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None
    lookup_settle_s: float = 0.0
    raises: bool = False
    hangs: bool = False
    answers: dict[str, Lookup] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    name: str = "lost-answers"

    async def send(self, request: SendRequest) -> Uncertain:
        self.sent.append(request.key)
        return Uncertain(reason="no answer: timed out")

    async def lookup(self, key: str) -> Lookup:
        self.asked.append(key)
        if self.raises:
            raise ConnectionError("provider read API unreachable")
        if self.hangs:
            await asyncio.get_running_loop().create_future()  # never done
        return self.answers.get(key, Lookup.of_not_found())

    async def close(self) -> None:
        return None
