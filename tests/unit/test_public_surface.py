"""docs/compatibility.md is the one list of the public surface: each public module's
``__all__`` is exactly what the page lists, and every listed name imports."""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def listed() -> dict[str, set[str]]:
    text = PAGE.read_text().split("## The public modules", 1)[1]
    found: dict[str, set[str]] = {}
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        module, _, body = block.partition("\n")
        found[module.strip()] = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", body))
    return found


def test_the_page_lists_modules() -> None:
    assert {"tidings", "tidings.providers", "tidings.testing"} <= set(listed())


@pytest.mark.parametrize("module", sorted(listed()))
def test_all_is_what_the_page_lists(module: str) -> None:
    assert set(importlib.import_module(module).__all__) == listed()[module]


@pytest.mark.parametrize(("module", "name"),
                         sorted((m, n) for m, names in listed().items() for n in names))
def test_every_public_name_imports_without_a_warning(module: str, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(importlib.import_module(module), name)
    assert value is not None
