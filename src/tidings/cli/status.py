"""The numbers an operator reads: ``tidings status`` (the same as GET /v1/status) and
``tidings plan`` (will the backlog, or a campaign not yet enabled, drain in time)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import (
    ConfigOpt,
    JsonOpt,
    StoreOpt,
    _emit,
    _num,
    _stdout,
    _styled,
    _when,
    _with_runtime,
    _yes_no,
    app,
)
from tidings.core.errors import InvalidInput
from tidings.operate.readmodel import UncertainSends
from tidings.runtime import Runtime

if TYPE_CHECKING:
    from rich.table import Table


@app.command()
def status(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Backlog, age, rate, 429s, retries, dead letters, duplicates and SLI per channel and
    campaign (the same numbers as GET /v1/status)."""
    from tidings.operate import operations
    from tidings.operate.readmodel import Status, as_dict

    async def go(runtime: Runtime) -> Status:
        snap = await operations.snapshot(
            runtime.store, runtime.transport, channels=runtime.channels,
            now=runtime.clock.now(), window_s=runtime.settings.api.rate_window_s)
        uncertain = await operations.uncertain_counts(
            runtime.store, runtime.uncertain_policies(), now=snap.now)
        return operations.status(
            snap, campaigns={c.name: c.channels for c in runtime.campaigns},
            channels=runtime.channels, limits=runtime.limits,
            freshness={c.name: c.expires_after_s for c in runtime.campaigns},
            uncertain=uncertain,
            retention=runtime.retention(), lanes=runtime.channel_lanes)
    result = _with_runtime(config, store, go)
    if as_json:
        _emit(True, as_dict(result))
        return
    out = _stdout()
    out.print(textout.ledger(result.ledger), markup=False, highlight=False, soft_wrap=True)
    waiting = textout.digests(result.digests)
    if waiting is not None:
        out.print(waiting, markup=False, highlight=False, soft_wrap=True)
    for h in result.holds.active:
        out.print(_styled("delivery held", "bold yellow",
                          f": {h.scope} {h.name!r} since {_when(h.since)} by {h.by}: "
                          f"{h.parked} parked" + (f" ({h.reason})" if h.reason else "")))
    if result.holds.expired_while_held:
        out.print(f"expired while held: {result.holds.expired_while_held}",
                  highlight=False)
    for trip in result.guardrails_tripped:
        out.print(_styled("admission paused by a guardrail", "bold red",
                          f": {trip.scope} {trip.name!r} since {_when(trip.since)}: "
                          f"{trip.reason}"))
    out.print(textout.fitted(
        ("channel", "backlog", "oldest (s)", "in flight", "rate/s", "accepted", "429s",
         "retries", "dead letters", "duplicates", "SLI", "drain (s)", "paused"),
        [(name, str(ch.counts.backlog), f"{ch.counts.oldest_age_s:.1f}",
          str(ch.counts.in_flight), f"{ch.counts.send_rate_per_s:.2f}",
          str(ch.counts.accepted), str(ch.rate_limited), str(ch.retries),
          str(ch.dead_letters), str(ch.duplicates_suppressed), _pct(ch.counts.sli),
          _num(None if ch.drain is None else ch.drain.drain_s), _yes_no(ch.paused))
         for name, ch in result.channels.items()],
        width=out.width, title="tidings status: channels"))
    lane_rows = [(name, lane.name, str(lane.ready), str(lane.total), f"{lane.oldest_age_s:.1f}")
                 for name, ch in result.channels.items() if ch.queue is not None
                 for lane in ch.queue.lanes]
    if lane_rows:
        out.print(textout.fitted(("channel", "lane", "ready", "queued", "oldest (s)"),
                                 lane_rows, width=out.width, title="lanes"))
    group_rows = [(name, g.lane, g.group, str(g.ready), str(g.total))
                  for name, ch in result.channels.items() if ch.queue is not None
                  for g in ch.queue.groups]
    if group_rows:
        out.print(textout.fitted(("channel", "lane", "group", "ready", "queued"),
                                 group_rows, width=out.width,
                                 title="groups (fair share; the largest)"))
    provider_rows = [(name, p.name, "out" if p.out else "back", p.since, p.worker, p.reason)
                     for name, ch in result.channels.items() for p in ch.providers]
    if provider_rows:
        out.print(textout.fitted(("channel", "provider", "state", "since", "said by",
                                  "why"), provider_rows, width=out.width,
                                 title="providers (failover)"))
    out.print(_uncertain_table({name: ch.uncertain_sends
                                for name, ch in result.channels.items()
                                if ch.uncertain_sends is not None}))
    out.print(textout.fitted(
        ("campaign", "latest occurrence", "backlog", "oldest (s)", "accepted", "expired",
         "dead", "SLI", "paused"),
        [(name, "" if (occ := cp.latest_occurrence) is None
          else f"{occ.logical_date} {occ.status}", str(cp.counts.backlog),
          f"{cp.counts.oldest_age_s:.1f}", str(cp.counts.accepted), str(cp.counts.expired),
          str(cp.counts.dead), _pct(cp.counts.sli), _yes_no(cp.paused))
         for name, cp in result.campaigns.items()],
        width=out.width, title="campaigns"))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _uncertain_table(rows: Mapping[str, UncertainSends]) -> Table:
    from rich.table import Table

    table = Table("channel", "policy", "hold (s)", "uncertain", "held", "awaiting operator",
                  title="uncertain sends")
    for name, u in rows.items():
        table.add_row(name, u.policy.mode.value + (" (set)" if u.policy.chosen else ""),
                      _num(u.policy.hold_s), str(u.uncertain), str(u.held),
                      str(u.awaiting_operator))
    return table


