"""Rollout: a campaign declared ``start_paused`` starts with its admission paused.

The runbook's "start with admission disabled": the first time a process sees such a
campaign, its admission switch is created paused (one insert-if-absent, so two
processes starting together create it once, and a switch an operator has resumed is
never paused again). An operator resumes it once the checks pass: ``tidings plan``
for the drain time against the freshness deadline, a duplicate published on purpose
seen delivered once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from tidings.admission.campaign import Campaign
from tidings.core.model import Event
from tidings.stores.base import Ledger, Occurrences, Switch

log = logging.getLogger("tidings.rollout")

#: The reason a declared-paused switch carries.
REASON = "declared start_paused: resume once the rollout checks pass"


class RolloutStore(Occurrences, Ledger, Protocol):
    """The switches a rollout declares, and the ledger for their audit events."""


async def declare_paused(store: RolloutStore, campaigns: Iterable[Campaign], *,
                         now: float) -> list[Switch]:
    """Create the paused switch of each ``start_paused`` campaign that has none yet;
    return the switches created now (each with an audit event)."""
    made: list[Switch] = []
    for campaign in campaigns:
        if not campaign.start_paused:
            continue
        switch = await store.switch_declare(scope="campaign", name=campaign.name, paused=True,
                                            now=now, reason=REASON)
        if switch is None:
            continue
        made.append(switch)
        await store.event_append_many([Event(
            key=f"admission/campaign/{campaign.name}", channel="-", type="start_paused",
            at=now, state="paused", worker="rollout", detail=REASON)])
        log.info("admission starts paused", extra={"campaign": campaign.name,
                                                   "reason": REASON})
    return made
