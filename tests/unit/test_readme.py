"""The README's code blocks are run or loaded, so they keep working together.

- every ``toml`` block is a settings file tidings loads;
- every ``json`` block is one JSON object;
- the ``python`` block of "Using it from Python" runs against the settings block of
  "Settings (TOML)", and the PostgreSQL one inside a caller's transaction on a real
  server (skipped without one, failed under CI);
- every ``sh`` block is valid shell whose ``tidings`` commands and options exist and
  whose ``pip`` extras are declared; the "Your first campaign" blocks are also run, as
  real processes, by tests/acceptance/test_readme_walkthrough.py;
- the worked trigger signature is what tidings computes, and what its one-liners print.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer

from support.readme import FIRST_CAMPAIGN, Block, blocks, of
from tidings.api import sign
from tidings.cli import app
from tidings.runtime import build_runtime
from tidings.settings import Settings
from tidings.states import State

ROOT = Path(__file__).resolve().parents[2]
TOML, SH, JSON = of("toml"), of("sh"), of("json")


def ids(found: list[Block]) -> list[str]:
    return [b.id for b in found]


def test_the_readme_has_blocks_of_every_kind() -> None:
    assert len(TOML) >= 3 and len(SH) >= 6 and JSON
    assert {b.lang for b in blocks()} <= {"sh", "python", "toml", "json", ""}, (
        "a block in a language this test does not run or load")


def write_settings(block: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``block`` as ``folder/tidings.toml``, with the folders and variables it names."""
    for name in re.findall(r'_env\s*=\s*"([A-Z_]+)"', block):
        monkeypatch.setenv(name, "set-by-the-test")
    for templates in re.findall(r'templates\s*=\s*"([^"]+)"', block):
        (folder / templates).mkdir(exist_ok=True)
    path = folder / "tidings.toml"
    path.write_text(block)
    return path


@pytest.mark.parametrize("block", TOML, ids=ids(TOML))
def test_a_readme_settings_block_loads(block: Block, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    Settings.load(write_settings(block.text, tmp_path, monkeypatch), env={})


@pytest.mark.parametrize("block", JSON, ids=ids(JSON))
def test_a_readme_json_block_is_one_object(block: Block) -> None:
    assert isinstance(json.loads(block.text), dict)


async def run_python(source: str, namespace: dict[str, Any]) -> None:
    """Run a README snippet as written: top-level ``await`` and ``async with`` allowed."""
    code = compile(source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)  # the README's own code, compiled above
    if isinstance(result, types.CoroutineType):
        await result


async def test_the_python_example_runs_with_the_settings_example(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [snippet] = of("python", "Using it from Python")
    settings = of("toml", "Settings (TOML)")[0]
    write_settings(settings.text, tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)

    await run_python(snippet.text, {})

    async with await build_runtime(Settings.load(tmp_path / "tidings.toml", env={})) as rt:
        for channel in ("email", "sms"):
            intent = await rt.store.intent_get(f"shipment-4821:customer-73:{channel}")
            assert intent is not None and intent.state is State.CANCELLED, channel


async def test_the_transactional_notify_example_runs_on_postgresql(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    [snippet] = of("python", "PostgreSQL")
    settings = of("toml", "Settings (TOML)")[0]
    path = write_settings(settings.text, tmp_path, monkeypatch)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
    loaded = Settings.load(path, env={"TIDINGS_STORE": pg_url})
    async with await build_runtime(loaded) as runtime:
        customer = {"id": "customer-73", "email": "ann@example.com"}
        await run_python(snippet.text, {"psycopg": psycopg, "url": pg_url,
                                        "runtime": runtime, "customer": customer})
        intent = await runtime.store.intent_get("shipment-4821:customer-73:email")
    assert intent is not None and intent.state is State.ENQUEUED


# ---------------------------------------------------------------- shell blocks


SEPARATORS = ("&&", "||", "|", ";")


def commands(block: Block) -> Iterator[list[str]]:
    """Each simple command of a block (continued lines joined; ``&&``, ``||``, ``|`` and
    ``;`` split), as words."""
    for line in block.text.replace("\\\n", " ").splitlines():
        words: list[str] = []
        for word in [*shlex.split(line, comments=True), ";"]:
            if word not in SEPARATORS:
                words.append(word)
            elif words:
                yield words
                words = []


def check_tidings(words: list[str]) -> None:
    """The subcommands and options exist (as ``tidings … --help`` would show them)."""
    command: Any = typer.main.get_command(app)
    rest = list(words[1:])
    # Duck-typed: typer's groups are not always click.Group subclasses.
    while rest and hasattr(command, "get_command") and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, f"{' '.join(words)}: no command {name!r}"
        command = sub
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    assert not hasattr(command, "get_command"), f"{' '.join(words)}: a group, not a command"
    for word in rest:
        if word.startswith("--"):
            assert word.split("=")[0] in options, f"{' '.join(words)}: no option {word}"


def check_pip(words: list[str]) -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["optional-dependencies"])
    for word in words:
        named = re.fullmatch(r"\.\[(?P<extras>[\w,-]+)\]", word)
        if named:
            assert set(named.group("extras").split(",")) <= extras, word


@pytest.mark.parametrize("block", SH, ids=ids(SH))
def test_a_readme_shell_block_is_valid_and_names_real_commands(block: Block) -> None:
    syntax = subprocess.run(["bash", "-n"], input=block.text, capture_output=True,
                            text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    for words in commands(block):
        program = Path(words[0]).name
        if program == "tidings":
            check_tidings(words)
        elif program == "pip":
            check_pip(words)


def test_the_first_campaign_walkthrough_is_there_and_uses_only_tidings() -> None:
    walkthrough = of("sh", FIRST_CAMPAIGN)
    used = [words for block in walkthrough for words in commands(block)]
    assert [w[:2] for w in used if w[0] == "tidings"] == [
        ["tidings", "init"], ["tidings", "sandbox"], ["tidings", "scheduler"],
        ["tidings", "worker"], ["tidings", "status"], ["tidings", "inspect"],
        ["tidings", "token"], ["tidings", "api"]]
    assert all(w[0] in ("tidings", "cd") for w in used)


SIGNING = (ROOT / "README.md").read_text().partition("### Signing a trigger")[2]
SIGNING = SIGNING.partition("\n## ")[0]


def test_the_worked_signature_example_is_what_tidings_computes() -> None:
    [header] = re.findall(r"X-Tidings-Signature: (sha256=[0-9a-f]{64})", SIGNING)

    assert header == sign("example-secret", timestamp=1786698000, method="POST",
                          target="/v1/trigger/weekly-digest", body=b"")


def test_the_readme_one_liners_reproduce_the_worked_example() -> None:
    [digest] = re.findall(r"sha256=([0-9a-f]{64})", SIGNING)
    [python] = re.findall(r"^python3 -c '(.+)'$", SIGNING, flags=re.MULTILINE)
    ran = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True,
                         check=True, timeout=30)
    assert ran.stdout.strip() == digest

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: the shell line is not checked")
    [shell] = re.findall(r"^sig=\$\((.+)\)$", SIGNING, flags=re.MULTILINE)
    example = {"secret": "example-secret", "ts": "1786698000",
               "path": "/v1/trigger/weekly-digest", "body": ""}
    ran = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True,
                         timeout=30, env={"PATH": os.environ["PATH"], **example})
    assert ran.stdout.strip() == digest
