"""Short and long forms of the fault tests: the suite runs the short one; ``bench/faults.py``
sets ``TIDINGS_LONG_FORM=1`` and runs the same tests larger (more rows, more restarts,
a bigger disk to fill), as many rounds as asked."""

from __future__ import annotations

import os

LONG = os.environ.get("TIDINGS_LONG_FORM") == "1"


def scale(short: int, long: int) -> int:
    """``long`` under ``TIDINGS_LONG_FORM=1``, else ``short``."""
    return long if LONG else short

