"""The ``tidings`` command line. It parses and calls; the work lives elsewhere."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeVar

import typer

from tidings import logs, textout
from tidings.errors import (
    ConfigurationError,
    InvalidInput,
    SchemaOutOfDate,
    TidingsError,
    unknown_name,
)
from tidings.readmodel import UncertainSends
from tidings.runtime import Runtime, build_runtime
from tidings.settings import Settings, find_settings_file

if TYPE_CHECKING:
    # rich is imported by the commands that print, not with the CLI: every worker
    # process starts here and prints nothing but its logs.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

T = TypeVar("T")
#: Seconds a command that is not a service tries an unreachable broker again.
COMMAND_PATIENCE_S = 5.0

app = typer.Typer(
    help="tidings: scheduled, multi-channel notifications with exactly one business delivery "
         "per intent.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    rich_markup_mode="markdown")
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
admission_app = typer.Typer(
    help="Admission switches: stop or restart new admission for a campaign or a channel "
         "without touching work already accepted.", no_args_is_help=True)
app.add_typer(admission_app, name="admission")
token_app = typer.Typer(help="API tokens with scopes (viewer, operator, trigger, publish).",
                        no_args_is_help=True)
app.add_typer(token_app, name="token")
dlq_app = typer.Typer(help="Dead letters: list them, redrive them (the ledger is rechecked "
                           "before any send).", no_args_is_help=True)
app.add_typer(dlq_app, name="dlq")
retention_app = typer.Typer(
    help="Ledger retention: prune terminal intents, their events and finished occurrences "
         "older than the settings' retention section keeps them.", no_args_is_help=True)
app.add_typer(retention_app, name="retention")
preference_app = typer.Typer(
    help="Recipient preferences, checked at every send: opted out -> cancelled "
         "(opted_out), quiet hours -> deferred to their end.", no_args_is_help=True)
app.add_typer(preference_app, name="preference")
bulk_app = typer.Typer(
    help="Bulk actions over a selection (campaign, occurrence, channel, state, age): delay, "
         "cancel, dead-letter, reopen (dead ones back). Never a purge: every intent stays "
         "in the ledger. --dry-run counts first.", no_args_is_help=True)
app.add_typer(bulk_app, name="bulk")


@cache
def _stderr() -> Console:
    return _console(stderr=True)


@cache
def _stdout() -> Console:
    return _console(stderr=False)


def _console(*, stderr: bool) -> Console:
    # Keys, reasons and paths are printed as they are: "[/]" in a key is no markup (it
    # failed the printing), ":email:" in a notify key no emoji. Styles go in as Text.
    from rich.console import Console

    return Console(stderr=stderr, markup=False, emoji=False, highlight=False)


def _styled(label: str, style: str, rest: str) -> Text:
    """``label`` in ``style``, then ``rest`` as it is."""
    from rich.text import Text

    return Text.assemble((label, style), rest)


def _error(message: str) -> None:
    _stderr().print(_styled("error:", "red", f" {message}"), soft_wrap=True)


ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", "-c", help="Settings file (TOML). TIDINGS_STORE overrides its store URL.",
    envvar="TIDINGS_CONFIG")]
StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="Store URL, e.g. sqlite:///tidings.db (overrides the settings file).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _settings(config: Path | None, store: str | None) -> Settings:
    # --config, else TIDINGS_CONFIG, else ./tidings.toml (else the defaults).
    settings = Settings.load(find_settings_file(config))
    if store:
        settings = Settings.parse({**settings.model_dump(), "store": store})
    return settings


def _fail(message: str) -> NoReturn:
    """``error: message`` on stderr and exit code 2: what a user got wrong, in one line."""
    _error(message)
    raise typer.Exit(2)


def _run(work: Callable[[], Awaitable[T]], *, config: Path | None = None,
         store: str | None = None) -> T:
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except TidingsError as exc:
        message = str(exc)
        if isinstance(exc, SchemaOutOfDate):
            # The one command to run, with the options that found this database.
            command = " ".join(["tidings db migrate",
                                *(["--config", shlex.quote(str(config))] if config else []),
                                *(["--store", shlex.quote(store)] if store else [])])
            message = message.replace("tidings db migrate", command)
        elif "declared: none" in message and find_settings_file(config) is None:
            message += (" (no settings file was read: give --config PATH, set "
                        "TIDINGS_CONFIG, or run where tidings.toml is)")
        _error(message)
        raise typer.Exit(2) from None


def _with_runtime(config: Path | None, store: str | None, fn: Callable[[Runtime], Awaitable[T]],
                  *, migrate: bool | Literal["new"] = False, channel: str | None = None) -> T:
    """Run ``fn`` on a runtime; ``channel``, when given, must be declared before anything
    (a new database included) is created."""
    async def work() -> T:
        settings = _settings(config, store)
        if channel is not None and channel not in settings.channels:
            raise ConfigurationError("channel", unknown_name("channel", channel,
                                                             sorted(settings.channels)))
        # Services ride out a broker outage however long it lasts (saying so in the
        # log), as they do a store's; a command someone waits on says so soon.
        runtime = await build_runtime(
            settings, migrate=migrate,
            patience_s=math.inf if migrate == "new" else COMMAND_PATIENCE_S)
        logs.use_clock(runtime.clock)  # log times are the simulated ones when set
        async with runtime:
            return await fn(runtime)
    return _run(work, config=config, store=store)


def _emit(as_json: bool, data: Any, text: Table | str | None = None) -> None:
    """``data`` as one JSON object with --json, else ``text`` (a sentence or a table), else
    ``data`` as readable lines: JSON only when asked for."""
    if as_json:
        typer.echo(json.dumps(data, default=str))
    elif text is not None and not isinstance(text, str):
        _stdout().print(text)
    else:
        typer.echo(textout.plain(data) if text is None else text)


class LogFormat(StrEnum):
    console = "console"
    json = "json"


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


@app.callback()
def _main(
    log_format: Annotated[LogFormat | None, typer.Option(
        "--log-format", envvar=logs.FORMAT_ENV, case_sensitive=False, show_default=False,
        help="Log lines as 'console' (readable) or 'json' (one object per line). Default: "
             "console when stderr is a terminal, json otherwise.")] = None,
    log_level: Annotated[LogLevel | None, typer.Option(
        "--log-level", envvar=logs.LEVEL_ENV, case_sensitive=False, show_default=False,
        help="Log from this level up; debug adds one line per send. Default: info.")] = None,
) -> None:
    """Logs go to stderr; both options apply to every command and, through the
    environment, to the processes a command starts."""
    logs.configure_logging(None if log_format is None else log_format.value,
                           logs.DEFAULT_LEVEL if log_level is None else log_level.value)
    # Processes this one starts (worker --processes, the demo's) log the same way.
    if log_format is not None:
        os.environ[logs.FORMAT_ENV] = log_format.value
    if log_level is not None:
        os.environ[logs.LEVEL_ENV] = log_level.value


@app.command()
def init(
    folder: Annotated[Path, typer.Argument(
        metavar="[DIR]", help="Where to write (default: here); created if missing.")] = Path("."),
    sandbox_port: Annotated[int, typer.Option(
        min=1, max=65535,
        help="The port `tidings sandbox` will listen on, written into the settings.")] = 8025,
    as_json: JsonOpt = False,
) -> None:
    """Start a project: a commented tidings.toml (SQLite, email and SMS on the sandbox, one
    campaign), a sample customer database and templates; then prints what to run next."""
    from tidings import scaffold

    try:
        starter = scaffold.write_starter(folder, sandbox_port=sandbox_port)
    except TidingsError as exc:
        _fail(str(exc))
    except OSError as exc:  # a file where the folder should be, a path that cannot be made
        _fail(f"cannot write {folder}: {exc.strerror or exc}")
    if as_json:
        _emit(True, {"folder": str(starter.folder.resolve()),
                     "files": [str(f) for f in starter.files],
                     "commands": list(starter.commands)})
        return
    typer.echo(scaffold.describe(starter, cwd=Path.cwd()))


@db_app.command("migrate")
def db_migrate(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Create or upgrade the schema to this version of tidings."""
    from tidings.clock import SystemClock
    from tidings.runtime import open_store

    async def work() -> dict[str, Any]:
        settings = _settings(config, store)
        st, transport = await open_store(settings.store)
        try:
            applied = await st.migrate(now=SystemClock(settings.clock_offset_s).now())
            return {"store": settings.store, "applied": applied,
                    "version": await st.schema_version()}
        finally:
            await transport.close()
            await st.close()
    result = _run(work)
    _emit(as_json, result, textout.migrated(result["store"], result["applied"],
                                            result["version"]))


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
        from tidings.operations import switch_admission

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

    from tidings.keys import check_text

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
    from tidings import holds

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
    from tidings import holds

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
    from tidings import bulk, holds
    from tidings.durations import parse_duration, parse_until

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


