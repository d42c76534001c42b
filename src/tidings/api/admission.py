"""Admission driven over HTTP: a cron trigger runs one bounded pass and answers; the
rest of a large occurrence is admitted in the background by the API process.

An external cron calls once per occurrence and never again for it, so an occurrence
left half-admitted must not wait for the next trigger (which names another date). The
runner keeps passing until the occurrence is done, and on start-up resumes any
occurrence still admitting; the high-water mark makes every pass resume exactly where
the last committed page ended, in this process or another.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tidings.admission.campaign import Campaign
from tidings.admission.scheduler import PassResult, Scheduler, occurrence_id
from tidings.api.errors import ApiError
from tidings.core.cron import OccurrenceTime
from tidings.core.errors import InvalidInput, unknown_name
from tidings.runtime import Runtime
from tidings.stores.base import ApiRecords

log = logging.getLogger("tidings.api.admission")


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


@dataclass(frozen=True, kw_only=True)
class Due:
    """The occurrence a trigger at ``now`` stands for, and the time its pass runs at."""

    occurrence: OccurrenceTime
    pass_at: float


def due_occurrence(campaign: Campaign, now: float, early_s: float) -> Due | None:
    """The occurrence due at ``now``, or the next one if it fires within ``early_s``.

    A cron that jitters fires a few seconds early as often as late; early, it means the
    imminent occurrence, and that occurrence's pass runs at its logical time.
    """
    upcoming = campaign.schedule.next_after(now)
    if upcoming.logical_at - now <= early_s:
        return Due(occurrence=upcoming, pass_at=upcoming.logical_at)
    latest = campaign.schedule.latest(now)
    return None if latest is None else Due(occurrence=latest, pass_at=now)


@dataclass(kw_only=True)
class AdmissionRunner:
    """Runs trigger passes and background continuations for one runtime."""

    runtime: Runtime
    early_s: float = 60.0
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def campaign(self, name: str, field: str = "path.campaign") -> Campaign:
        """The declared campaign ``name``; a 404 naming ``field`` otherwise."""
        for campaign in self.runtime.campaigns:
            if campaign.name == name:
                return campaign
        raise ApiError(404, field, unknown_name(
            "campaign", name, sorted(c.name for c in self.runtime.campaigns)))

    def _scheduler(self, campaign: Campaign) -> Scheduler:
        base = self.runtime.scheduler()
        return Scheduler(store=self.runtime.store, transport=self.runtime.transport,
                         campaigns=[campaign], config=base.config, kinds=base.kinds,
                         lanes=base.lanes)

    async def trigger(self, name: str, *, logical_date: str | None = None) -> dict[str, Any]:
        """One bounded pass for the occurrence of ``name`` due now; counts and ``more``."""
        campaign = self.campaign(name)
        now = self.runtime.clock.now()
        due = due_occurrence(campaign, now, self.early_s)
        if due is None:
            nxt = campaign.schedule.next_after(now)
            raise ApiError(409, "path.campaign", f"campaign {name!r} has no occurrence due "
                           f"yet; the first is {nxt.logical_date} at {_iso(nxt.logical_at)}")
        date = due.occurrence.logical_date
        if logical_date is not None and logical_date != date:
            raise ApiError(409, "body.logical_date",
                           f"{logical_date} is not the occurrence due now ({date}); "
                           "use replay to admit another date")
        result = await self._scheduler(campaign).run_pass(now=due.pass_at)
        occ_id = occurrence_id(name, date)
        occ = await self.runtime.store.occurrence_get(occ_id)
        records: ApiRecords = self.runtime.store
        count = await records.api_trigger_record(name, date, now=now)
        more = result.more
        if more:
            self.continue_later(campaign, date)
        return {
            "campaign": name, "logical_date": date,
            "logical_at": due.occurrence.logical_at,
            "triggers": count, "repeat": count > 1,
            "pass": _pass(result),
            "more": more, "continuing": more and occ_id in self._tasks,
            "paused": bool(result.paused), "missed": occ_id in result.missed,
            "occurrence": None if occ is None else {
                "status": occ.status, "kind": occ.kind, "members": occ.members,
                "admitted": occ.admitted, "skipped": occ.skipped, "passes": occ.passes,
                "reason": occ.reason},
        }

    async def replay(self, name: str, logical_date: str, *, expires_in_s: float | None = None,
                     new_version: bool = False) -> dict[str, Any]:
        """One bounded replay pass of a past date; the rest continues in the background.

        ``expires_in_s`` gives the replayed intents a new freshness deadline (needed when
        the date's own has passed); ``new_version`` allows a date admitted under an
        earlier campaign version (a second delivery to each recipient).
        """
        campaign = self.campaign(name)
        now = self.runtime.clock.now()
        expires_at = None if expires_in_s is None else now + expires_in_s
        try:
            result = await self._scheduler(campaign).replay(
                name, logical_date, now=now, until_done=False, expires_at=expires_at,
                new_version=new_version)
        except InvalidInput as exc:
            where = {"expires_in": "query.expires_in_s",
                     "version": "query.new_version"}.get(exc.field, f"path.{exc.field}")
            raise ApiError(422, where, exc.message) from None
        occ = await self.runtime.store.occurrence_get(occurrence_id(name, logical_date))
        date = occ.logical_date if occ is not None else logical_date
        if result.more:
            self.continue_later(campaign, date, expires_at=expires_at, new_version=new_version)
        return {"campaign": name, "logical_date": date, "pass": _pass(result),
                "more": result.more, "paused": bool(result.paused),
                "occurrence": None if occ is None else {
                    "status": occ.status, "kind": occ.kind, "members": occ.members,
                    "admitted": occ.admitted, "skipped": occ.skipped}}

    # ---------------------------------------------------------------- continuations

    def continue_later(self, campaign: Campaign, logical_date: str, *,
                       expires_at: float | None = None, new_version: bool = False) -> None:
        """Keep admitting an occurrence in the background (once per occurrence); a replay
        goes on under the deadline and version decision it started with."""
        occ_id = occurrence_id(campaign.name, logical_date)
        running = self._tasks.get(occ_id)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._continue(campaign, logical_date,
                                                  expires_at=expires_at,
                                                  new_version=new_version),
                                   name=f"tidings-admit:{occ_id}")
        self._tasks[occ_id] = task
        task.add_done_callback(functools.partial(self._done, occ_id))

    def _done(self, occ_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(occ_id) is task:
            del self._tasks[occ_id]

    async def _continue(self, campaign: Campaign, logical_date: str, *,
                        expires_at: float | None, new_version: bool) -> None:
        occ_id = occurrence_id(campaign.name, logical_date)
        scheduler = self._scheduler(campaign)
        store, clock = self.runtime.store, self.runtime.clock
        try:
            while True:
                occ = await store.occurrence_get(occ_id)
                if occ is None or occ.status != "admitting":
                    return
                now = max(clock.now(), occ.logical_at)
                latest = campaign.schedule.latest(now)
                if latest is not None and latest.logical_date == logical_date:
                    result: PassResult = await scheduler.run_pass(now=now)
                else:
                    # A newer occurrence is due meanwhile: finish this one as a replay.
                    result = await scheduler.replay(campaign.name, logical_date, now=now,
                                                    until_done=False, expires_at=expires_at,
                                                    new_version=new_version)
                if not result.more:
                    return
                await asyncio.sleep(0)  # let requests in between pages
        except asyncio.CancelledError:
            raise
        except Exception:
            # The high-water mark is durable: the next trigger, a scheduler or a restart
            # of this API resumes where this stopped.
            log.exception("background admission of %s failed", occ_id)

    async def resume_unfinished(self) -> list[str]:
        """Continue every started occurrence still admitting (at start-up)."""
        resumed = []
        by_name = {c.name: c for c in self.runtime.campaigns}
        for occ in await self.runtime.store.occurrence_list():
            campaign = by_name.get(occ.campaign)
            if campaign is not None and occ.status == "admitting" and occ.members > 0:
                self.continue_later(campaign, occ.logical_date)
                resumed.append(occ.id)
        return resumed

    async def wait_idle(self) -> None:
        """Wait for every background continuation to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop background continuations (their committed pages stay admitted)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


def _pass(result: PassResult) -> dict[str, int]:
    return {"members": result.members, "admitted": result.admitted,
            "skipped": result.skipped, "published": result.published,
            "sendable": result.sendable}
