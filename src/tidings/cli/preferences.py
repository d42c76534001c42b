"""Recipient preferences: ``tidings preference set|delete|show``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import (
    ConfigOpt,
    JsonOpt,
    StoreOpt,
    _emit,
    _error,
    _with_runtime,
    _yes_no,
    preference_app,
)
from tidings.runtime import Runtime

if TYPE_CHECKING:
    from rich.table import Table


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