@app.command()
def worker(
    channel: Annotated[str, typer.Option(help="The channel to serve (one per worker).")],
    config: ConfigOpt = None, store: StoreOpt = None,
    processes: Annotated[int, typer.Option(min=1, help="Worker processes to run.")] = 1,
    reconcile: Annotated[bool, typer.Option(help="Run the reconciler periodically too.")] = True,
) -> None:
    """Deliver one channel's messages until SIGTERM (work in hand is finished or released).

    With --processes N the command supervises N worker processes: one that dies is
    started again (with a growing pause if it keeps dying), and SIGTERM is passed on
    to all of them.
    """
    if processes == 1:
        _serve_worker(config, store, channel, reconcile)
        return
    from tidings.supervisor import Supervisor

    supervisor = Supervisor(processes, _serve_worker, (config, store, channel, reconcile),
                            name=f"tidings-worker-{channel}")
    raise typer.Exit(supervisor.run())


def _serve_worker(config: Path | None, store: str | None, channel: str, reconcile: bool) -> None:
    from tidings.service import serve_worker

    # A --processes child starts here, not in the callback: set its logs up again.
    logs.configure_logging(*logs.from_env(os.environ))

    # The processes that own the database create a new one's schema on first use.
    _with_runtime(config, store, lambda rt: serve_worker(rt, channel, reconcile=reconcile),
                  migrate="new", channel=channel)


