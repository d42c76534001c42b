"""httpx, imported without its command line.

``import httpx`` imports its command line's click, pygments and rich when they are
installed (a fifth of a worker's start); no tidings process runs httpx's command line.
Every module of tidings imports httpx from here, so whichever comes first imports it
lean (``tidings.core.lean_imports``).
"""

from __future__ import annotations

from tidings.core.lean_imports import hidden

with hidden("click", "pygments", "rich"):
    import httpx as httpx

__all__ = ["httpx"]
