"""The ``tidings`` command's entry point imports the command line with the cyclic
collector off, freezes what the import built, and hands over with the collector as it
found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import tidings.cli
from tidings import __main__ as entry


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """What the command saw of the collector when it started."""
    found: dict[str, object] = {}

    def command() -> None:
        found["enabled"] = gc.isenabled()
        found["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(tidings.cli, "main", command)
    was = gc.isenabled()
    try:
        yield found
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def test_the_command_runs_with_the_collector_on_and_the_import_frozen(
        seen: dict[str, object]) -> None:
    gc.unfreeze()
    gc.enable()
    entry.main()
    assert seen["enabled"] is True
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000


def test_a_collector_turned_off_by_the_caller_stays_off(seen: dict[str, object]) -> None:
    gc.disable()
    entry.main()
    assert seen["enabled"] is False


def test_a_failing_import_leaves_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def failing(name: str, *args: object, **kw: object) -> object:
        if name == "tidings.cli":
            raise ImportError("broken install")
        return real(name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", failing)
    gc.enable()
    with pytest.raises(ImportError, match="broken install"):
        entry.main()
    assert gc.isenabled()
