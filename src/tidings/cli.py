"""The ``tidings`` command line. It parses and calls; the work lives elsewhere."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tidings.errors import TidingsError
from tidings.runtime import Runtime, build_runtime
from tidings.settings import Settings

T = TypeVar("T")

app = typer.Typer(
    help="tidings: scheduled, multi-channel notifications with exactly one business delivery "
         "per intent.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
admission_app = typer.Typer(
    help="Admission switches: stop or restart new admission for a campaign or a channel "
         "without touching work already accepted.", no_args_is_help=True)
app.add_typer(admission_app, name="admission")
console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", "-c", help="Settings file (TOML). TIDINGS_STORE overrides its store URL.",
    envvar="TIDINGS_CONFIG")]
StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="Store URL, e.g. sqlite:///tidings.db (overrides the settings file).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _settings(config: Path | None, store: str | None) -> Settings:
    settings = Settings.load(config)
    if store:
        settings = Settings.parse({**settings.model_dump(), "store": store})
    return settings


def _run(work: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except TidingsError as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None


def _with_runtime(config: Path | None, store: str | None, fn: Callable[[Runtime], Awaitable[T]],
                  *, migrate: bool = False) -> T:
    async def work() -> T:
        runtime = await build_runtime(_settings(config, store), migrate=migrate)
        async with runtime:
            return await fn(runtime)
    return _run(work)


def _emit(as_json: bool, data: Any, table: Table | None = None) -> None:
    if as_json or table is None:
        typer.echo(json.dumps(data, indent=None if as_json else 2, default=str))
    else:
        Console().print(table)


@app.callback()
def _main(log_level: Annotated[str, typer.Option(help="Logging level.")] = "WARNING") -> None:
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


@db_app.command("migrate")
def db_migrate(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Create or upgrade the schema to this version of tidings."""
    from tidings.runtime import open_store

    async def work() -> dict[str, Any]:
        settings = _settings(config, store)
        st, transport = await open_store(settings.store)
        try:
            applied = await st.migrate()
            return {"store": settings.store, "applied": applied,
                    "version": await st.schema_version()}
        finally:
            await transport.close()
            await st.close()
    _emit(as_json, _run(work))


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
            raise typer.BadParameter(f"unknown {scope} {name!r}; declared: "
                                     f"{', '.join(sorted(known)) or 'none'}")
        switch = await runtime.store.switch_set(scope=scope, name=name, paused=paused,
                                                now=runtime.clock.now(), reason=reason)
        return dict(switch.__dict__)
    _emit(as_json, _with_runtime(config, store, go))


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

    _with_runtime(config, store, lambda rt: serve_worker(rt, channel, reconcile=reconcile))


@app.command()
def scheduler(config: ConfigOpt = None, store: StoreOpt = None,
              once: Annotated[bool, typer.Option(help="Run one bounded pass and exit.")] = False
              ) -> None:
    """Admit due campaign occurrences and publish due intents, pass after pass."""
    from tidings.service import serve_scheduler

    _with_runtime(config, store, lambda rt: serve_scheduler(rt, once=once))


@app.command()
def reconcile(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One reconciler sweep: expired leases, stuck publishes, lost messages, uncertain sends."""
    from tidings.scheduler import Switches

    async def go(runtime: Runtime) -> dict[str, Any]:
        switches = Switches.of(await runtime.store.switch_all())
        result = await runtime.reconciler().run_pass(
            now=runtime.clock.now(), paused_channels=switches.paused_channels())
        return dict(result.__dict__)
    _emit(as_json, _with_runtime(config, store, go))


@app.command()
def replay(campaign: str, date: Annotated[str, typer.Argument(help="Logical date, YYYY-MM-DD.")],
           config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Admit a missed date of a campaign explicitly, as its own replay admission."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        result = await runtime.scheduler().replay(campaign, date, now=runtime.clock.now())
        return {"campaign": campaign, "date": date, "members": result.members,
                "admitted": result.admitted, "skipped": result.skipped,
                "published": result.published}
    _emit(as_json, _with_runtime(config, store, go))


@app.command()
def cancel(key: str, config: ConfigOpt = None, store: StoreOpt = None,
           as_json: JsonOpt = False) -> None:
    """Cancel an intent (or every channel of a notify key) before its send starts."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        return {k: (v.value if v else None) for k, v in (await runtime.cancel(key)).items()}
    _emit(as_json, _with_runtime(config, store, go))


@app.command()
def inspect(key: str, config: ConfigOpt = None, store: StoreOpt = None,
            as_json: JsonOpt = False) -> None:
    """Show an intent's ledger row and its timeline of events."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        intent = await runtime.store.intent_get(key)
        if intent is None:
            raise typer.BadParameter(f"no intent has key {key!r}", param_hint="KEY")
        events = await runtime.store.events_for(key)
        row = dict(intent.__dict__)
        row.pop("address", None)  # the timeline never shows the raw address
        return {"intent": row, "events": [dict(e.__dict__) for e in events]}
    result = _with_runtime(config, store, go)
    table = Table("at", "event", "state", "attempt", "worker", "detail", title=key)
    for e in result["events"]:
        table.add_row(f"{e['at']:.3f}", e["type"], e["state"] or "", str(e["attempt"] or ""),
                      e["worker"] or "", e["detail"] or "")
    _emit(as_json, result, table)


@app.command()
def status(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Intents per channel and state, queue depth, and occurrences."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        now = runtime.clock.now()
        counts = await runtime.store.intent_counts()
        queues = {ch: dict((await runtime.transport.depth(ch, now=now)).__dict__)
                  for ch in sorted(set(runtime.channels) | set(counts))}
        occurrences = [dict(o.__dict__) for o in await runtime.store.occurrence_list()]
        return {"intents": counts, "queues": queues, "occurrences": occurrences}
    result = _with_runtime(config, store, go)
    table = Table("channel", "intents by state", "ready", "delayed", "in flight", "dead",
                  "oldest age (s)", title="tidings status")
    for channel, q in result["queues"].items():
        states = ", ".join(f"{k} {v}" for k, v in sorted(result["intents"].get(channel, {})
                                                          .items()))
        table.add_row(channel, states, str(q["ready"]), str(q["delayed"]), str(q["in_flight"]),
                      str(q["dead"]), f"{q['oldest_age_s']:.1f}")
    _emit(as_json, result, table)


@app.command()
def sandbox(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 picks a free one).")] = 8025,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Sandbox fault and quota settings (JSON).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for injected faults.")] = 0,
) -> None:
    """Run the sandbox provider: an HTTP email/SMS provider that fails like real ones."""
    from tidings.sandbox.server import main_sandbox

    main_sandbox(host, port, str(config) if config else None, seed)


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
    as_json: JsonOpt = False,
    seed: Annotated[int, typer.Option(help="Seed for data and faults.")] = 7,
) -> None:
    """Run the whole pipeline against the sandbox with faults on, then report.

    The store is a fresh SQLite file, or with --store a PostgreSQL database.
    """
    from tidings.demo.run import DemoStoreError, run_demo

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
                          store=store, reset=reset)
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