@app.command()
def scheduler(config: ConfigOpt = None, store: StoreOpt = None,
              once: Annotated[bool, typer.Option(help="Run one bounded pass and exit.")] = False
              ) -> None:
    """Admit due campaign occurrences and publish due intents, pass after pass."""
    from tidings.service import serve_scheduler

    _with_runtime(config, store, lambda rt: serve_scheduler(rt, once=once), migrate="new")


@app.command()
def reconcile(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One reconciler sweep: expired leases, stuck publishes, lost messages, uncertain sends."""
    from tidings.scheduler import Switches

    async def go(runtime: Runtime) -> dict[str, Any]:
        switches = Switches.of(await runtime.store.switch_all())
        result = await runtime.reconciler().run_pass(
            now=runtime.clock.now(), paused_channels=switches.paused_channels())
        return dict(result.__dict__)
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.reconciled(result))


@retention_app.command("run")
def retention_run(
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Count what would be pruned; prune nothing.")] = False,
        config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One bounded prune now (the reconciler runs one every retention.every_s)."""
    from tidings.retention import prune

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
    from tidings.durations import parse_duration
    from tidings.scheduler import MAX_REPLAY_LIFETIME_S

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


@app.command()
def cancel(key: str, config: ConfigOpt = None, store: StoreOpt = None,
           as_json: JsonOpt = False) -> None:
    """Cancel an intent (or every channel of a notify key) before its send starts.

    Exit code 1 when it was too late for every one of them (sent, or finished), so a
    script can tell."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        return {k: (v.value if v else None) for k, v in (await runtime.cancel(key)).items()}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.cancelled(result))
    if result and not any(state in ("cancelled", "claimed") for state in result.values()):
        raise typer.Exit(1)


@app.command()
def inspect(
    key: Annotated[str | None, typer.Argument(help="An intent key or a notify key.")] = None,
    recipient: Annotated[str | None, typer.Option(
        help="A recipient id, or its surrogate (r_…) as logged, instead of KEY.")] = None,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Was it selected, enqueued, accepted: a delivery's ledger row and timeline."""
    from tidings import operations
    from tidings.readmodel import Delivery, as_dict

    if (key is None) == (recipient is None):
        raise typer.BadParameter("give KEY or --recipient (one of them)", param_hint="KEY")

    async def go(runtime: Runtime) -> list[Delivery]:
        found = await operations.timeline(runtime.store, key=key, recipient=recipient,
                                          channels=runtime.channels)
        if not found:
            if key is not None:
                raise typer.BadParameter(f"no intent has key {key!r}", param_hint="KEY")
            raise typer.BadParameter(f"no delivery found for {recipient!r}",
                                     param_hint="--recipient")
        return found
    deliveries = _with_runtime(config, store, go)
    if as_json:
        _emit(True, {"deliveries": [as_dict(d) for d in deliveries]})
        return
    out = _stdout()
    for delivery in deliveries:
        lines, events = textout.inspected(delivery)
        out.print("\n".join(lines), soft_wrap=True, highlight=False, markup=False)
        out.print(events)


@app.command()
def status(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Backlog, age, rate, 429s, retries, dead letters, duplicates and SLI per channel and
    campaign (the same numbers as GET /v1/status)."""
    from tidings import operations
    from tidings.readmodel import Status, as_dict

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
            retention=runtime.retention())
    result = _with_runtime(config, store, go)
    if as_json:
        _emit(True, as_dict(result))
        return
    out = _stdout()
    out.print(textout.ledger(result.ledger), markup=False, highlight=False, soft_wrap=True)
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


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


@app.command()
def plan(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
         campaign: Annotated[str | None, typer.Option(
             help="Forecast this campaign's drain before it is enabled (tidings.capacity) "
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

    from tidings import operations
    from tidings.readmodel import Plan, as_dict

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

    from tidings import operations

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


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


@app.command("api")
def api_command(
    config: ConfigOpt = None, store: StoreOpt = None,
    host: Annotated[str | None, typer.Option(help="Address (default: api.host).")] = None,
    port: Annotated[int | None, typer.Option(
        min=0, max=65535, help="Port (default: api.port; 0 picks a free one).")] = None,
    processes: Annotated[int, typer.Option(
        min=0, help="API processes sharing the port (0: one per CPU core).")] = 1,
) -> None:
    """Serve the HTTP API: cron trigger, queue publish, operator endpoints, /metrics.

    With --processes N the command supervises N API processes, each with its own
    runtime, all listening on the same port (SO_REUSEPORT: the kernel spreads the
    connections); one that dies is started again, and SIGTERM is passed on to all.
    """
    if processes == 1:
        _serve_api(config, store, host, port, False)
        return
    from tidings.api.serve import shared_socket
    from tidings.supervisor import Supervisor

    s = _settings(config, store).api
    host = host or s.host
    # Hold the port (bound, never listening, so it takes no connection) while the
    # children bind theirs: port 0 becomes one free port for all of them.
    try:
        holder = shared_socket(host, s.port if port is None else port)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{s.port if port is None else port}: "
              f"{exc.strerror or exc}")
    count = processes or os.cpu_count() or 1
    supervisor = Supervisor(count, _serve_api,
                            (config, store, host, holder.getsockname()[1], True),
                            name="tidings-api")
    try:
        raise typer.Exit(supervisor.run())
    finally:
        holder.close()


def _serve_api(config: Path | None, store: str | None, host: str | None, port: int | None,
               reuse_port: bool) -> None:
    from tidings.api.serve import serve_api, use_uvloop

    if reuse_port:  # a --processes child starts here: set its logs up again
        logs.configure_logging(*logs.from_env(os.environ))
    use_uvloop()

    def go(runtime: Runtime) -> Awaitable[None]:
        s = runtime.settings.api
        return serve_api(runtime, host=host or s.host, port=s.port if port is None else port,
                         reuse_port=reuse_port)
    _with_runtime(config, store, go, migrate="new")


# ---------------------------------------------------------------- tokens


@token_app.command("create")
def token_create(
    scope: Annotated[list[str], typer.Option(
        "--scope", help="viewer, operator, trigger or publish (repeat, or comma-separate).")],
    name: Annotated[str, typer.Option(help="Who or what holds it, for the record.")] = "token",
    expires_in: Annotated[str | None, typer.Option(
        "--expires-in", metavar="DURATION",
        help="Refuse it after this long: 90s, 15m, 12h, 30d (at most 36500d). "
             "Default: never.")] = None,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create a token. It is shown once: only its hash is stored."""
    from tidings.api.tokens import check_lifetime, new_token
    from tidings.durations import parse_duration

    try:
        lifetime = (None if expires_in is None
                    else check_lifetime(parse_duration(expires_in, "expires_in")))
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message, param_hint="--expires-in") from None

    async def go(runtime: Runtime) -> dict[str, Any]:
        text, row = new_token(name=name, scopes=scope, now=runtime.clock.now(),
                              expires_in_s=lifetime)
        await runtime.store.api_token_insert(row)
        return {"id": row.id, "name": row.name, "scopes": list(row.scopes), "token": text,
                "created_at": row.created_at, "expires_at": row.expires_at}
    result = _with_runtime(config, store, go)
    if as_json:
        _emit(True, result)
        return
    until = f", expires {_when(result['expires_at'])}" if result["expires_at"] else ""
    _stderr().print(f"token {result['id']} ({', '.join(result['scopes'])}) for {result['name']}"
                  f"{until}; shown once, store it now:")
    typer.echo(result["token"])


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(
                     metavar="ID", help="The token's id (the part after tid_), or the token.")],
                 config: ConfigOpt = None, store: StoreOpt = None,
                 as_json: JsonOpt = False) -> None:
    """Revoke a token at once, on every API process."""
    ident = token_id.split("_")[1] if token_id.startswith("tid_") else token_id

    async def go(runtime: Runtime) -> dict[str, Any]:
        now = runtime.clock.now()
        row = await runtime.store.api_token_revoke(ident, now=now)
        if row is None:
            raise typer.BadParameter(f"no token has id {ident!r}", param_hint="ID")
        return _token_row(row, now)
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.revoked(result))


