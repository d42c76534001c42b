"""The suppression list: ``tidings suppression list|add|remove|import|export``.

Addresses no send may go to (a hard bounce, a complaint, a STOP reply, an operator's
entry): every send to one ends ``suppressed`` with no provider call. The work is
``tidings.operate.suppression``'s; this module parses and prints. Adding and removing
are audit events naming ``--by``; ``history`` shows them.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import (
    ConfigOpt,
    JsonOpt,
    StoreOpt,
    _emit,
    _fail,
    _when,
    _with_runtime,
    suppression_app,
)
from tidings.operate import suppression
from tidings.runtime import Runtime

if TYPE_CHECKING:
    from rich.table import Table

KindArg = Annotated[str, typer.Argument(help="The channel kind: email or sms.")]
AddressArg = Annotated[str, typer.Argument(
    help="The address (an email address or an E.164 phone number); it is normalised "
         "(lower-cased; spaces and dashes out of a number) before anything is looked up.")]
ByOpt = Annotated[str | None, typer.Option(
    "--by", help="Who does it, for the audit trail (default: the OS user).")]
NoteOpt = Annotated[str | None, typer.Option(help="Why, for the audit trail.")]
KindOpt = Annotated[str | None, typer.Option("--kind", help="Only this kind: email or sms.")]
ReasonOpt = Annotated[str | None, typer.Option(
    "--reason", help="Only this reason: hard_bounce, complaint, soft_bounces, sms_stop, "
                     "unsubscribe or manual.")]


def _by(by: str | None) -> str:
    import getpass

    from tidings.core.keys import check_text

    if by is not None:
        return check_text(by, "by")
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"


def _row(found: Any) -> dict[str, Any]:
    row = asdict(found)
    row["reason"] = found.reason.value
    return row


def _table(rows: list[dict[str, Any]]) -> Table:
    # An address is kept on one line, to be copied whole into the next command.
    table = textout.table("address", "kind", "reason", "since", "source", "detail",
                          whole=("address", "reason", "since"))
    for r in rows:
        table.add_row(r["address"], r["kind"], r["reason"], _when(r["created_at"]),
                      r["source"], r["detail"] or "-")
    return table


@suppression_app.command("list")
def suppression_list(
    kind: KindOpt = None, reason: ReasonOpt = None,
    after: Annotated[str | None, typer.Option(
        help="Start after this address (the last one of the page before; any "
             "spelling of it).")] = None,
    limit: Annotated[int, typer.Option(help="Rows per page (at most 1000).")] = 100,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """A page of suppressed addresses, in address order."""
    async def go(runtime: Runtime) -> list[dict[str, Any]]:
        start = None
        if after is not None:  # in the form it is listed under, past every kind of it
            from tidings.core.addresses import normalize_address

            start = (normalize_address(kind or ("email" if "@" in after else "sms"), after),
                     "~")
        page = await suppression.listing(runtime.store, kind=kind, reason=reason,
                                         after=start, limit=limit)
        return [_row(s) for s in page]
    rows = _with_runtime(config, store, go)
    _emit(as_json, {"suppressions": rows}, _table(rows) if rows else "nothing is suppressed")


@suppression_app.command("add")
def suppression_add(
    kind: KindArg, address: AddressArg,
    reason: Annotated[str, typer.Option(
        help="manual (the default), unsubscribe, hard_bounce, complaint, sms_stop.")] = "manual",
    note: NoteOpt = None, by: ByOpt = None,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Suppress an address: no send to it goes out from now on (audited)."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        who = _by(by)
        item = suppression.entry(address, kind, reason=reason, note=note)
        added = await suppression.add(runtime.store, item, by=who, now=runtime.clock.now())
        return {"address": item.address, "kind": kind, "added": added is not None, "by": who}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, f"{result['address']} ({kind}) "
          + ("suppressed" if result["added"] else "was suppressed already")
          + f" (by {result['by']})")


@suppression_app.command("remove")
def suppression_remove(
    kind: KindArg, address: AddressArg, note: NoteOpt = None, by: ByOpt = None,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Take an address off the list: sends to it go out again (audited)."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        who = _by(by)
        removed = await suppression.remove(runtime.store, address=address, kind=kind, by=who,
                                           now=runtime.clock.now(), note=note)
        return {"kind": kind, "removed": None if removed is None else _row(removed),
                "by": who}
    result = _with_runtime(config, store, go)
    removed = result["removed"]
    _emit(as_json, result, (f"{removed['address']} ({kind}) taken off the list (it was "
                            f"{removed['reason']})" if removed else
                            f"{address} ({kind}) was not suppressed") + f" (by {result['by']})")


@suppression_app.command("history")
def suppression_history(
    kind: KindArg, address: AddressArg,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Whether an address is suppressed, and who added and removed it, when and why."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        found = await suppression.history(runtime.store, address=address, kind=kind)
        return {"address": found.address, "kind": found.kind,
                "entry": None if found.entry is None else _row(found.entry),
                "events": [{"type": e.type, "at": e.at, "by": e.worker, "detail": e.detail}
                           for e in found.events]}
    result = _with_runtime(config, store, go)
    entry = result["entry"]
    now = (f"{result['address']} ({kind}) is suppressed: {entry['reason']} since "
           f"{_when(entry['created_at'])}, from {entry['source']}" if entry else
           f"{result['address']} ({kind}) is not suppressed")
    if not result["events"]:
        _emit(as_json, result, now + "; no operator has added or removed it")
        return
    table = textout.table("when", "what", "by", "why", whole=("when",))
    for e in result["events"]:
        table.add_row(_when(e["at"]), e["type"].removeprefix("suppression_"), e["by"] or "-",
                      e["detail"] or "-")
    if as_json:
        _emit(True, result)
    else:
        typer.echo(now)
        _emit(False, result, table)


@suppression_app.command("import")
def suppression_import(
    file: Annotated[Path, typer.Argument(
        help="A CSV file with a header row: address,kind and optionally reason,note "
             "(an export imports as it is); '-' reads standard input.")],
    by: ByOpt = None, config: ConfigOpt = None, store: StoreOpt = None,
    as_json: JsonOpt = False) -> None:
    """Suppress every address of a CSV file: every row is checked before any is stored
    (one bad row refuses the file, naming its line and column, and stores nothing), and
    addresses already suppressed keep their first reason."""
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{file}: {exc}")

    async def go(runtime: Runtime) -> dict[str, Any]:
        entries = suppression.read_csv(text)
        done = await suppression.import_entries(runtime.store, entries, by=_by(by),
                                                now=runtime.clock.now())
        return asdict(done)
    result = _with_runtime(config, store, go)
    _emit(as_json, result, f"{result['added']} addresses suppressed, {result['already']} "
                           f"were already, of {result['rows']} rows")


@suppression_app.command("export")
def suppression_export(
    kind: KindOpt = None, reason: ReasonOpt = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to this file (default: standard output).")] = None,
    config: ConfigOpt = None, store: StoreOpt = None) -> None:
    """The whole list as CSV (address, kind, reason, source, created_at, key, detail),
    read a page at a time."""
    async def go(runtime: Runtime) -> int:
        rows = 0
        out = output.open("w", encoding="utf-8", newline="") if output else sys.stdout
        try:
            async for line in suppression.export_csv(runtime.store, kind=kind, reason=reason):
                out.write(line)
                rows += 1
        finally:
            if output:
                out.close()
        return rows - 1
    _with_runtime(config, store, go)
