"""Operator controls over work not yet sent: admission switches (``tidings admission
pause|resume``), delivery holds (``tidings hold``, ``tidings release``) and bulk actions
over a selection (``tidings bulk delay|cancel|dead-letter|reopen``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import (
    ConfigOpt,
    JsonOpt,
    StoreOpt,
    _emit,
    _when,
    _with_runtime,
    admission_app,
    app,
    bulk_app,
)
from tidings.core.errors import unknown_name
from tidings.runtime import Runtime


def _switch(paused: bool, campaign: str | None, channel: str | None, reason: str | None,
            config: Path | None, store: str | None, as_json: bool) -> None:
    if (campaign is None) == (channel is None):
        raise typer.BadParameter("name exactly one of --campaign or --channel")
    scope, name = ("campaign", campaign) if campaign is not None else ("channel", channel)
    assert name is not None

    async def go(runtime: Runtime) -> dict[str, Any]:
        known = ({c.name for c in runtime.campaigns} if scope == "campaign"
                 else set(runtime.channels))
        if name not in known:
            raise typer.BadParameter(unknown_name(scope, name, sorted(known)))
        from tidings.operate.operations import switch_admission

        switch, before = await switch_admission(runtime.store, scope=scope, name=name,
                                                paused=paused, now=runtime.clock.now(),
                                                reason=reason)
        if before is not None and before.paused:
            # A resume shows why it was paused first (a guardrail's reason above all);
            # a second pause, that it was paused already, for that reason.
            typer.echo(f"{scope} {name!r} {'was' if not paused else 'is already'} paused "
                       f"since {_when(before.changed_at)}: "
                       f"{before.reason or 'no reason given'}", err=True)
        return dict(switch.__dict__) | {"was": None if before is None else dict(
            before.__dict__)}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.switched(result))


CampaignOpt = Annotated[str | None, typer.Option(help="The campaign to switch.")]
ChannelOpt = Annotated[str | None, typer.Option(help="The channel to switch.")]
ReasonOpt = Annotated[str | None, typer.Option(help="Why, for the record.")]


@admission_app.command("pause")
def admission_pause(campaign: CampaignOpt = None, channel: ChannelOpt = None,
                    reason: ReasonOpt = None, config: ConfigOpt = None, store: StoreOpt = None,
                    as_json: JsonOpt = False) -> None:
    """Stop new admission. A campaign paused across an occurrence does not backfill it."""
    _switch(True, campaign, channel, reason, config, store, as_json)


@admission_app.command("resume")
def admission_resume(campaign: CampaignOpt = None, channel: ChannelOpt = None,
                     reason: ReasonOpt = None, config: ConfigOpt = None, store: StoreOpt = None,
                     as_json: JsonOpt = False) -> None:
    """Restart admission; occurrences missed while paused need `tidings replay`."""
    _switch(False, campaign, channel, reason, config, store, as_json)


HoldCampaignOpt = Annotated[str | None, typer.Option(help="A campaign.")]
HoldChannelOpt = Annotated[str | None, typer.Option(help="A channel.")]
HoldOccurrenceOpt = Annotated[str | None, typer.Option(
    help="An occurrence id (campaign/date, as `tidings status` shows).")]
ByOpt = Annotated[str | None, typer.Option(
    "--by", help="Who does it, for the audit trail (default: the OS user).")]


def _by(by: str | None) -> str:
    import getpass

    from tidings.core.keys import check_text

    if by is not None:
        return check_text(by, "by")
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"


def _one_scope(campaign: str | None, channel: str | None,
               occurrence: str | None) -> tuple[str, str]:
    named = [(scope, name) for scope, name in (
        ("campaign", campaign), ("channel", channel), ("occurrence", occurrence))
        if name is not None]
    if len(named) != 1:
        raise typer.BadParameter("name exactly one of --campaign, --channel or --occurrence")
    return named[0]


@app.command("hold")
def hold_command(campaign: HoldCampaignOpt = None, channel: HoldChannelOpt = None,
                 occurrence: HoldOccurrenceOpt = None, reason: ReasonOpt = None,
                 by: ByOpt = None, config: ConfigOpt = None, store: StoreOpt = None,
                 as_json: JsonOpt = False) -> None:
    """Hold delivery of a campaign, channel or occurrence: workers park its intents
    unsent (expiry still applies) until `tidings release`. Admission is not touched."""
    from tidings.operate import holds

    scope, name = _one_scope(campaign, channel, occurrence)

    async def go(runtime: Runtime) -> dict[str, Any]:
        who = _by(by)
        await holds.check_target(runtime.store, scope, name, channels=runtime.channels,
                                 campaigns=[c.name for c in runtime.campaigns])
        made = await holds.hold(runtime.store, scope=scope, name=name, by=who,
                                now=runtime.clock.now(), reason=reason)
        return {"scope": scope, "name": name, "held": made is not None,
                "already_held": made is None, "by": who}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, f"{scope} {name!r}: delivery "
          + ("held" if result["held"] else "was already held") + f" (by {result['by']})")


@app.command("release")
def release_command(campaign: HoldCampaignOpt = None, channel: HoldChannelOpt = None,
                    occurrence: HoldOccurrenceOpt = None, by: ByOpt = None,
                    config: ConfigOpt = None, store: StoreOpt = None,
                    as_json: JsonOpt = False) -> None:
    """Release a hold: its parked intents are republished in bounded batches (those
    expired meanwhile become expired). Run again to finish a release cut short."""
    from tidings.operate import holds

    scope, name = _one_scope(campaign, channel, occurrence)

    async def go(runtime: Runtime) -> dict[str, Any]:
        who = _by(by)
        await holds.check_target(runtime.store, scope, name, channels=runtime.channels,
                                 campaigns=[c.name for c in runtime.campaigns])
        done = await holds.release(runtime.store, runtime.transport, scope=scope, name=name,
                                   by=who, now=runtime.clock.now())
        return {"scope": scope, "name": name, "was_held": done.released is not None,
                "republished": done.republished, "expired": done.expired,
                "still_held": done.still_held, "by": who}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, (
        f"{scope} {name!r}: " + ("released" if result["was_held"] else "was not held")
        + f"; {result['republished']} republished, {result['expired']} expired while held"
        + (f", {result['still_held']} still under another hold" if result["still_held"]
           else "")))


StatesOpt = Annotated[list[str] | None, typer.Option(
    "--state", help="Only intents in this state (repeat for more).")]
OlderOpt = Annotated[str | None, typer.Option(
    "--older-than", help="Only intents due more than this long ago, e.g. 2h.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Count the selection; change "
                                                           "nothing.")]


def _bulk(action: str, *, campaign: str | None, channel: str | None, occurrence: str | None,
          states: list[str] | None, older_than: str | None, until: str | None,
          reason: str | None, by: str | None, dry_run: bool, config: Path | None,
          store: str | None, as_json: bool) -> None:
    from tidings.core.durations import parse_duration, parse_until
    from tidings.operate import bulk, holds

    async def go(runtime: Runtime) -> dict[str, Any]:
        who = _by(by)
        older = None if older_than is None else parse_duration(older_than, "older_than")
        now = runtime.clock.now()
        for scope, name in (("campaign", campaign), ("channel", channel),
                            ("occurrence", occurrence)):
            if name is not None:
                await holds.check_target(runtime.store, scope, name,
                                         channels=runtime.channels,
                                         campaigns=[c.name for c in runtime.campaigns])
        at = None if until is None else parse_until(until, now, "until")
        request = bulk.BulkRequest(
            action=action, by=who, campaign=campaign, occurrence=occurrence, channel=channel,
            states=tuple(states or ()), older_than_s=older, until=at, reason=reason)
        result = await bulk.run(runtime.store, request, now=now, dry_run=dry_run,
                                transport=runtime.transport)
        return {"action": result.action, "dry_run": result.dry_run,
                "selected": result.selected, "changed": result.changed,
                "cancel_requested": result.cancel_requested, "by": who}
    result = _with_runtime(config, store, go)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(result["selected"].items())) or "none"
    asked = result["cancel_requested"]
    _emit(as_json, result, f"{action}: selected {counts}; " + (
        "dry run, nothing changed" if result["dry_run"] else f"{result['changed']} changed")
        + (f", {asked} claimed asked to cancel (a worker sends any it started first)"
           if asked else "") + f" (by {result['by']})")


UntilOpt = Annotated[str, typer.Option(
    "--until", help="When to deliver instead: an ISO 8601 time (UTC unless it names a "
                    "zone) or a duration from now, e.g. 6h.")]


@bulk_app.command("delay")
def bulk_delay(until: UntilOpt, campaign: HoldCampaignOpt = None,
               channel: HoldChannelOpt = None, occurrence: HoldOccurrenceOpt = None,
               state: StatesOpt = None, older_than: OlderOpt = None, reason: ReasonOpt = None,
               by: ByOpt = None, dry_run: DryRunOpt = False, config: ConfigOpt = None,
               store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delay enqueued and retryable intents of the selection until a time."""
    _bulk("delay", campaign=campaign, channel=channel, occurrence=occurrence, states=state,
          older_than=older_than, until=until, reason=reason, by=by, dry_run=dry_run,
          config=config, store=store, as_json=as_json)