@token_app.command("list")
def token_list(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False
               ) -> None:
    """Every token: id, name, scopes, created, expires, revoked (never the secret)."""
    async def go(runtime: Runtime) -> list[dict[str, Any]]:
        now = runtime.clock.now()
        return [_token_row(row, now) for row in await runtime.store.api_token_list()]
    rows = _with_runtime(config, store, go)
    table = textout.table("id", "name", "scopes", "created", "expires", "revoked",
                          title="API tokens")
    for r in rows:
        expires = _when(r["expires_at"]) + (" (expired)" if r["expired"] else "")
        table.add_row(r["id"], r["name"], ", ".join(r["scopes"]), _when(r["created_at"]),
                      expires or "never", _when(r["revoked_at"]))
    _emit(as_json, {"tokens": rows}, table)


def _token_row(row: Any, now: float) -> dict[str, Any]:
    from tidings.api.tokens import expired

    return {"id": row.id, "name": row.name, "scopes": list(row.scopes),
            "created_at": row.created_at, "expires_at": row.expires_at,
            "expired": expired(row, now), "revoked_at": row.revoked_at,
            "revoked": row.revoked_at is not None}


def _when(at: float | None) -> str:
    return textout.when(at)  # local ISO 8601, as inspect shows times


# ---------------------------------------------------------------- dead letters