@app.command()
def plan(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
         campaign: Annotated[str | None, typer.Option(
             help="Forecast this campaign's drain before it is enabled (tidings.operate.capacity) "
                  "instead of the backlog's.")] = None,
         workers: Annotated[int, typer.Option(
             min=1, help="With --campaign: worker processes per channel.")] = 1,
         observed_workers: Annotated[int | None, typer.Option(
             min=1, help="With --campaign: worker processes behind the recent sends "
                         "(default: --workers).")] = None,
         rate_per_worker: Annotated[float | None, typer.Option(
             min=0.001, help="With --campaign: sends per second of one worker process, "
                             "used when the channel sent nothing in the rate window.")] = None,
         recipients: Annotated[int | None, typer.Option(
             min=0, help="With --campaign: the audience's size (default: its count).")] = None,
         admission_rate: Annotated[float | None, typer.Option(
             min=0.001, help="With --campaign: intents admitted per second, if it may "
                             "bind.")] = None,
         ) -> None:
    """Will the backlog drain before it goes stale? Drain time (backlog ÷ sustained rate)
    against the freshness deadline, with the numbers it used. With --campaign, the same
    forecast for a campaign not yet enabled: its audience, the channel's pace and the
    workers' observed rate."""

    from tidings.operate import operations
    from tidings.operate.readmodel import Plan, as_dict

    if campaign is not None:
        _plan_campaign(config, store, as_json, campaign, workers=workers,
                       observed_workers=observed_workers, rate_per_worker=rate_per_worker,
                       recipients=recipients, admission_rate=admission_rate)
        return

    async def go(runtime: Runtime) -> Plan:
        snap = await operations.snapshot(
            runtime.store, runtime.transport, channels=runtime.channels,
            now=runtime.clock.now(), window_s=runtime.settings.api.rate_window_s,
            occurrences=False)
        return operations.plan_report(
            snap, limits=runtime.limits,
            freshness={c.name: c.expires_after_s for c in runtime.campaigns},
            uncertain=await operations.uncertain_counts(
                runtime.store, runtime.uncertain_policies(), now=snap.now))
    result = _with_runtime(config, store, go)
    table = textout.table("channel", "campaign", "backlog", "channel backlog", "rate/s",
                          "rate from", "drain (s)", "deadline in (s)", "freshness (s)", "late",
                          "verdict", title=f"tidings plan (rate window {result.window_s:.0f} s)")
    for x in result.lines:
        table.add_row(x.channel, x.campaign or "(all)", str(x.backlog),
                      str(x.channel_backlog), _num(x.rate_per_s), x.rate_source,
                      _num(x.drain_s), _num(x.deadline_in_s),
                      _num(x.freshness_deadline_s), str(x.expected_late), x.verdict)
    _emit(as_json, as_dict(result), table)
    if not as_json:
        _stdout().print(_uncertain_table(result.uncertain))


def _plan_campaign(config: Path | None, store: str | None, as_json: bool, name: str, *,
                   workers: int, observed_workers: int | None, rate_per_worker: float | None,
                   recipients: int | None, admission_rate: float | None) -> None:
    from dataclasses import asdict

    from tidings.operate import operations

    async def go(runtime: Runtime) -> dict[str, Any]:
        found = [c for c in runtime.campaigns if c.name == name]
        if not found:
            raise InvalidInput("campaign", f"no campaign {name!r} is declared")
        now = runtime.clock.now()
        window = runtime.settings.api.rate_window_s
        lines = await operations.campaign_forecast(
            runtime.store, found[0], limits=runtime.limits, now=now, window_s=window,
            workers=workers, observed_workers=observed_workers,
            per_worker_per_s=rate_per_worker, recipients=recipients,
            admission_per_s=admission_rate)
        return {"now": now, "window_s": window, "campaign": name,
                "channels": [asdict(x) for x in lines]}
    result = _with_runtime(config, store, go)
    table = textout.table("channel", "recipients", "workers", "per worker/s", "rate from",
                          "rate/s", "bound", "drain (s)", "freshness (s)", "late",
                          "workers needed", "verdict",
                          title=f"tidings plan --campaign {name} "
                                f"(rate window {result['window_s']:.0f} s)")
    for x in result["channels"]:
        f = x["forecast"]
        needed = f["workers_needed"]
        table.add_row(x["channel"], f"{f['recipients']:,}", str(f["workers"]),
                      _num(f["per_worker_per_s"]), x["rate_source"], _num(f["rate_per_s"]),
                      str(f["bound"]), _num(f["drain_s"]), _num(f["freshness_s"]),
                      f"{f['late']:,}", "-" if needed is None else str(needed),
                      str(f["verdict"]))
    _emit(as_json, result, table)
