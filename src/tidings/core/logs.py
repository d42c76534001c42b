"""Logs: one set-up for every tidings process, structured, and never carrying an address,
a phone number or a secret.

``configure_logging`` is called once by the process's entry point (the CLI), never at
import. It puts structlog's formatter on the standard library's root logger, so every
``logging.getLogger(...)`` call in tidings and every third-party log (uvicorn,
psycopg, aiohttp) comes out in one format:

- ``console``: one aligned, human-readable line per event (colours on a terminal);
- ``json``: one JSON object per line, e.g.::

    {"timestamp": "2026-08-14T09:00:03.512Z", "level": "info", "logger": "tidings.delivery.worker",
     "event": "send", "key": "weekly-digest/2026-08-14/cust_1042/email/v3",
     "channel": "email", "recipient": "r_5d0c1b9e33a4f1c2", "message_id": "weekly-…",
     "provider_request_id": "req_000004211", "attempt": 2, "outcome": "rate_limited",
     "reason": "HTTP 429: rate limited", "retry_at": 1786698004.2,
     "worker": "host:4242:email:9f3a1c"}

Fields come from ``extra={...}`` on a standard-library call (or from a structlog
call's keywords). Every event passes ``Redactor`` before it is written, a line of
defence behind the code that should never log such values in the first place: fields
named like an address or a credential (``SENSITIVE_FIELDS``) are dropped, and in every
remaining string (the message, field values, a traceback) anything shaped like an email
address or an international phone number, the secret half of a tidings API token, a
bearer credential or a password in a URL is replaced.

The worker logs each send at ``debug`` (guarded, so it costs one level check when
off), and rate limits, rejections, dead letters, lost leases and releases at ``info``
or ``warning``; the scheduler logs occurrences and admitted pages, the reconciler each
kind of repair with its count, the API one line per request (route template, status,
duration; never a body or a header).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO, cast, get_args

from tidings.core.lean_imports import hidden

with hidden("rich"):
    # structlog imports rich, and through it pygments and attrs (a sixth of a tidings
    # process's start), for a traceback renderer tidings never uses: plain_traceback below.
    import structlog
    from structlog.typing import EventDict, Processor, WrappedLogger

from tidings.core.clock import Clock, SystemClock
from tidings.core.errors import ConfigurationError
from tidings.core.redaction import scrub

LogFormat = Literal["console", "json"]
FORMATS: Final[tuple[str, ...]] = get_args(LogFormat)
LEVELS: Final = ("debug", "info", "warning", "error", "critical")
DEFAULT_LEVEL: Final = "info"
FORMAT_ENV: Final = "TIDINGS_LOG_FORMAT"
LEVEL_ENV: Final = "TIDINGS_LOG_LEVEL"

SENSITIVE_FIELDS: Final = frozenset({
    "address", "to", "email", "phone", "password", "token", "secret", "authorization",
    "api_key", "passwd", "cookie",
})
"""Field names dropped from every event, as are names ending in one of
``_SENSITIVE_SUFFIXES`` (``to_address``, ``smtp_password``, ``auth_token``)."""
_SENSITIVE_SUFFIXES: Final = ("_address", "_email", "_phone", "_password", "_secret",
                              "_token", "_api_key")
# Fields third-party libraries add that only repeat the message (uvicorn's coloured copy).
_NOISE: Final = frozenset({"color_message"})
_MAX_DEPTH = 4

# A tidings API token: keep its id (it names the token), drop its secret half.
_API_TOKEN = re.compile(r"\b(tid_[0-9a-f]{12})_[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"\b(bearer)\s+[^\s,;\"']+", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^/\s:@]*):[^@\s/]*@", re.IGNORECASE)

# Third-party loggers that log every request at INFO/DEBUG: at most this chatty.
_QUIET: Final = {"httpx": logging.WARNING, "httpcore": logging.INFO}


def scrub_text(text: str) -> str:
    """``text`` without email addresses, phone numbers, token secrets, bearer
    credentials or URL passwords (see the module docstring)."""
    if "://" in text:
        text = _URL_PASSWORD.sub(r"\1:[secret]@", text)
    if "tid_" in text:
        text = _API_TOKEN.sub(r"\1_[secret]", text)
    if "earer" in text:
        text = _BEARER.sub(lambda m: f"{m.group(1)} [secret]", text)
    return scrub(text)


def sensitive(name: str) -> bool:
    """Whether a field of this name is dropped from every event."""
    lowered = name.lower()
    return lowered in SENSITIVE_FIELDS or lowered.endswith(_SENSITIVE_SUFFIXES)


def _clean(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return scrub_text(value)
    if depth >= _MAX_DEPTH:
        return value if isinstance(value, int | float | bool) or value is None else "[…]"
    if isinstance(value, Mapping):
        return {k: _clean(v, depth + 1) for k, v in value.items()
                if not (isinstance(k, str) and sensitive(k))}
    if isinstance(value, list | tuple | set | frozenset):
        return [_clean(v, depth + 1) for v in value]
    return value


class Redactor:
    """The structlog processor that refuses to emit addresses, phone numbers and
    secrets: sensitive fields are dropped (at any depth) and every string scrubbed."""

    def __call__(self, logger: WrappedLogger, method_name: str,
                 event_dict: EventDict) -> EventDict:
        for name in [k for k in event_dict if sensitive(k) or k in _NOISE]:
            del event_dict[name]
        for name, value in event_dict.items():
            if not isinstance(value, int | float | bool) and value is not None:
                event_dict[name] = _clean(value, 1)
        return event_dict


_FIRST: Final = ("timestamp", "level", "logger", "event")


def _tidy(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """When, how bad, where from and what first, then the event's own fields; a field
    that is None is left out (a send without a provider request id just has none)."""
    ordered = {k: event_dict.pop(k) for k in _FIRST if k in event_dict}
    ordered.update((k, v) for k, v in event_dict.items() if v is not None)
    return ordered


def log_time(at: float) -> str:
    """Epoch seconds as log lines write times: UTC ISO 8601 (``2026-08-14T09:00:00Z``)."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class _Timestamper:
    """Stamps each event with the process's clock: the real one, or the runtime's when
    it simulates another time (``clock_offset_s``), so log times agree with the ledger."""

    def __init__(self) -> None:
        self.now: Callable[[], float] = SystemClock().now

    def __call__(self, logger: WrappedLogger, method_name: str,
                 event_dict: EventDict) -> EventDict:
        at = datetime.fromtimestamp(self.now(), UTC)
        event_dict["timestamp"] = at.isoformat(timespec="microseconds").replace("+00:00", "Z")
        return event_dict


