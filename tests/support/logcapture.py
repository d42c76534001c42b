"""Given-helpers for tests of what tidings logs: configure the real set-up
(``tidings.core.logs``) onto a string buffer, read it back as JSON lines, and put the
process's logging back as it was afterwards."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from tidings.core.logs import configure_logging, use_clock


@contextmanager
def restored_logging() -> Iterator[None]:
    """Whatever ``configure_logging`` changes is put back on the way out."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        for name, was in quiet.items():
            logging.getLogger(name).setLevel(was)
        structlog.reset_defaults()
        use_clock(None)


def json_logs(level: str = "debug") -> io.StringIO:
    """Every log of the process, as JSON lines, into the returned buffer."""
    stream = io.StringIO()
    configure_logging("json", level, stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """The buffer's lines, each parsed (a line that is not one JSON object fails)."""
    parsed = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(isinstance(p, dict) for p in parsed)
    return parsed
