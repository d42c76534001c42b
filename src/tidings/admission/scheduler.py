"""Admission: turn due campaign occurrences into intents and messages, in bounded passes.

A pass handles at most ``max_pages`` audience pages per campaign and returns; the
occurrence's high-water mark (the last recipient id admitted) moves in the same
transaction as the page's intents, so the next pass — in this process or another,
after a crash or not — resumes exactly where the last committed page ended. A member
whose address on a channel is on the suppression list gets no intent there: one read
per page finds them, and the occurrence counts them (``suppressed``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Protocol

from tidings.admission.campaign import Campaign
from tidings.admission.relay import RelayConfig, relay_pass
from tidings.core.addresses import normalize_address
from tidings.core.clock import Clock
from tidings.core.cron import OccurrenceTime, check_instant
from tidings.core.errors import InvalidInput, unknown_name
from tidings.core.keys import campaign_key, campaign_key_parts, check_recipient_ids, template_ref
from tidings.core.lanes import DEFAULT_LANES, NO_LANES, ChannelLanes, lane_number
from tidings.core.logs import log_time
from tidings.core.model import DraftPage, Event, Recipient, address_kind, encode_data
from tidings.core.retention import pruned_before
from tidings.stores.base import (
    Ledger,
    Occurrence,
    OccurrenceProgress,
    Occurrences,
    Suppressions,
    Switch,
)
from tidings.transports.base import Transport

log = logging.getLogger("tidings.scheduler")


class AdmissionStore(Ledger, Occurrences, Suppressions, Protocol):
    """What admission reaches: the ledger (intents, the relay), the occurrences and
    switches it moves and obeys, and the suppression list it leaves out."""


@dataclass(frozen=True, kw_only=True)
class AdmissionShape:
    """How a scheduler pages an audience: members per page, pages per pass (a pass
    then returns), pages written side by side."""

    page_size: int
    max_pages: int
    pages_in_flight: int


def admission_shape(concurrent_writers: bool) -> AdmissionShape:
    """The default shape for a store. SQLite has one writer: big pages, one at a time.
    A server store (PostgreSQL) writes three pages at once while the next is drafted,
    in pages whose WAL fits the default wal_buffers; a pass covers 100,000 members on
    either (bench/admission.py measures the choice)."""
    if concurrent_writers:
        return AdmissionShape(page_size=2500, max_pages=40, pages_in_flight=3)
    return AdmissionShape(page_size=5000, max_pages=20, pages_in_flight=1)


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    """``enqueue_in_store``: the transport is the store's own queue table, so a page's
    intents and messages are written in one transaction (see ``Store.intent_admit``);
    else intents are written ``selected`` and the relay publishes them.
    ``relay_in_pass``: a pass ends with a relay pass (off where ``relay.relay_loop``
    runs beside admission, as the scheduler service does with a broker)."""

    page_size: int = 5000
    max_pages: int = 20
    pages_in_flight: int = 1
    enqueue_in_store: bool = False
    relay_in_pass: bool = True
    relay: RelayConfig = field(default_factory=RelayConfig)


@dataclass(kw_only=True)
class PassResult:
    """What one admission pass did; ``more`` means a campaign still has pages left."""

    occurrences: list[str] = field(default_factory=list)
    members: int = 0
    admitted: int = 0
    skipped: int = 0
    suppressed: int = 0
    """Member-channel pairs left out because the address is on the suppression list."""
    published: int = 0
    more: bool = False
    paused: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    sendable: int = 0
    """Intents admitted by this pass that are not past their freshness deadline."""


#: The most occurrences one replay (a backfill ``--to`` a later date) admits.
MAX_REPLAY_OCCURRENCES = 400
#: The longest new freshness deadline a replay takes (CLI and API alike): a replay
#: sendable for years is a typo, not a plan.
MAX_REPLAY_LIFETIME_S = 366 * 86400.0


@dataclass(frozen=True, kw_only=True)
class ReplayPlan:
    """What a replay of one occurrence would do, said before it is done."""

    campaign: str
    logical_date: str
    logical_at: float
    deadline: float | None
    """The campaign's own freshness deadline for that date (None: it has none)."""
    expires_at: float | None
    """The deadline the replayed intents carry (a new one given, else ``deadline``)."""
    earlier_version: int | None
    """The version the date was admitted under, when it is not the campaign's current one."""

    def sendable(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


class _Deadline:
    """The campaign's own freshness deadline (``_admit``'s default)."""


_CAMPAIGNS = _Deadline()


def _iso(at: float, campaign: Campaign) -> str:
    return datetime.fromtimestamp(at, campaign.schedule.zone).isoformat(timespec="seconds")


def _check_retained(campaign: Campaign, due: OccurrenceTime, horizon: float | None) -> None:
    """InvalidInput naming the date when the ledger no longer holds all of it."""
    if horizon is None or due.logical_at >= horizon:
        return
    raise InvalidInput("date", (
        f"{due.logical_date} is older than what is retained: intents finished before "
        f"{_iso(horizon, campaign)} have been pruned (retention.intents_s), so a replay "
        "of it would send again to every recipient whose intent is gone"))


def occurrence_id(campaign: str, logical_date: str) -> str:
    return f"{campaign}/{logical_date}"


@dataclass(frozen=True, kw_only=True)
class Switches:
    """The admission switches as one snapshot."""

    campaigns: Mapping[str, Switch]
    channels: Mapping[str, Switch]

    @classmethod
    def of(cls, switches: Sequence[Switch]) -> Switches:
        return cls(campaigns={s.name: s for s in switches if s.scope == "campaign"},
                   channels={s.name: s for s in switches if s.scope == "channel"})

    def campaign_paused(self, name: str) -> bool:
        switch = self.campaigns.get(name)
        return bool(switch and switch.paused)

    def paused_channels(self) -> list[str]:
        return [name for name, s in self.channels.items() if s.paused]


class Scheduler:
    """Runs admission passes for a set of campaigns."""

    def __init__(self, *, store: AdmissionStore, transport: Transport,
                 campaigns: Sequence[Campaign],
                 config: SchedulerConfig | None = None, clock: Clock | None = None,
                 kinds: Mapping[str, str] | None = None,
                 lanes: ChannelLanes = NO_LANES) -> None:
        self.store = store
        # Each channel's address kind (``model.address_kind``): sms or email.
        self.kinds = dict(kinds or {})
        # Each channel's lane names where they are not the default (``core.lanes``).
        self.lanes = lanes
        self.transport = transport
        self.campaigns = {c.name: c for c in campaigns}
        self.config = config or SchedulerConfig()
        # Measures a relay page's publishing, so its lease is extended while it lasts.
        self.clock = clock

    async def run_pass(self, *, now: float) -> PassResult:
        """One bounded pass over every campaign, then the relay for one-off intents."""
        result = PassResult()
        switches = Switches.of(await self.store.switch_all())
        for campaign in self.campaigns.values():
            due = campaign.schedule.latest(now)
            if due is None:
                continue
            existing = await self.store.occurrence_get(
                occurrence_id(campaign.name, due.logical_date))
            if existing is not None and existing.status != "admitting":
                continue
            started = existing is not None and existing.members > 0
            if switches.campaign_paused(campaign.name):
                result.paused.append(campaign.name)
                if not started:
                    await self._skip(campaign, due, now, "campaign paused at its logical time")
                continue
            if not started:
                reason = self._not_admissible(campaign, due, now, switches)
                if reason is not None:
                    result.missed.append(occurrence_id(campaign.name, due.logical_date))
                    await self._skip(campaign, due, now, reason)
                    continue
            await self._admit(campaign, due, "scheduled", now, switches, result)
        if self.config.relay_in_pass:
            result.published += await relay_pass(
                self.store, self.transport, now=now, config=self.config.relay,
                paused_channels=switches.paused_channels(), clock=self.clock)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("scheduler pass", extra={
                "occurrences": len(result.occurrences), "members": result.members,
                "admitted": result.admitted, "skipped": result.skipped,
                "published": result.published, "more": result.more,
                "paused": result.paused or None, "missed": result.missed or None})
        return result

    @staticmethod
    def _not_admissible(campaign: Campaign, due: OccurrenceTime, now: float,
                        switches: Switches) -> str | None:
        """Why an occurrence that has not started may not be admitted automatically."""
        if now - due.logical_at > campaign.grace_s:
            return "missed: older than the grace period; replay admits it"
        switch = switches.campaigns.get(campaign.name)
        if switch is not None and switch.changed_at > due.logical_at:
            # Resumed after this occurrence was due: no backfill.
            return "campaign was paused at its logical time; replay admits it"
        return None

    def _campaign(self, name: str) -> Campaign:
        campaign = self.campaigns.get(name)
        if campaign is None:
            raise InvalidInput("campaign", unknown_name("campaign", name, sorted(self.campaigns)))
        return campaign

    def _replay_dates(self, campaign: Campaign, first: str, last: str | None,
                      now: float) -> list[OccurrenceTime]:
        start = campaign.schedule.occurrence_for(first)
        if start.logical_at > now:
            raise InvalidInput("date", f"{first} is in the future; replay admits past "
                               "dates only")
        if last is None:
            return [start]
        try:
            end_day = date.fromisoformat(last[:10]) if len(last) in (10, 16) else None
        except ValueError:
            end_day = None
        if end_day is None:
            raise InvalidInput("to", f"{last!r} is not a date (YYYY-MM-DD)")
        if end_day < date.fromisoformat(start.logical_date[:10]):
            raise InvalidInput("to", f"{last} is before {first}")
        if len(last) == 16:
            # A time: through that occurrence, not the rest of its day.
            try:
                stop = campaign.schedule.occurrence_for(last)
            except InvalidInput as exc:
                raise InvalidInput("to", exc.message) from None
            if stop.logical_at < start.logical_at:
                raise InvalidInput("to", f"{last} is before {first}")
            end = stop.logical_at
        else:
            # Every occurrence from the first through the end of the last date, local
            # time (``between`` includes its end: the next day's midnight is not).
            end = datetime.combine(end_day + timedelta(days=1), datetime.min.time(),
                                   tzinfo=campaign.schedule.zone).timestamp() - 1e-3
        found = [start, *campaign.schedule.between(start.logical_at, min(end, now),
                                                   limit=MAX_REPLAY_OCCURRENCES)]
        if len(found) > MAX_REPLAY_OCCURRENCES:
            raise InvalidInput("to", f"{first} to {last} holds more than "
                               f"{MAX_REPLAY_OCCURRENCES} occurrences; replay a shorter range")
        return found

    async def _admitted_version(self, campaign: Campaign, due: OccurrenceTime) -> int | None:
        """The earlier version a date was admitted under, if it was (a few members'
        keys under each earlier version are looked up; None when none is found)."""
        if campaign.version <= 1:
            return None
        existing = await self.store.occurrence_get(occurrence_id(campaign.name,
                                                                 due.logical_date))
        if existing is None or existing.admitted == 0:
            return None
        members = await campaign.audience.page(None, 5)
        for version in range(campaign.version - 1, 0, -1):
            keys = [campaign_key(campaign.name, due.logical_date, m.id, channel, version)
                    for m in members for channel in campaign.channels]
            for key in keys:
                if await self.store.intent_get(key) is not None:
                    return version
        return None

    async def plan_replay(self, campaign_name: str, logical_date: str, *, now: float,
                          to: str | None = None, expires_at: float | None = None
                          ) -> list[ReplayPlan]:
        """What ``replay`` would admit, one plan per occurrence, without admitting it.

        ``expires_at`` is a new freshness deadline for the replayed intents.
        """
        campaign = self._campaign(campaign_name)
        if expires_at is not None and not (now < expires_at < float("inf")):
            raise InvalidInput("expires_in", "a new deadline must be in the future")
        if expires_at is not None:
            check_instant(expires_at, "expires_in")  # within the dates the scheduler knows
        plans = []
        horizon = await pruned_before(self.store)
        for due in self._replay_dates(campaign, logical_date, to, now):
            _check_retained(campaign, due, horizon)
            deadline = (None if campaign.expires_after_s is None
                        else due.logical_at + campaign.expires_after_s)
            plans.append(ReplayPlan(
                campaign=campaign.name, logical_date=due.logical_date,
                logical_at=due.logical_at, deadline=deadline,
                expires_at=deadline if expires_at is None else expires_at,
                earlier_version=await self._admitted_version(campaign, due)))
        return plans

    async def replay(self, campaign_name: str, logical_date: str, *, now: float,
                     until_done: bool = True, to: str | None = None,
                     expires_at: float | None = None, new_version: bool = False
                     ) -> PassResult:
        """Admit a past date of a campaign (or every occurrence through ``to``: a
        backfill) explicitly, each as its own ``replay`` admission.

        Refused, before anything is written, when a date is older than what the ledger
        retains (``retention.pruned_before``), when a date's freshness deadline has passed
        (its intents would all expire unsent) unless ``expires_at`` gives a new one,
        and when the date was admitted under an earlier version of the campaign (the
        replay would make a second delivery per recipient) unless ``new_version``.
        """
        campaign = self._campaign(campaign_name)
        plans = await self.plan_replay(campaign_name, logical_date, now=now, to=to,
                                       expires_at=expires_at)
        for plan in plans:
            if not plan.sendable(now):
                assert plan.deadline is not None
                raise InvalidInput("expires_in", (
                    f"{plan.logical_date}'s freshness deadline passed at "
                    f"{_iso(plan.deadline, campaign)} ({campaign.expires_after_s:g} s after "
                    "it was due): every intent would expire before it is sent. Give a new "
                    "deadline for this replay (tidings replay ... --expires-in 6h)"))
            if plan.earlier_version is not None and not new_version:
                raise InvalidInput("version", (
                    f"{plan.logical_date} was admitted under v{plan.earlier_version} and the "
                    f"campaign is now v{campaign.version}: a replay creates new intents, a "
                    "second delivery to every recipient already sent. To do that on purpose, "
                    "replay with --new-version"))
        result = PassResult()
        switches = Switches.of(await self.store.switch_all())
        for plan in plans:
            due = OccurrenceTime(logical_at=plan.logical_at, logical_date=plan.logical_date)
            if plan.earlier_version is not None:
                # The operator's decision, on the record: admit the date again from its
                # first member, under the new version's keys.
                occ_id = occurrence_id(campaign.name, plan.logical_date)
                detail = (f"replayed under v{campaign.version} (admitted under "
                          f"v{plan.earlier_version}): new intents")
                await self.store.occurrence_restart(occ_id, reason=detail)
                await self.store.event_append_many([Event(
                    key=f"occurrence/{occ_id}", channel="-", type="occurrence_restarted",
                    at=now, state="admitting", detail=detail)])
            while True:
                await self._admit(campaign, due, "replay", now, switches, result,
                                  expires_at=plan.expires_at)
                if not (until_done and result.more):
                    break
                result.more = False
        return result

    def _address_kinds(self, channels: Sequence[tuple[str, str, str]]) -> list[tuple[int, str]]:
        return [(index, address_kind(channel, self.kinds.get(channel)))
                for index, (channel, _, _) in enumerate(channels)]

    async def _suppressed(self, members: Sequence[Recipient],
                          channels: Sequence[tuple[str, str, str]]) -> set[tuple[str, str]]:
        """The (normalised address, kind) pairs of a page that are suppressed: one read."""
        kinds = {kind for _, kind in self._address_kinds(channels)}
        pairs = {(normalize_address(kind, address), kind) for member in members
                 if member.active for kind in kinds if (address := member.address(kind))}
        if not pairs:
            return set()
        return set(await self.store.suppressions_for(sorted(pairs)))

    def _drafts(self, members: Sequence[Recipient], campaign: Campaign, occurrence: str,
                due: OccurrenceTime, channels: Sequence[tuple[str, str, str]],
                template: str, expires_at: float | None,
                suppressed: Collection[tuple[str, str]] = ()) -> tuple[DraftPage, int, int]:
        """One intent per active member and channel; members without an address for a
        channel (and inactive ones) are counted as skipped, those whose address is in
        ``suppressed`` as suppressed."""
        lanes = [lane_number(self.lanes.get(channel, DEFAULT_LANES), campaign.lane, bulk=True)
                 for channel, _, _ in channels]
        page = DraftPage(campaign=campaign.name, occurrence=occurrence, template=template,
                         due_at=due.logical_at, expires_at=expires_at, channels=channels,
                         lanes=lanes, groups=[self.lanes.group(channel, campaign.group)
                                              for channel, _, _ in channels])
        check_recipient_ids([m.id for m in members if m.active])  # ids that become keys
        rows = page.rows
        kinds = self._address_kinds(channels)
        skipped = left_out = 0
        for member in members:
            if not member.active:
                skipped += 1
                continue
            data = (encode_data(member.data, f"audience[{member.id}].data")
                    if member.data else "{}")
            for index, kind in kinds:
                address = member.address(kind)
                if not address:
                    skipped += 1
                    continue
                if suppressed and (normalize_address(kind, address), kind) in suppressed:
                    left_out += 1
                    continue
                rows.append((index, member.id, address, data))
        return page, skipped, left_out

    async def _write(self, drafts: DraftPage, progress: OccurrenceProgress, now: float,
                     result: PassResult, *, after: asyncio.Task[None] | None = None) -> None:
        """Write one page's intents and move the high-water mark in one transaction
        (after the previous page's write, ``after``, has moved it)."""
        # Fused, the messages are written with the intents; else the intents wait in the
        # outbox (selected) for the relay, and admission never waits for the broker.
        fused = self.config.enqueue_in_store
        new_keys = await self.store.intent_admit(
            drafts, now=now, enqueue=fused, progress=progress, progress_after=after)
        result.members += progress.members
        result.skipped += progress.skipped
        result.suppressed += progress.suppressed
        result.admitted += len(new_keys)
        if drafts.expires_at is None or drafts.expires_at > now:
            result.sendable += len(new_keys)
        log.info("page admitted", extra={
            "occurrence": progress.occurrence, "members": progress.members,
            "admitted": len(new_keys), "skipped": progress.skipped,
            "suppressed": progress.suppressed,
            "existing": len(drafts) - len(new_keys), "high_water": progress.high_water})
        if fused:
            result.published += len(new_keys)

    async def _finish(self, occurrence: str, campaign: str, kind: str,
                      writes: list[asyncio.Task[None]], now: float) -> None:
        """Wait for the pages in flight, in order, then close the occurrence."""
        while writes:
            await writes.pop(0)
        await self.store.occurrence_finish(occurrence, now=now)
        done = await self.store.occurrence_get(occurrence)
        upcoming = self.campaigns[campaign].schedule.next_after(now)
        log.info("occurrence finished", extra={
            "occurrence": occurrence, "campaign": campaign, "kind": kind,
            "members": None if done is None else done.members,
            "admitted": None if done is None else done.admitted,
            "skipped": None if done is None else done.skipped,
            "suppressed": None if done is None else done.suppressed,
            "next_occurrence": upcoming.logical_date, "next_at": log_time(upcoming.logical_at)})

    async def _skip(self, campaign: Campaign, due: OccurrenceTime, now: float,
                    reason: str) -> None:
        occ = await self.store.occurrence_open(
            id=occurrence_id(campaign.name, due.logical_date), campaign=campaign.name,
            logical_at=due.logical_at, logical_date=due.logical_date, kind="scheduled", now=now)
        if occ.status == "admitting" and occ.members == 0:
            await self.store.occurrence_finish(occ.id, now=now, status="skipped", reason=reason)
            log.info("occurrence skipped", extra={
                "occurrence": occ.id, "campaign": campaign.name, "reason": reason})

    async def _admit(self, campaign: Campaign, due: OccurrenceTime, kind: str, now: float,
                     switches: Switches, result: PassResult, *,
                     expires_at: float | _Deadline | None = _CAMPAIGNS) -> None:
        occ: Occurrence = await self.store.occurrence_open(
            id=occurrence_id(campaign.name, due.logical_date), campaign=campaign.name,
            logical_at=due.logical_at, logical_date=due.logical_date, kind=kind, now=now)
        if occ.status != "admitting":
            return
        if occ.passes <= 1 and occ.members == 0:  # its first pass
            log.info("occurrence opened", extra={
                "occurrence": occ.id, "campaign": campaign.name, "kind": kind,
                "logical_date": due.logical_date})
        paused = [c for c in campaign.channels if c in switches.paused_channels()]
        if paused:
            # The occurrence waits for its channels; nothing already accepted is touched.
            result.paused.extend(f"{campaign.name}:{c}" for c in paused)
            return
        result.occurrences.append(occ.id)
        high_water = occ.high_water
        if isinstance(expires_at, _Deadline):
            expires_at = (due.logical_at + campaign.expires_after_s
                          if campaign.expires_after_s is not None else None)
        template = template_ref(campaign.template, campaign.version)
        channels = [(channel, *campaign_key_parts(campaign.name, due.logical_date, channel,
                                                  campaign.version))
                    for channel in campaign.channels]
        # Page k+1 is read and drafted while earlier pages are written. A store that
        # takes concurrent writers (PostgreSQL) writes up to ``pages_in_flight`` pages
        # side by side; each moves the occurrence's mark only after the page before it.
        writes: list[asyncio.Task[None]] = []
        try:
            for _ in range(self.config.max_pages):
                members = await campaign.audience.page(high_water, self.config.page_size)
                suppressed = await self._suppressed(members, channels)
                drafts, skipped, left_out = self._drafts(members, campaign, occ.id, due,
                                                         channels, template, expires_at,
                                                         suppressed)
                while len(writes) >= self.config.pages_in_flight:
                    await writes.pop(0)
                if not members:
                    await self._finish(occ.id, campaign.name, kind, writes, now)
                    return
                progress = OccurrenceProgress(occurrence=occ.id, after=high_water,
                                              high_water=members[-1].id,
                                              members=len(members), skipped=skipped,
                                              suppressed=left_out)
                high_water = members[-1].id
                previous = writes[-1] if writes else None
                writes.append(asyncio.create_task(
                    self._write(drafts, progress, now, result, after=previous)))
                if len(members) < self.config.page_size:
                    await self._finish(occ.id, campaign.name, kind, writes, now)
                    return
            while writes:
                await writes.pop(0)
        finally:
            if writes:
                # Never leave a page's write behind: let it land before the error spreads.
                await asyncio.gather(*writes, return_exceptions=True)
        result.more = True