_STAMPER: Final = _Timestamper()


def use_clock(clock: Clock | None) -> None:
    """Stamp this process's log lines with ``clock`` from now on (the CLI passes its
    runtime's, which is shifted when the settings simulate another time); None: the
    real clock again."""
    _STAMPER.now = (clock or SystemClock()).now


class _Handler(logging.StreamHandler[TextIO]):
    """The one handler ``configure_logging`` puts on the root logger (and replaces)."""


def default_format(stream: TextIO) -> LogFormat:
    """``console`` on a terminal, ``json`` otherwise (a file, a pipe, a log collector)."""
    isatty = getattr(stream, "isatty", None)
    return "console" if callable(isatty) and isatty() else "json"


def _one_of(field: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is allowed, else a ConfigurationError naming ``field``."""
    if value not in allowed:
        raise ConfigurationError(field, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def level_number(level: str | int) -> int:
    """``"debug"`` … ``"critical"`` (any case) or a number, as a logging level."""
    if isinstance(level, int):
        return level
    name = level.strip().lower()
    if name not in LEVELS:
        raise ConfigurationError("log_level", f"{level!r} is not one of {', '.join(LEVELS)}")
    return cast(int, getattr(logging, name.upper()))


def from_env(environ: Mapping[str, str]) -> tuple[LogFormat | None, str]:
    """The format (None: the default) and level ``TIDINGS_LOG_FORMAT`` and
    ``TIDINGS_LOG_LEVEL`` ask for; errors name the variable."""
    raw_format = environ.get(FORMAT_ENV, "").strip().lower() or None
    if raw_format is not None:
        _one_of(FORMAT_ENV, raw_format, FORMATS)
    level = _one_of(LEVEL_ENV, environ.get(LEVEL_ENV, "").strip().lower() or DEFAULT_LEVEL,
                    LEVELS)
    return cast(LogFormat | None, raw_format), level


def configure_logging(format: LogFormat | None = None,
                      level: str | int = DEFAULT_LEVEL, *, stream: TextIO | None = None
                      ) -> None:
    """Send every log of this process to ``stream`` (stderr) as ``format`` (None: the
    default for the stream), from ``level`` up. Calling it again replaces the set-up."""
    out = sys.stderr if stream is None else stream
    chosen = default_format(out) if format is None else _one_of("log_format", format, FORMATS)
    number = level_number(level)
    timestamp = _STAMPER
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),  # a standard-library call's extra={...}
        timestamp,
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer() if chosen == "json" else
        structlog.dev.ConsoleRenderer(colors=default_format(out) == "console",
                                      exception_formatter=structlog.dev.plain_traceback))
    handler = _Handler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.StackInfoRenderer(),
            # Tracebacks become text here, so the Redactor sees them too.
            structlog.processors.format_exc_info,
            Redactor(),
            _tidy,
            renderer,
        ]))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()  # the stream stays open: it is the caller's
    root.addHandler(handler)
    root.setLevel(number)
    for name, floor in _QUIET.items():
        logging.getLogger(name).setLevel(max(number, floor))
    # structlog's own loggers (structlog.get_logger) go through the same handler.
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.PositionalArgumentsFormatter(),
            timestamp,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
