"""The code blocks of the README and of the documentation site's pages (docs/) are run
or loaded, so they keep working together.

- every ``toml`` block is a settings file tidings loads;
- every ``json`` block is one JSON object;
- the ``python`` block of "Using it from Python" (docs/application.md) runs against the
  first settings block of docs/configure.md, and the one of docs/postgresql.md inside a
  caller's transaction on a real server (skipped without one, failed under CI);
- every ``sh`` block is valid shell whose ``tidings`` commands and options exist and
  whose ``pip`` extras are declared; the README's "Your first campaign" and the tutorial
  (docs/first-campaign.md) run the same commands, and both are run, as real processes,
  by tests/acceptance/test_readme_walkthrough.py;
- the README keeps the two set-up commands, and every file it links exists;
- the worked trigger signature (docs/http-api.md) is what tidings computes, and what its
  one-liners print.
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

from support.readme import (
    DOCS,
    README,
    TUTORIAL,
    Block,
    every_block,
    first_campaign,
    of,
    section_text,
)
from tidings.api import sign
from tidings.cli import app
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import build_runtime

ROOT = Path(__file__).resolve().parents[2]
TOML, SH, JSON = of("toml"), of("sh"), of("json")


def ids(found: list[Block]) -> list[str]:
    return [b.id for b in found]


def test_the_pages_have_blocks_of_every_kind() -> None:
    assert len(TOML) >= 3 and len(SH) >= 6 and JSON
    strays = [b.id for b in every_block() if b.lang not in {"sh", "python", "toml", "json", ""}]
    assert not strays, f"blocks in a language this test does not run or load: {strays}"


SET_UP = ["python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tidings demo\n",
          "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/pytest -n 4\n"]


def test_the_readme_sets_up_with_exactly_two_commands() -> None:
    """One installs and runs the demo, one runs the tests (.ci/run runs the second)."""
    assert [b.text for b in of("sh", "Set up", README)] == SET_UP
    ci = (ROOT / ".ci" / "run").read_text().replace(" --quiet", "")
    assert SET_UP[1].strip() in ci


def test_every_file_the_readme_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert "docs/architecture.md" in local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


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
def test_a_settings_block_loads(block: Block, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    Settings.load(write_settings(block.text, tmp_path, monkeypatch), env={})


@pytest.mark.parametrize("block", JSON, ids=ids(JSON))
def test_a_json_block_is_one_object(block: Block) -> None:
    assert isinstance(json.loads(block.text), dict)


async def run_python(source: str, namespace: dict[str, Any]) -> None:
    """Run a snippet of the docs as written: top-level ``await`` and ``async with``
    allowed."""
    code = compile(source, "docs", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)  # the documentation's own code, compiled above
    if isinstance(result, types.CoroutineType):
        await result


async def test_the_python_example_runs_with_the_settings_example(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [snippet] = of("python", "Using it from Python", DOCS / "application.md")
    settings = of("toml", page=DOCS / "configure.md")[0]
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

    [snippet] = of("python", page=DOCS / "postgresql.md")
    settings = of("toml", page=DOCS / "configure.md")[0]
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
def test_a_shell_block_is_valid_and_names_real_commands(block: Block) -> None:
    syntax = subprocess.run(["bash", "-n"], input=block.text, capture_output=True,
                            text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    for words in commands(block):
        program = Path(words[0]).name
        if program == "tidings":
            check_tidings(words)
        elif program == "pip":
            check_pip(words)


@pytest.mark.parametrize("page", [README, TUTORIAL], ids=["README", "tutorial"])
def test_the_first_campaign_walkthrough_is_there_and_uses_only_tidings(page: Path) -> None:
    used = [words for block in first_campaign(page) for words in commands(block)]
    assert [w[:2] for w in used if w[0] == "tidings"] == [
        ["tidings", "init"], ["tidings", "sandbox"], ["tidings", "scheduler"],
        ["tidings", "worker"], ["tidings", "status"], ["tidings", "inspect"],
        ["tidings", "token"], ["tidings", "api"]]
    assert all(w[0] in ("tidings", "cd") for w in used)


def test_the_readme_walks_the_tutorials_commands() -> None:
    """The README's first campaign is the tutorial's, shortened in words only."""
    def walk(page: Path) -> list[list[str]]:
        return [words for block in first_campaign(page) for words in commands(block)]

    assert walk(README) == walk(TUTORIAL)


SIGNING = section_text(DOCS / "http-api.md", "### Signing a trigger")


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
