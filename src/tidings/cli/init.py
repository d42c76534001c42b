"""``tidings init``: start a project (the files are written by ``cli.scaffold``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tidings.cli.common import JsonOpt, _emit, _fail, app
from tidings.core.errors import TidingsError


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
    from tidings.cli import scaffold

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