DlqChannelOpt = Annotated[str, typer.Option("--channel", help="The channel's queue.")]


def _known_channel(runtime: Runtime, channel: str) -> None:
    if channel not in runtime.limits:
        raise typer.BadParameter(unknown_name("channel", channel, runtime.channels),
                                 param_hint="--channel")


def _preference_table(rows: list[dict[str, Any]]) -> Table:
    table = textout.table("recipient", "channel", "opted out", "quiet hours", "time zone")
    for r in rows:
        quiet = f"{r['quiet_start']}-{r['quiet_end']}" if r["quiet_start"] else "-"
        table.add_row(r["recipient_id"], r["channel"], _yes_no(r["opted_out"]), quiet,
                      r["timezone"])
    return table


@preference_app.command("set")
def preference_set(
    recipient: Annotated[str, typer.Argument(help="The recipient id.")],
    channel: Annotated[str, typer.Argument(help="The channel.")],
    opt_out: Annotated[bool, typer.Option("--opt-out/--opt-in",
                                          help="Send nothing on this channel.")] = False,
    quiet: Annotated[str | None, typer.Option(
        help="Quiet hours as HH:MM-HH:MM in --timezone, e.g. 22:00-07:00.")] = None,
    timezone: Annotated[str, typer.Option(help="IANA zone of the quiet hours.")] = "UTC",
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Store a recipient's wishes for a channel (replacing what was stored)."""
    from dataclasses import asdict

    start, sep, end = (quiet or "").partition("-")
    if quiet is not None and not sep:
        _error("--quiet: expected HH:MM-HH:MM, e.g. 22:00-07:00")
        raise typer.Exit(2)

    async def go(runtime: Runtime) -> dict[str, Any]:
        stored = await runtime.set_preference(
            recipient, channel, opted_out=opt_out, quiet_start=start or None,
            quiet_end=end or None, timezone=timezone)
        return asdict(stored)
    row = _with_runtime(config, store, go)
    _emit(as_json, row, _preference_table([row]))


@preference_app.command("delete")
def preference_delete(recipient: Annotated[str, typer.Argument(help="The recipient id.")],
                      channel: Annotated[str, typer.Argument(help="The channel.")],
                      config: ConfigOpt = None, store: StoreOpt = None,
                      as_json: JsonOpt = False) -> None:
    """Forget a recipient's wishes for a channel."""
    async def go(runtime: Runtime) -> bool:
        return await runtime.delete_preference(recipient, channel)
    deleted = _with_runtime(config, store, go)
    _emit(as_json, {"recipient_id": recipient, "channel": channel, "deleted": deleted},
          f"{'deleted' if deleted else 'there were no'} preferences of {recipient!r} on "
          f"{channel}")


@preference_app.command("show")
def preference_show(recipient: Annotated[str, typer.Argument(help="The recipient id.")],
                    config: ConfigOpt = None, store: StoreOpt = None,
                    as_json: JsonOpt = False) -> None:
    """A recipient's stored wishes, per channel."""
    from dataclasses import asdict

    async def go(runtime: Runtime) -> list[dict[str, Any]]:
        return [asdict(p) for p in await runtime.preferences(recipient)]
    rows = _with_runtime(config, store, go)
    _emit(as_json, {"recipient_id": recipient, "preferences": rows}, _preference_table(rows))


@dlq_app.command("list")
def dlq_list(channel: DlqChannelOpt,
             limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
             config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """A channel's dead letters, oldest first, with their intents' states."""
    from tidings import operations
    from tidings.readmodel import DeadLetterRow, as_dict

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

    from tidings import operations

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


uncertain_app = typer.Typer(
    help="Uncertain sends (the answer was lost): list them, and settle held ones by an "
         "audited decision.", no_args_is_help=True)
app.add_typer(uncertain_app, name="uncertain")
UncertainChannelOpt = Annotated[str | None, typer.Option(
    "--channel", help="Only this channel's intents.")]
OlderThanOpt = Annotated[str | None, typer.Option(
    "--older-than", help="Only intents unsettled at least this long: 90, 90s, 15m, 2h, 1d.")]


def _uncertain_table(rows: Mapping[str, UncertainSends]) -> Table:
    from rich.table import Table

    table = Table("channel", "policy", "hold (s)", "uncertain", "held", "awaiting operator",
                  title="uncertain sends")
    for name, u in rows.items():
        table.add_row(name, u.policy.mode.value + (" (set)" if u.policy.chosen else ""),
                      _num(u.policy.hold_s), str(u.uncertain), str(u.held),
                      str(u.awaiting_operator))
    return table


@uncertain_app.command("list")
def uncertain_list(channel: UncertainChannelOpt = None, older_than: OlderThanOpt = None,
                   limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
                   config: ConfigOpt = None, store: StoreOpt = None,
                   as_json: JsonOpt = False) -> None:
    """Uncertain and held intents, oldest first, each with its channel's policy and
    whether it awaits an operator's decision."""
    from tidings import operations
    from tidings.readmodel import UncertainRow, to_json
    from tidings.uncertain import parse_age

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

    from tidings import operations
    from tidings.uncertain import parse_age

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


@app.command()
def sandbox(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port (0 picks a free one).")] = 8025,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Sandbox fault and quota settings (JSON).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for injected faults.")] = 0,
    dialect: Annotated[list[str] | None, typer.Option(
        "--dialect", help="Also speak this provider's API: postmark, sendgrid, twilio "
                          "(repeat for several).")] = None,
    postmark_webhook: Annotated[str | None, typer.Option(
        help="With --dialect postmark: post Delivery records here "
             "(http://user:pass@host/v1/webhooks/postmark).")] = None,
    twilio_auth_token_env: Annotated[str | None, typer.Option(
        help="With --dialect twilio: the variable holding the auth token that signs "
             "status callbacks (none: no callbacks).")] = None,
    sendgrid_webhook: Annotated[str | None, typer.Option(
        help="With --dialect sendgrid: post signed event batches here.")] = None,
    sendgrid_signing_key_env: Annotated[str | None, typer.Option(
        help="With --sendgrid-webhook: the variable holding the ECDSA P-256 private key "
             "(PEM) that signs them.")] = None,
    clock_offset: Annotated[float, typer.Option(
        help="Seconds added to the clock (a simulated time, as tidings' clock_offset_s).")
    ] = 0.0,
) -> None:
    """Run the sandbox provider: an HTTP email/SMS provider that fails like real ones."""
    from tidings.sandbox.dialects import DIALECTS, DialectSettings, signing_key_from
    from tidings.sandbox.server import main_sandbox

    for name in dialect or ():
        if name not in DIALECTS:
            raise typer.BadParameter(f"{name!r}: one of {', '.join(DIALECTS)}",
                                     param_hint="--dialect")
    token = os.environ.get(twilio_auth_token_env) if twilio_auth_token_env else None
    if twilio_auth_token_env and not token:
        raise typer.BadParameter(f"environment variable {twilio_auth_token_env} is not set",
                                 param_hint="--twilio-auth-token-env")
    signing_key = None
    if sendgrid_signing_key_env:
        try:
            signing_key = signing_key_from(os.environ.get(sendgrid_signing_key_env, ""))
        except ValueError as exc:
            raise typer.BadParameter(f"{sendgrid_signing_key_env}: {exc}",
                                     param_hint="--sendgrid-signing-key-env") from None
    try:
        main_sandbox(host, port, str(config) if config else None, seed,
                     dialects=DialectSettings(dialects=tuple(dialect or ()),
                                              postmark_webhook=postmark_webhook,
                                              twilio_auth_token=token,
                                              sendgrid_webhook=sendgrid_webhook,
                                              sendgrid_signing_key=signing_key),
                     clock_offset_s=clock_offset)
    except TidingsError as exc:  # its settings file
        _fail(str(exc))
    except OSError as exc:  # the address: in use, not this host's, no such name
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


