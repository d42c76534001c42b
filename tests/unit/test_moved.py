"""Every import path that moved still imports, warning once and naming the new one, and
hands over the same objects; nothing of tidings itself uses an old path."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings

import pytest

from tidings.core.moved import MOVED, public_homes


def fresh_import(name: str) -> object:
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        if loaded in MOVED:
            del sys.modules[loaded]
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_hands_over_its_names(old: str) -> None:
    new, names = MOVED[old]
    parent = old.rpartition(".")[0]
    if parent in MOVED and parent not in sys.modules:
        # An old package's submodule (tidings.pacing.algorithm) imports the old package
        # first, which warns too: that warning is the package's own test's. Imported here
        # first, so that this test checks the submodule's alone, whichever of the two a
        # worker ran before (xdist deals them to any worker, in any order).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            importlib.import_module(parent)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved") as warned:
        module = fresh_import(old)
    message = str(warned[0].message)
    if public_homes(old):
        assert f"now in {new}" in message
    else:
        assert f"{old} moved to {new}" in message
    home = importlib.import_module(new)
    public = [n for n in dir(home) if not n.startswith("_")]
    for name in public[:50]:
        assert getattr(module, name) is getattr(home, name)
    for name, target in names.items():
        where, _, attr = target.partition(":")
        assert getattr(module, name) is getattr(importlib.import_module(where), attr or name)


def test_a_plugin_of_2026_12_01_imports() -> None:
    """A provider plug-in written against the flat tree of 2026-12-01 runs unchanged."""
    with pytest.warns(DeprecationWarning):
        fresh_import("tidings.model")
        from tidings.model import Accepted, Lookup, Outcome, SendRequest  # type: ignore[attr-defined]
    from tidings.core.model import SendRequest as now_request
    from tidings.core.outcomes import Accepted as now_accepted
    from tidings.core.outcomes import Lookup as now_lookup
    from tidings.core.outcomes import Outcome as now_outcome

    assert (Accepted, Lookup, Outcome, SendRequest) == (now_accepted, now_lookup, now_outcome,
                                                        now_request)


@pytest.mark.parametrize(("old", "public", "name"), [
    ("tidings.model", "tidings.providers", "SendRequest"),
    ("tidings.model", "tidings", "Recipient"),
    ("tidings.outcomes", "tidings.providers", "Accepted"),
    ("tidings.errors", "tidings", "InvalidInput"),
    ("tidings.settings", "tidings", "Settings"),
])
def test_the_warning_names_the_public_home_not_the_internal_one(old: str, public: str,
                                                                 name: str) -> None:
    """``from tidings.model import SendRequest`` said "moved to tidings.core.model", an
    internal module; it names tidings.providers, the path that keeps."""
    with pytest.warns(DeprecationWarning) as warned:
        module = fresh_import(old)
    message = str(warned[0].message)
    assert re.search(rf"import [^;]*\b{name}\b[^;]* from {re.escape(public)}\b", message), message
    assert f"moved to {MOVED[old][0]}" not in message
    assert getattr(module, name) is getattr(importlib.import_module(public), name)


@pytest.mark.parametrize("old", sorted(o for o in MOVED if public_homes(o)))
def test_every_name_a_warning_names_is_public_there(old: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = fresh_import(old)
    for public, names in public_homes(old).items():
        home = importlib.import_module(public)
        for name in names:
            assert name in home.__all__
            assert getattr(home, name) is getattr(module, name)


def test_a_name_an_old_module_never_had_is_an_attribute_error() -> None:
    with pytest.warns(DeprecationWarning):
        module = fresh_import("tidings.worker")
    with pytest.raises(AttributeError, match=r"tidings\.delivery\.worker"):
        _ = module.no_such_name


def test_an_old_submodule_of_a_moved_package_imports() -> None:
    # The old package first, whatever this process imported before (a worker of a
    # parallel run may not have run the test that imports it): it warns on its own.
    with pytest.warns(DeprecationWarning, match=r"tidings\.pacing moved to"):
        fresh_import("tidings.pacing")
    with pytest.warns(DeprecationWarning, match=r"tidings\.pacing\.algorithm moved to"):
        algorithm = fresh_import("tidings.pacing.algorithm")
    from tidings.core.pacing import parse_quota

    assert algorithm.parse_quota is parse_quota


def test_a_moved_package_attribute_warns() -> None:
    import tidings.webhooks
    from tidings.recovery.provider_reports import receive

    sys.modules.pop("tidings.webhooks.receive", None)  # imported as an old module above
    vars(tidings.webhooks).pop("receive", None)

    with pytest.warns(DeprecationWarning, match=r"tidings\.webhooks\.receive moved"):
        assert tidings.webhooks.receive is receive
    with pytest.raises(AttributeError):
        _ = tidings.webhooks.nothing_here


def test_the_warning_points_at_the_importing_line() -> None:
    code = ("import warnings; warnings.simplefilter('always')\n"
            "import tidings\n"
            "import tidings.errors  # the line warned about\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert "<string>:3: DeprecationWarning: tidings.errors moved: import ConfigurationError" \
        in run.stderr


def test_tidings_itself_imports_no_old_path() -> None:
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import tidings, tidings.runtime, tidings.cli, tidings.api.app, tidings.demo.run\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_old_path_is_a_real_module_too() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for old in MOVED:
            spec = importlib.util.find_spec(old)
            assert spec is not None and spec.origin is None, f"{old} exists as a file again"
