"""Putting work right: one reconciler sweep (``tidings reconcile``), a missed date
admitted again (``tidings replay``), a retention prune (``tidings retention run``), dead
letters (``tidings dlq list|redrive``) and uncertain sends (``tidings uncertain
list|resolve``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import (
    ConfigOpt,
    JsonOpt,
    StoreOpt,
    _emit,
    _num,
    _stderr,
    _when,
    _with_runtime,
    _yes_no,
    app,
    dlq_app,
    retention_app,
    uncertain_app,
)
from tidings.core.errors import InvalidInput, unknown_name
from tidings.runtime import Runtime


@app.command()
def reconcile(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One reconciler sweep: expired leases, stuck publishes, lost messages, uncertain sends."""
    from tidings.processes.commands import reconcile_pass

    result = _with_runtime(config, store, reconcile_pass)
    _emit(as_json, result, textout.reconciled(result))


@retention_app.command("run")
def retention_run(
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Count what would be pruned; prune nothing.")] = False,
        config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One bounded prune now (the reconciler runs one every retention.every_s)."""
    from tidings.recovery.retention import prune

    async def go(runtime: Runtime) -> dict[str, Any]:
        report = await prune(runtime.store, runtime.retention(), now=runtime.clock.now(),
                             dry_run=dry_run, worker="cli")
        return report.as_dict()
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.pruned(result))


@app.command()
def replay(campaign: str, date: Annotated[str, typer.Argument(help="Logical date, YYYY-MM-DD.")],
           to: Annotated[str | None, typer.Option(
               help="Backfill: every occurrence from DATE through this one: a date "
                    "(YYYY-MM-DD, through its end) or an occurrence time "
                    "(YYYY-MM-DDTHH:MM, through that occurrence).")] = None,
           expires_in: Annotated[str | None, typer.Option(
               help="A new freshness deadline from now (6h, 2d): needed when DATE's own "
                    "deadline has passed.")] = None,
           new_version: Annotated[bool, typer.Option(
               "--new-version", help="Replay a date admitted under an earlier campaign "
                                     "version: new intents, a second delivery each.")] = False,
           dry_run: Annotated[bool, typer.Option(
               "--dry-run", help="Say what would be admitted; admit nothing.")] = False,
           config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Admit a missed date of a campaign explicitly, as its own replay admission.

    Refused when the date's freshness deadline has passed (every intent would expire
    unsent) unless --expires-in gives a new one, and when the date was sent under an
    earlier version of the campaign unless --new-version says a second send is meant.
    """
    from tidings.admission.scheduler import MAX_REPLAY_LIFETIME_S
    from tidings.core.durations import parse_duration

    async def go(runtime: Runtime) -> dict[str, Any]:
        now = runtime.clock.now()
        lifetime = None if expires_in is None else parse_duration(expires_in, "expires_in")
        if lifetime is not None and lifetime > MAX_REPLAY_LIFETIME_S:
            raise InvalidInput("expires_in", f"{expires_in!r} is longer than "
                                             f"{MAX_REPLAY_LIFETIME_S / 86400:g} days")
        expires_at = None if lifetime is None else now + lifetime
        scheduler = runtime.scheduler()
        plans = await scheduler.plan_replay(campaign, date, now=now, to=to,
                                            expires_at=expires_at)
        answer: dict[str, Any] = {
            "campaign": campaign, "date": date, "to": to, "dry_run": dry_run,
            "occurrences": [{"logical_date": p.logical_date, "expires_at": p.expires_at,
                             "sendable": p.sendable(now),
                             "earlier_version": p.earlier_version} for p in plans]}
        if dry_run:
            return answer
        result = await scheduler.replay(campaign, date, now=now, to=to,
                                        expires_at=expires_at, new_version=new_version)
        return answer | {"members": result.members, "admitted": result.admitted,
                         "skipped": result.skipped, "published": result.published,
                         "sendable": result.sendable}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.replayed(result))


DlqChannelOpt = Annotated[str, typer.Option("--channel", help="The channel's queue.")]


def _known_channel(runtime: Runtime, channel: str) -> None:
    if channel not in runtime.limits:
        raise typer.BadParameter(unknown_name("channel", channel, runtime.channels),
                                 param_hint="--channel")