@app.command()
def demo(
    recipients: Annotated[int, typer.Option(min=100, help="Customers to seed.")] = 80_000,
    db: Annotated[Path | None, typer.Option(help="SQLite file (a temp dir by default).")] = None,
    store: Annotated[str | None, typer.Option(
        "--store", metavar="postgresql://USER@HOST:PORT/DB",
        help="Run on this PostgreSQL database instead of SQLite. It must hold no tidings "
             "tables: one that does not exist is created; one with an 'intents' table is "
             "refused unless --reset is given.")] = None,
    reset: Annotated[bool, typer.Option(
        "--reset", help="With --store: drop the database's tidings tables first (all their "
                        "data is lost); the demo then migrates a fresh schema.")] = False,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the work folder (database, settings, logs, sandbox counts); "
                       "it is removed at the end otherwise. --db always keeps its folder.")
    ] = False,
    as_json: JsonOpt = False,
    seed: Annotated[int, typer.Option(help="Seed for data and faults.")] = 7,
    real_providers: Annotated[bool, typer.Option(
        "--real-providers", help="Email through the Postmark adapter and SMS through the "
        "Twilio adapter, against the sandbox speaking their dialects (lost responses on, "
        "dedupe off), webhooks to tidings api.")] = False,
    transport: Annotated[str, typer.Option(
        "--transport", metavar="sql|redis://HOST:PORT/DB|amqp://USER:PASS@HOST/VHOST",
        help="Where the channel queues live: the store's own queue table (sql), or a "
             "broker (the outbox relay publishes to it). On a broker the demo's keys or "
             "queues get a prefix of their own, removed at the end.")] = "sql",
) -> None:
    """Run the whole pipeline against the sandbox with faults on, then report.

    The store is a fresh SQLite file, or with --store a PostgreSQL database.
    """
    from tidings.demo.run import DemoStoreError, run_demo
    from tidings.transports.open import transport_kind

    try:
        transport_kind(transport)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--transport") from None

    if store is not None:
        if db is not None:
            raise typer.BadParameter("give --db (SQLite) or --store (PostgreSQL), not both",
                                     param_hint="--store")
        if not store.startswith(("postgresql://", "postgres://")):
            raise typer.BadParameter("must be a postgresql://user@host:port/db URL (for "
                                     "SQLite, use --db)", param_hint="--store")
    elif reset:
        raise typer.BadParameter("--reset only applies with --store", param_hint="--reset")
    try:
        report = run_demo(recipients=recipients, db=db, seed=seed, as_json=as_json,
                          store=store, reset=reset, keep=keep, real_providers=real_providers,
                          transport=transport)
    except (DemoStoreError, TidingsError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report))
    if not report.get("ok"):
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
