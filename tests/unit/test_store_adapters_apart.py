"""The two store adapters stay thin and apart: neither imports the other, and they
share no run of ten lines, the same to the letter or the same in shape with other
names, strings and numbers (what one would copy and then edit). Each adapter is many
modules (its store class, the role mixins it is made of, its database); every module
of one is held against every module of the other.

What the adapters have in common belongs in the core (``tidings.core.claims``) or in the
shared store modules (``stores/rows.py``, ``reads.py``, ``lifecycle.py``); each
adapter only runs its SQL and maps its rows. A run found here names both places.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from pathlib import Path

import pytest

STORES = Path(__file__).resolve().parents[2] / "src" / "tidings" / "stores"
#: Each adapter's modules: the store class (``sqlite.py``, ``postgres.py``), the role
#: mixins it is made of and the database beside it (``sqlite_*.py``, ``postgres_*.py``).
ADAPTERS = {"sqlite": sorted(STORES.glob("sqlite*.py")),
            "postgres": sorted(STORES.glob("postgres*.py"))}
#: The longest run the two adapters may share (ten lines fail).
LONGEST = 9
#: Tokens that say nothing of a line's shape: one adapter awaits what the other calls.
_SILENT = {"await", "async"}
_SKIPPED = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER)
#: A line of nothing but brackets and commas carries no logic of its own.
_PUNCTUATION = re.compile(r"[\s()\[\]{},:]*")


def shape_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, shape)`` of every line with code: names become ``n``, strings
    ``s``, numbers ``0``; comments, blank lines, imports and lone brackets drop out."""
    tokens: dict[int, list[str]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in _SKIPPED or tok.string in _SILENT:
            continue
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
            word = "n"
        elif tok.type == tokenize.STRING:
            word = "s"
        elif tok.type == tokenize.NUMBER:
            word = "0"
        else:
            word = tok.string
        tokens.setdefault(tok.start[0], []).append(word)
    found = []
    for number in sorted(tokens):
        line = " ".join(tokens[number])
        if _PUNCTUATION.fullmatch(line) or line.startswith(("import ", "from ")):
            continue
        found.append((number, line))
    return found


def shared_runs(a: str, b: str, *, longer_than: int) -> list[tuple[int, int, int]]:
    """``(length, line in a, line in b)`` of every maximal run of shape lines the two
    texts share that is longer than ``longer_than``."""
    left, right = shape_lines(a), shape_lines(b)
    at: dict[str, list[int]] = {}
    for j, (_, line) in enumerate(right):
        at.setdefault(line, []).append(j)
    runs = []
    for i, (_, line) in enumerate(left):
        for j in at.get(line, []):
            if i and j and left[i - 1][1] == right[j - 1][1]:
                continue  # inside a run already counted from its start
            length = 0
            while (i + length < len(left) and j + length < len(right)
                   and left[i + length][1] == right[j + length][1]):
                length += 1
            if length > longer_than:
                runs.append((length, left[i][0], right[j][0]))
    return runs


def test_each_adapter_is_its_store_and_its_role_modules() -> None:
    # the glob finds the store class and the role mixins it is made of, in both
    for adapter, paths in ADAPTERS.items():
        names = {path.stem for path in paths}
        assert {adapter, f"{adapter}_base", f"{adapter}_ledger"} <= names


def test_the_adapters_share_no_run_of_ten_lines() -> None:
    found = []
    for sqlite in ADAPTERS["sqlite"]:
        for postgres in ADAPTERS["postgres"]:
            runs = shared_runs(sqlite.read_text("utf-8"), postgres.read_text("utf-8"),
                               longer_than=LONGEST)
            found += [f"{n} lines: {sqlite.name}:{a} ~ {postgres.name}:{b}"
                      for n, a, b in runs]
    assert found == []


@pytest.mark.parametrize("path", [*ADAPTERS["sqlite"], *ADAPTERS["postgres"]],
                         ids=lambda path: path.name)
def test_neither_adapter_imports_the_other(path: Path) -> None:
    other = "postgres" if path.name.startswith("sqlite") else "sqlite"
    theirs = {f"tidings.stores.{p.stem}" for p in ADAPTERS[other]}
    tree = ast.parse(path.read_text("utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert not imported & theirs
    assert not any(isinstance(node, ast.ImportFrom) and node.module == "tidings.stores"
                   and {f"tidings.stores.{alias.name}" for alias in node.names} & theirs
                   for node in ast.walk(tree))


def test_the_check_sees_a_run_copied_with_other_names() -> None:
    # given ten lines, and the same ten awaited, renamed and with other strings
    body = "".join(f"    value{i} = conn.execute(sql['q{i}'], {{'k': {i}}}).rowcount\n"
                   for i in range(10))
    copied = "".join(f"    other{i} = await db.execute(q['z{i}'], {{'j': {i * 7}}}).rowcount\n"
                     for i in range(10))
    # then the check finds the run (the def line too: ``async`` says nothing of shape),
    # and none once a line in the middle differs in shape
    assert shared_runs(f"def a():\n{body}", f"async def b():\n{copied}",
                       longer_than=LONGEST) == [(11, 1, 1)]
    broken = copied.replace("other4 =", "other4 +=")
    assert shared_runs(f"def a():\n{body}", f"def b():\n{broken}", longer_than=LONGEST) == []


def test_the_check_passes_over_comments_blank_lines_and_brackets() -> None:
    # given a line of code between comments, blank lines and a lone bracket
    text = "# a comment\n\nx = f(\n    1,\n)\n"
    # then only the code line has a shape
    assert shape_lines(text) == [(3, "n = n ("), (4, "0 ,")]