@dlq_app.command("list")
def dlq_list(channel: DlqChannelOpt,
             limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
             config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """A channel's dead letters, oldest first, with their intents' states."""
    from tidings.operate import operations
    from tidings.operate.readmodel import DeadLetterRow, as_dict

    async def go(runtime: Runtime) -> list[DeadLetterRow]:
        _known_channel(runtime, channel)
        return await operations.dead_letters(runtime.store, runtime.transport, channel,
                                             limit=limit)
    rows = _with_runtime(config, store, go)
    table = textout.table("id", "key", "reason", "receives", "dead at", "intent now",
                          title=f"dead letters: {channel}", whole=("dead at",))
    for r in rows:
        table.add_row(r.id, r.key or "(not a tidings message)", r.reason,
                      str(r.receive_count), _when(r.dead_at), r.intent_state or "-")
    _emit(as_json, {"channel": channel, "dead_letters": [as_dict(r) for r in rows]}, table)


@dlq_app.command("redrive")
def dlq_redrive(channel: DlqChannelOpt,
                ids: Annotated[list[str] | None, typer.Option(
                    "--id", help="Dead letters to redrive (repeat); all of the oldest "
                                 "--limit without it.")] = None,
                limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
                config: ConfigOpt = None, store: StoreOpt = None,
                as_json: JsonOpt = False) -> None:
    """Put dead letters back: dead intents are reopened first, and the worker checks the
    ledger before any send (an intent accepted meanwhile is not sent again)."""
    from dataclasses import asdict

    from tidings.operate import operations

    async def go(runtime: Runtime) -> dict[str, Any]:
        _known_channel(runtime, channel)
        result = await operations.redrive(runtime.store, runtime.transport, channel,
                                          now=runtime.clock.now(), ids=ids or None,
                                          limit=limit)
        return asdict(result)
    result = _with_runtime(config, store, go)
    table = textout.table("id", "key", "state before", "reopened", title=f"redriven: {channel}")
    for r in result["redriven"]:
        table.add_row(r["id"], r["key"], r["state_before"], _yes_no(r["reopened"]))
    _emit(as_json, result, table)
    for kept in result["kept"]:
        _stderr().print(f"kept {kept['id']}: {kept['why']}", soft_wrap=True)


UncertainChannelOpt = Annotated[str | None, typer.Option(
    "--channel", help="Only this channel's intents.")]
OlderThanOpt = Annotated[str | None, typer.Option(
    "--older-than", help="Only intents unsettled at least this long: 90, 90s, 15m, 2h, 1d.")]


@uncertain_app.command("list")
def uncertain_list(channel: UncertainChannelOpt = None, older_than: OlderThanOpt = None,
                   limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
                   config: ConfigOpt = None, store: StoreOpt = None,
                   as_json: JsonOpt = False) -> None:
    """Uncertain and held intents, oldest first, each with its channel's policy and
    whether it awaits an operator's decision."""
    from tidings.delivery.uncertain import parse_age
    from tidings.operate import operations
    from tidings.operate.readmodel import UncertainRow, to_json

    async def go(runtime: Runtime) -> list[UncertainRow]:
        age = parse_age(older_than, "--older-than") if older_than is not None else None
        if channel is not None:
            _known_channel(runtime, channel)
        return await operations.uncertain_list(
            runtime.store, runtime.uncertain_policies(), now=runtime.clock.now(),
            channel=channel, older_than_s=age, limit=limit)
    rows = _with_runtime(config, store, go)
    from rich.table import Table

    table = Table("key", "channel", "state", "age (s)", "policy", "awaiting operator",
                  "reason", title="uncertain sends")
    for r in rows:
        table.add_row(r.key, r.channel, r.state.value, _num(r.age_s), r.policy,
                      _yes_no(r.awaiting_operator), r.reason or "")
    _emit(as_json, {"uncertain": to_json(rows)}, table)


class Decision(StrEnum):
    accepted = "accepted"
    resend = "resend"
    failed = "failed"


@uncertain_app.command("resolve")
def uncertain_resolve(
    decision: Annotated[Decision, typer.Option(
        "--as", case_sensitive=False,
        help="accepted: the provider has it (no send); resend: send again under the same "
             "key (a copy is possible); failed: dead (terminal). Required: no decision "
             "is taken for you.")],
    keys: Annotated[list[str] | None, typer.Argument(
        help="Intent keys; or none, with --channel and/or --older-than.")] = None,
    channel: UncertainChannelOpt = None, older_than: OlderThanOpt = None,
    by: Annotated[str | None, typer.Option(
        "--by", help="Who decides (recorded in the audit event). Default: the login name.")
    ] = None,
    note: Annotated[str | None, typer.Option(help="Why, for the audit event.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000,
                                       help="With a selection: at most this many.")] = 1000,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Settle uncertain or held intents by an operator's decision; each is an audit event
    naming who decided."""
    import getpass
    from dataclasses import asdict

    from tidings.delivery.uncertain import parse_age
    from tidings.operate import operations

    if not keys and channel is None and older_than is None:
        raise typer.BadParameter("give KEY..., or --channel and/or --older-than",
                                 param_hint="KEY")
    who = by or f"cli:{getpass.getuser()}"

    async def go(runtime: Runtime) -> dict[str, Any]:
        age = parse_age(older_than, "--older-than") if older_than is not None else None
        if channel is not None:
            _known_channel(runtime, channel)
        result = await operations.uncertain_resolve(
            runtime.store, runtime.transport, decision=decision.value, who=who,
            now=runtime.clock.now(), keys=keys or None, channel=channel, older_than_s=age,
            note=note, limit=limit)
        return asdict(result)
    result = _with_runtime(config, store, go)
    from rich.table import Table

    table = Table("key", "channel", "before", "now", title=f"resolved as {decision.value} "
                  f"by {who}")
    for r in result["resolved"]:
        table.add_row(r["key"], r["channel"], r["state_before"], r["state"])
    _emit(as_json, result, table)
    for skipped in result["skipped"]:
        _stderr().print(f"skipped {skipped['key']}: {skipped['why']}", soft_wrap=True)
    if keys and not result["resolved"]:
        # Every key named was skipped (mistyped, or settled already): a script must see it,
        # as it sees `cancel` and `inspect` of a key that is not there.
        raise typer.Exit(2)
