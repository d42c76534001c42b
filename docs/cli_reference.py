"""Write the command-line reference, docs/cli.md, from the Typer app.

What is above ``## Every command`` on the page is written by hand (the commands at a
glance); below it, each command's usage, help and options as ``tidings … --help`` has
them, read from the app itself. Run ``python docs/cli_reference.py`` after changing a
command; tests/unit/test_docs_reference.py fails while the page and the app differ.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
HEADING = "## Every command"
NOTE = ("<!-- Generated from the Typer app by `python docs/cli_reference.py`; "
        "tests/unit/test_docs_reference.py fails while this part is not current. -->")


def _cell(text: str) -> str:
    """One table cell: one line, its pipes escaped, no raw HTML (``<str>`` is text)."""
    text = " ".join(text.split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _help(command: Any) -> str:
    """The command's help as the app writes it (Markdown: rich_markup_mode="markdown")."""
    text = textwrap.dedent(command.help or "").strip()
    return re.sub(r"<(?=[A-Za-z/])", "&lt;", text)


def _params(command: Any, ctx: Any) -> list[str]:
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or param.name == "help":
            continue
        names, meaning = record
        rows.append(f"| `{names}` | {_cell(meaning)} |")
    if not rows:
        return []
    return ["| argument or option | meaning |", "|---|---|", *rows, ""]


def _subcommands(command: Any, ctx: Any) -> list[tuple[Any, Any]]:
    """A group's commands in the order ``--help`` lists them, each with its context."""
    if not hasattr(command, "list_commands"):  # typer's groups: duck-typed
        return []
    found = []
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            found.append((sub, sub.context_class(sub, info_name=name, parent=ctx)))
    return found


def _section(command: Any, ctx: Any, level: int, *, nested: bool = True) -> list[str]:
    out = [f"{'#' * level} `{ctx.command_path}`", ""]
    helptext = _help(command)
    if helptext:
        out += [helptext, ""]
    out += ["```", command.get_usage(ctx).removeprefix("Usage: "), "```", ""]
    out += _params(command, ctx)
    if nested:
        for sub, sub_ctx in _subcommands(command, ctx):
            out += _section(sub, sub_ctx, level + 1)
    return out


def render() -> str:
    """The generated part of the page: ``tidings`` and every command under it."""
    import typer

    from tidings.cli import app

    root: Any = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="tidings")
    out = [HEADING, "", NOTE, "", "Every command also takes `--help`, which prints what its "
           "section says here.", ""]
    # The options before any command, then each command (a group's under it).
    out += _section(root, ctx, 3, nested=False)
    for sub, sub_ctx in _subcommands(root, ctx):
        out += _section(sub, sub_ctx, 3)
    return "\n".join(out).rstrip("\n") + "\n"


def page() -> str:
    head = PAGE.read_text().partition(HEADING)[0]
    return head + render()


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.stdout.write(f"wrote {PAGE.relative_to(ROOT)}\n")
