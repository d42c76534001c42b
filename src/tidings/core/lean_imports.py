"""Imports kept from pulling in what a tidings process never uses.

Every ``tidings`` process (each worker started again after a crash, each operator
command, each test's subprocess) pays for its imports before it does anything. Two
libraries tidings uses import a third only to offer something tidings does not take:
structlog imports rich (and through it pygments and attrs) for a traceback renderer,
and httpx imports click, pygments and rich for its own command line. Those are hidden
from that one import, which then goes without them as it would were they not
installed; the command line still imports rich when it prints a table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """Within: ``import name`` fails as if ``name`` were not installed, for each of
    ``names`` not imported already (one imported already is left as it is). After:
    each imports as usual."""
    hide = [name for name in names if name not in sys.modules]
    for name in hide:
        # A None entry makes the import system raise ImportError for that name.
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hide:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
