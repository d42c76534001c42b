"""``tidings demo``: the whole pipeline against the sandbox with faults on, then a
report (the work is ``tidings.demo.run``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tidings.cli.common import JsonOpt, app
from tidings.core.errors import TidingsError


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
    batch: Annotated[bool, typer.Option(
        "--batch", help="With the real providers (implied): email through Postmark's "
        "batch endpoint, 100 messages a request, each with its own outcome; the report "
        "says how many requests carried them.")] = False,
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
                          transport=transport, batch=batch)
    except (DemoStoreError, TidingsError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report))
    if not report.get("ok"):
        raise typer.Exit(1)
