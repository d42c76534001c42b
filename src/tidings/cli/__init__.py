"""The ``tidings`` command line. It parses and calls; the work lives elsewhere.

This package owns the commands' arguments, options, exit codes and output, and nothing
that decides anything. Which module holds which commands:

- ``common``: the Typer ``app``, its sub-command groups, the shared options
  (``--config``, ``--store``, ``--json``, the log options) and the helpers every command
  uses. (Not ``app.py``: ``tidings.cli.app`` is the Typer object, and a module of that
  name would be hidden behind it.)
- ``init``: ``tidings init`` (the files it writes are ``scaffold``'s).
- ``control``: ``hold``, ``release``, ``admission pause|resume``, ``bulk ...``.
- ``serve``: ``worker`` and ``scheduler``, the long-running processes.
- ``recovery``: ``reconcile``, ``replay``, ``retention run``, ``dlq ...``,
  ``uncertain ...``.
- ``intents``: ``cancel`` and ``inspect``.
- ``status``: ``status`` and ``plan``.
- ``api``: ``api`` (serve the HTTP API) and ``token ...``.
- ``sandbox``: ``sandbox``; ``demo``: ``demo``.
- ``db``: ``db migrate``; ``preferences``: ``preference ...``; ``suppression``:
  ``suppression ...``.
- ``textout``: the text the commands print; ``scaffold``: the starter ``tidings init``
  writes.

A command registers on the app when its module is imported, so the imports below are in
the order ``tidings --help`` lists the commands (the groups' order is fixed in ``common``).
Command modules import from ``common``, never from here or from each other.
"""

from __future__ import annotations

# isort: off
from tidings.cli import init  # noqa: F401
from tidings.cli import control  # noqa: F401
from tidings.cli import serve  # noqa: F401
from tidings.cli import recovery  # noqa: F401
from tidings.cli import intents  # noqa: F401
from tidings.cli import status  # noqa: F401
from tidings.cli import api  # noqa: F401
from tidings.cli import sandbox  # noqa: F401
from tidings.cli import demo  # noqa: F401
from tidings.cli import db, preferences, suppression  # noqa: F401
# isort: on
import copy
import sys
from collections.abc import Sequence

import typer
from typer.main import get_command_name

from tidings.cli.common import app

__all__ = ["app", "main"]


def main() -> None:
    only_the_command(app, sys.argv[1:])()


def only_the_command(full: typer.Typer, args: Sequence[str]) -> typer.Typer:
    """``full`` with only the command or group ``args`` name first, when they name one.

    Typer turns every command's signature into click options before it runs any: a
    sixth of a ``tidings`` process's start, spent on the forty commands it does not
    run. The global options and the command itself are kept whole, so what it parses,
    prints and answers is the same; anything else (``--help`` alone, a name that is no
    command, a global option first) gets the whole app, and with it click's usage and
    suggestions."""
    name = args[0] if args and not args[0].startswith("-") else None
    commands = [c for c in full.registered_commands
                if name in (c.name, get_command_name(getattr(c.callback, "__name__", "")))]
    groups = [g for g in full.registered_groups if g.name == name]
    if name is None or len(commands) + len(groups) != 1:
        return full
    pruned = copy.copy(full)
    pruned.registered_commands, pruned.registered_groups = commands, groups
    return pruned


if __name__ == "__main__":
    main()
