"""The Typer app and what every command of ``tidings.cli`` shares.

The app object and its sub-command groups (created here, in the order ``tidings --help``
lists them), the options most commands take (``ConfigOpt``, ``StoreOpt``, ``JsonOpt``),
the global logging options, and the helpers that turn a command into work and its result
into output: ``_settings``, ``_with_runtime`` and ``_run`` (a ``TidingsError`` becomes
``error: ...`` and exit code 2), ``_fail``, ``_emit`` and the consoles. The command
modules import from here; this module imports none of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Awaitable, Callable
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeVar

import typer

from tidings.cli import textout
from tidings.config.settings import Settings, find_settings_file
from tidings.core import logs
from tidings.core.errors import SchemaOutOfDate, TidingsError
from tidings.processes.commands import run_on
from tidings.runtime import Runtime, check_settings

if TYPE_CHECKING:
    # rich is imported by the commands that print, not with the CLI: every worker
    # process starts here and prints nothing but its logs.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

T = TypeVar("T")

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
suppression_app = typer.Typer(
    help="The suppression list: addresses no send may go to (hard bounces, complaints, STOP "
         "replies, operators' entries); a send to one ends suppressed, unsent. List, add, "
         "remove (audited), import and export as CSV.", no_args_is_help=True)
app.add_typer(suppression_app, name="suppression")
bulk_app = typer.Typer(
    help="Bulk actions over a selection (campaign, occurrence, channel, state, age): delay, "
         "cancel, dead-letter, reopen (dead ones back). Never a purge: every intent stays "
         "in the ledger. --dry-run counts first.", no_args_is_help=True)
app.add_typer(bulk_app, name="bulk")
uncertain_app = typer.Typer(
    help="Uncertain sends (the answer was lost): list them, and settle held ones by an "
         "audited decision.", no_args_is_help=True)
app.add_typer(uncertain_app, name="uncertain")


@cache
def _stderr() -> Console:
    return _console(stderr=True)


@cache
def _stdout() -> Console:
    return _console(stderr=False)


#: The width of a console whose stream is a file or a pipe, with no COLUMNS to say
#: otherwise: lines as long as they are. Left to itself rich takes another stream's
#: terminal, or 80 columns, and folds an inspect's events into columns two characters
#: wide, which nobody reads and no grep finds.
UNBOUNDED_WIDTH = 10_000


def _console(*, stderr: bool) -> Console:
    # Keys, reasons and paths are printed as they are: "[/]" in a key is no markup (it
    # failed the printing), ":email:" in a notify key no emoji. Styles go in as Text.
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if _has_width(stream) else UNBOUNDED_WIDTH
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False, width=width)


def _has_width(stream: object) -> bool:
    """A terminal has a width, and so has any stream when COLUMNS is set; a file or a
    pipe has none."""
    if os.environ.get("COLUMNS", "").strip().isdigit():
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # closed, or detached
        return False


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
    check_settings(settings)
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
        # Services ride out a broker outage however long it lasts (saying so in the
        # log), as they do a store's; a command someone waits on says so soon.
        return await run_on(_settings(config, store), fn, migrate=migrate, channel=channel)
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


def _when(at: float | None) -> str:
    return textout.when(at)  # local ISO 8601, as inspect shows times


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"
