"""``only_the_command``: the app a ``tidings`` process builds holds only the command it
runs, that command whole, and falls back to the whole app for anything else."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from tidings.cli import app, only_the_command


def click_group(source: typer.Typer) -> TyperGroup:
    group = get_command(source)
    assert isinstance(group, TyperGroup)
    return group


FULL = click_group(app)


def described(command: object) -> object:
    """A command as a user meets it: its params (names, kinds, defaults, help), its
    help, and the same of its sub-commands."""
    params = [(p.name, p.opts, p.secondary_opts, type(p).__name__, repr(p.default),
               getattr(p, "help", None), p.required)
              for p in getattr(command, "params", [])]
    subs = {n: described(c) for n, c in getattr(command, "commands", {}).items()}
    return (getattr(command, "name", None), getattr(command, "help", None), params, subs)


@pytest.mark.parametrize("name", sorted(FULL.commands))
def test_each_command_alone_is_the_command_of_the_whole_app(name: str) -> None:
    pruned = click_group(only_the_command(app, [name, "--json"]))
    assert list(pruned.commands) == [name]
    assert described(pruned.commands[name]) == described(FULL.commands[name])
    # the global options stay
    assert [p.opts for p in pruned.params] == [p.opts for p in FULL.params]


@pytest.mark.parametrize("args", [[], ["--help"], ["--log-level", "debug", "worker"],
                                  ["no-such-command"], ["suppresion", "list"]])
def test_anything_else_gets_the_whole_app(args: list[str]) -> None:
    assert only_the_command(app, args) is app


def test_the_whole_app_is_left_as_it_was() -> None:
    before = (list(app.registered_commands), list(app.registered_groups))
    only_the_command(app, ["worker"])
    assert (app.registered_commands, app.registered_groups) == before
    assert set(click_group(app).commands) == set(FULL.commands)


def test_a_misspelt_command_is_still_told_its_nearest_name() -> None:
    args = ["suppresion", "list"]
    result = CliRunner().invoke(only_the_command(app, args), args)
    assert result.exit_code == 2
    assert "Did you mean 'suppression'?" in result.output