@bulk_app.command("cancel")
def bulk_cancel(campaign: HoldCampaignOpt = None, channel: HoldChannelOpt = None,
                occurrence: HoldOccurrenceOpt = None, state: StatesOpt = None,
                older_than: OlderOpt = None, reason: ReasonOpt = None, by: ByOpt = None,
                dry_run: DryRunOpt = False, config: ConfigOpt = None, store: StoreOpt = None,
                as_json: JsonOpt = False) -> None:
    """Cancel the selection's unsent intents (a claimed one: before its send)."""
    _bulk("cancel", campaign=campaign, channel=channel, occurrence=occurrence, states=state,
          older_than=older_than, until=None, reason=reason, by=by, dry_run=dry_run,
          config=config, store=store, as_json=as_json)


@bulk_app.command("dead-letter")
def bulk_dead_letter(campaign: HoldCampaignOpt = None, channel: HoldChannelOpt = None,
                     occurrence: HoldOccurrenceOpt = None, state: StatesOpt = None,
                     older_than: OlderOpt = None, reason: ReasonOpt = None, by: ByOpt = None,
                     dry_run: DryRunOpt = False, config: ConfigOpt = None,
                     store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Dead-letter the selection's unsent intents (kept; `tidings bulk reopen` undoes it)."""
    _bulk("dead-letter", campaign=campaign, channel=channel, occurrence=occurrence,
          states=state, older_than=older_than, until=None, reason=reason, by=by,
          dry_run=dry_run, config=config, store=store, as_json=as_json)


@bulk_app.command("reopen")
def bulk_reopen(campaign: HoldCampaignOpt = None, channel: HoldChannelOpt = None,
                occurrence: HoldOccurrenceOpt = None, older_than: OlderOpt = None,
                reason: ReasonOpt = None, by: ByOpt = None, dry_run: DryRunOpt = False,
                config: ConfigOpt = None, store: StoreOpt = None,
                as_json: JsonOpt = False) -> None:
    """Reopen the selection's dead intents: retryable now, failures reset, a fresh
    message each (a worker rechecks the ledger before any send)."""
    _bulk("reopen", campaign=campaign, channel=channel, occurrence=occurrence,
          states=None, older_than=older_than, until=None, reason=reason, by=by,
          dry_run=dry_run, config=config, store=store, as_json=as_json)
