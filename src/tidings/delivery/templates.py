"""Versioned message templates, rendered at send time from an intent's identifiers.

A template id is ``NAME/vN`` (``weekly-digest/v3``): the version is part of the
delivery key, so changing what a campaign says is a deliberate new version, never an
edit under an id already in flight. A version is a folder of plain files::

    <root>/weekly-digest/v3/subject.txt   email subject (one line)
                            body.txt      email plain-text part (required for email)
                            body.html     email HTML part (optional, autoescaped)
                            sms.txt       the SMS text

Rendering uses Jinja2's immutable sandbox (templates may read the data, never call
into or change it), ``StrictUndefined`` (a missing variable is an error, not an empty
string) and autoescaping for ``.html`` only. A version is self-contained: it cannot
include another template, whose later edits would change what an old version says.
Each file is compiled once per process and cached.

Every failure is a ``RenderError`` whose ``reason`` names the template id and file
and the problem, never a data value: reasons end up in the ledger and the logs, and
the data may be personal.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jinja2 import (
    BaseLoader,
    Environment,
    StrictUndefined,
    Template,
    TemplateNotFound,
    TemplateRuntimeError,
    TemplateSyntaxError,
    UndefinedError,
    meta,
)
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import missing

from tidings.core.errors import ConfigurationError, TidingsError
from tidings.core.model import Content
from tidings.delivery.template_variables import always_read

TEMPLATE_ID = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)/v(?P<version>[1-9][0-9]*)$")
SUBJECT, BODY, HTML, SMS = "subject.txt", "body.txt", "body.html", "sms.txt"
TEMPLATE_FILES: frozenset[str] = frozenset({SUBJECT, BODY, HTML, SMS})
#: The files a channel kind cannot render without.
REQUIRED_FILES: dict[str, tuple[str, ...]] = {"email": (SUBJECT, BODY), "sms": (SMS,)}
#: RFC 5322's line limit: a longer subject would have to be folded.
MAX_SUBJECT_CHARS = 998
#: Characters one file may render to (a mail client clips far below): a template that
#: repeats a string a billion times is refused, not built and sent.
MAX_RENDER_CHARS = 1_000_000
#: Seconds one message may take to render: a loop in a template never holds a worker
#: (its event loop, its leases, SIGTERM) for longer.
RENDER_BUDGET_S = 1.0
#: What no subject line may hold besides CR and LF: other control and line-break
#: characters (those ``str.splitlines`` splits on among them).
_NOT_IN_A_HEADER = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
#: Bits of an integer a template may compute (``n ** n ** n`` is refused at once).
_MAX_INT_BITS = 4096
DEFAULT_MAX_SMS_SEGMENTS = 4
#: What every render has besides the intent's data (``render``): the recipient's id.
PROVIDED: frozenset[str] = frozenset({"recipient_id"})
_MAX_REASON = 300

RenderErrorKind = Literal[
    "bad_id", "unknown_template", "missing_file", "bad_data", "syntax", "undefined",
    "security", "failed", "empty", "too_long", "invalid",
]


class RenderError(TidingsError):
    """A message cannot be rendered. ``reason`` names the template and the problem and
    never contains data values; ``kind`` classifies it for metrics and tests."""

    def __init__(self, reason: str, *, kind: RenderErrorKind) -> None:
        self.reason = reason if len(reason) <= _MAX_REASON else reason[:_MAX_REASON - 1] + "…"
        self.kind = kind
        super().__init__(self.reason)


def _short_id(template_id: object) -> str:
    text = repr(template_id)
    return text if len(text) <= 80 else text[:79] + "…"


def parse_template_id(template_id: str) -> tuple[str, int]:
    """``"weekly-digest/v3"`` -> ``("weekly-digest", 3)``; anything else is RenderError."""
    match = TEMPLATE_ID.match(template_id) if isinstance(template_id, str) else None
    if match is None:
        raise RenderError(
            f"template id {_short_id(template_id)} must be NAME/vN with a version segment, "
            "e.g. 'weekly-digest/v3'", kind="bad_id")
    return match["name"], int(match["version"])


# ---------------------------------------------------------------- SMS length


GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
#: Characters of the GSM 03.38 extension table: an escape plus the character, 2 septets.
GSM7_EXTENSION = frozenset("\f^{}\\[~]|€")


@dataclass(frozen=True, kw_only=True)
class SmsLength:
    """How a text travels as SMS: its encoding, its size in that encoding's units
    (septets or UTF-16 code units), and the segments it takes."""

    encoding: Literal["GSM-7", "UCS-2"]
    units: int
    segments: int


def sms_length(text: str) -> SmsLength:
    """Count the segments of ``text``: GSM-7 when every character is in the GSM 03.38
    tables (160 septets alone, 153 per segment when concatenated), else UCS-2 (70 code
    units alone, 67 per segment). A two-unit character never straddles two segments."""
    if all(c in GSM7_BASIC or c in GSM7_EXTENSION for c in text):
        units = [2 if c in GSM7_EXTENSION else 1 for c in text]
        return SmsLength(encoding="GSM-7", units=sum(units),
                         segments=_segments(units, single=160, multi=153))
    units = [2 if ord(c) > 0xFFFF else 1 for c in text]
    return SmsLength(encoding="UCS-2", units=sum(units),
                     segments=_segments(units, single=70, multi=67))


def _segments(units: list[int], *, single: int, multi: int) -> int:
    total = sum(units)
    if total <= single:
        return 1 if total else 0
    segments, used = 1, 0
    for unit in units:
        if used + unit > multi:
            segments, used = segments + 1, 0
        used += unit
    return segments


# ---------------------------------------------------------------- sources


class _NoIncludes(BaseLoader):
    """Refuses every include/import/extends: a template version is self-contained."""

    def get_source(self, environment: Environment, template: str) -> tuple[str, None, None]:
        raise TemplateNotFound(template)


Files = Mapping[str, str]


def _directory_source(root: Path) -> Callable[[str], Files | None]:
    def load(template_id: str) -> Files | None:
        name, version = parse_template_id(template_id)
        folder = root / name / f"v{version}"
        if not folder.is_dir():
            return None
        files: dict[str, str] = {}
        for file in TEMPLATE_FILES:
            path = folder / file
            if not path.is_file():
                continue
            try:
                files[file] = path.read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise RenderError(f"template {template_id!r} {file}: cannot be read "
                                  f"({type(exc).__name__})", kind="missing_file") from None
        return files

    return load


def _template_ids(root: Path) -> Iterator[str]:
    for folder in sorted(root.glob("*/v*")):
        template_id = f"{folder.parent.name}/{folder.name}"
        if folder.is_dir() and TEMPLATE_ID.match(template_id):
            yield template_id


class _OverBudget(Exception):
    """A render went past what one message may cost (``RENDER_BUDGET_S`` or
    ``MAX_RENDER_CHARS``); its text says which."""


#: When the render in progress must stop (``time.perf_counter``): checked as loops go.
_DEADLINE: ContextVar[float] = ContextVar("tidings_render_deadline", default=math.inf)


def _on_time() -> None:
    if time.perf_counter() > _DEADLINE.get():
        raise _OverBudget(f"took more than {RENDER_BUDGET_S:g} s (a loop too long?)")


def _paced(items: Iterable[Any]) -> Iterator[Any]:
    for i, item in enumerate(items):
        if not i & 1023:
            _on_time()
        yield item


def _bounded_range(*args: int) -> Iterator[int]:
    """The sandbox's ``range`` (at most its MAX_RANGE items), watched by the budget:
    nested loops of it would otherwise run for hours with no output to check."""
    return _paced(safe_range(*args))


class _BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with ``*`` and ``**`` watched: a repetition past
    ``MAX_RENDER_CHARS`` or a power past ``_MAX_INT_BITS`` is refused before it is built
    (no constant folding of them either, so a template cannot build one at start-up)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and _is_int(left) and _is_int(right) and right > 0 \
                and abs(left) > 1 and right * abs(left).bit_length() > _MAX_INT_BITS:
            raise _OverBudget(f"computes a number of more than {_MAX_INT_BITS} bits")
        if operator == "*":
            seq, times = (left, right) if _is_int(right) else (right, left)
            if isinstance(seq, str | list | tuple) and _is_int(times) \
                    and len(seq) * times > MAX_RENDER_CHARS:
                raise _OverBudget(f"repeats past {MAX_RENDER_CHARS:,} characters")
        return super().call_binop(context, operator, left, right)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _StrictUndefined(StrictUndefined):
    """StrictUndefined whose message names the variable, never the object's value."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        if self._undefined_hint:
            return self._undefined_hint
        if self._undefined_obj is missing:
            return f"undefined variable {self._undefined_name!r}"
        return (f"{type(self._undefined_obj).__name__} has no attribute or key "
                f"{self._undefined_name!r}")


# ---------------------------------------------------------------- the set


class TemplateSet:
    """The templates of one channel (or several), by template id.

    Build it with ``from_directory`` or ``from_mapping``. A directory is read lazily,
    one version folder the first time its id is rendered, so a version deployed
    while workers run is found without a restart; a version once read whole (an SMS
    file, or a subject and a body) is cached.
    """

    def __init__(self, source: Callable[[str], Files | None], *,
                 known_ids: Callable[[], list[str]],
                 max_sms_segments: int = DEFAULT_MAX_SMS_SEGMENTS) -> None:
        if max_sms_segments < 1:
            raise ConfigurationError("templates.max_sms_segments", "must be at least 1")
        self.max_sms_segments = max_sms_segments
        self._source = source
        self._known_ids = known_ids
        common: dict[str, Any] = {"undefined": _StrictUndefined, "loader": _NoIncludes(),
                                  "keep_trailing_newline": False}
        self._text_env = _BudgetedEnvironment(autoescape=False, **common)
        self._html_env = _BudgetedEnvironment(autoescape=True, **common)
        for env in (self._text_env, self._html_env):
            env.globals["range"] = _bounded_range
        self._compiled: dict[str, dict[str, Template | RenderError]] = {}
        #: Per version, per file: the variables every render reads (template_variables).
        self._reads: dict[str, dict[str, frozenset[str]]] = {}

    @classmethod
    def from_directory(cls, root: str | Path, *,
                       max_sms_segments: int = DEFAULT_MAX_SMS_SEGMENTS) -> TemplateSet:
        """Templates in ``<root>/<name>/v<N>/`` folders."""
        folder = Path(root)
        if not folder.is_dir():
            raise ConfigurationError("templates", f"{str(folder)!r} is not a directory")
        return cls(_directory_source(folder), known_ids=lambda: list(_template_ids(folder)),
                   max_sms_segments=max_sms_segments)

    @classmethod
    def from_mapping(cls, templates: Mapping[str, Mapping[str, str]], *,
                     max_sms_segments: int = DEFAULT_MAX_SMS_SEGMENTS) -> TemplateSet:
        """Templates in memory: ``{"weekly-digest/v3": {"subject.txt": "…", …}}``."""
        files: dict[str, dict[str, str]] = {}
        for template_id, contents in templates.items():
            where = f"templates.{template_id}"
            if not isinstance(template_id, str) or not TEMPLATE_ID.match(template_id):
                raise ConfigurationError(where, "a template id must be NAME/vN, "
                                                "e.g. 'weekly-digest/v3'")
            unknown = sorted(set(contents) - TEMPLATE_FILES)
            if unknown:
                raise ConfigurationError(where, f"unknown file(s) {', '.join(unknown)}; known: "
                                                f"{', '.join(sorted(TEMPLATE_FILES))}")
            for file, text in contents.items():
                if not isinstance(text, str):
                    raise ConfigurationError(f"{where}.{file}", "must be text")
            files[template_id] = dict(contents)
        return cls(files.get, known_ids=lambda: sorted(files),
                   max_sms_segments=max_sms_segments)

    # ------------------------------------------------------------ compiling

    def _version(self, template_id: str) -> dict[str, Template | RenderError]:
        cached = self._compiled.get(template_id)
        if cached is not None:
            return cached
        parse_template_id(template_id)
        files = self._source(template_id)
        if files is None:
            # Not cached: the version may be deployed in a moment.
            raise RenderError(f"template {template_id!r} not found", kind="unknown_template")
        compiled: dict[str, Template | RenderError] = {}
        reads: dict[str, frozenset[str]] = {}
        for file, text in files.items():
            compiled[file], reads[file] = self._compile(template_id, file, text)
        if any(all(f in files for f in needed) for needed in REQUIRED_FILES.values()):
            # Cached once whole for one kind: a folder read while it is being copied
            # (its subject there, its body not yet) is read again at the next render.
            self._compiled[template_id] = compiled
        self._reads[template_id] = reads  # read again with the files, until cached
        return compiled

    def _compile(self, template_id: str, file: str, text: str
                 ) -> tuple[Template | RenderError, frozenset[str]]:
        """The file compiled (or why not), and the variables every render of it reads."""
        env = self._html_env if file.endswith(".html") else self._text_env
        try:
            tree = env.parse(text)
            if any(True for _ in meta.find_referenced_templates(tree)):
                # Found now, at start-up, rather than as every send's rejection.
                return RenderError(f"template {template_id!r} {file}: includes, imports or "
                                   "extends another template, but a version must be "
                                   "self-contained", kind="syntax"), frozenset()
            # Compiled from the tree parsed once; read from it once, too.
            reads = always_read(tree) - PROVIDED - frozenset(env.globals)
            return env.from_string(tree), reads
        except TemplateSyntaxError as exc:
            return RenderError(f"template {template_id!r} {file}: syntax error on line "
                               f"{exc.lineno}: {exc.message}", kind="syntax"), frozenset()

    def unprovided(self, template_id: str, kind: str, names: Collection[str]
                   ) -> tuple[str, str] | None:
        """The first variable that every render of ``template_id`` for a channel of
        ``kind`` reads and ``names`` (the data's) lacks, with the file that reads it, as
        ``(variable, file)``; None when the data has them all, or the version cannot be
        read now (``missing`` says why). What counts is ``template_variables``' rule:
        guarded (``is defined``), defaulted and conditional uses never do."""
        try:
            self._version(template_id)
        except RenderError:
            return None
        reads = self._reads.get(template_id, {})
        order = REQUIRED_FILES.get(kind, ()) + ((HTML,) if kind == "email" else ())
        for file in order:
            lacking = sorted(reads.get(file, frozenset()) - set(names))
            if lacking:
                return lacking[0], file
        return None

    def missing(self, template_id: str, kind: str | None = None) -> str | None:
        """Why ``template_id`` is not a version of this set (a malformed id, or no such
        version now), or, with a channel ``kind``, lacks a file that kind needs
        (``email``: subject and body; ``sms``: sms); None when it is whole."""
        try:
            compiled = self._version(template_id)
        except RenderError as exc:
            return exc.reason
        for file in REQUIRED_FILES.get(kind or "", ()):
            if file not in compiled:
                return f"template {template_id!r} {file}: missing, and {kind} needs it"
        return None

    def compile_all(self) -> list[RenderError]:
        """Compile every template this set can find now; return the failures.

        For a start-up or CI check: rendering compiles lazily anyway.
        """
        failures: list[RenderError] = []
        for template_id in self._known_ids():
            try:
                compiled = self._version(template_id)
            except RenderError as exc:
                failures.append(exc)
                continue
            failures.extend(c for c in compiled.values() if isinstance(c, RenderError))
        return failures

    # ------------------------------------------------------------ rendering

    def render(self, template_id: str, channel_kind: str, data: Mapping[str, Any],
               recipient_id: str) -> Content:
        """Render the message of ``template_id`` for a channel kind (``email``/``sms``).

        The template sees the keys of ``data`` and ``recipient_id`` (the intent's,
        which wins over a data key of that name). Raises RenderError.
        """
        if channel_kind not in ("email", "sms"):
            raise RenderError(f"template {template_id!r}: unknown channel kind "
                              f"{_short_id(channel_kind)}", kind="bad_id")
        compiled = self._version(template_id)
        if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
            raise RenderError(f"template {template_id!r}: data is not a JSON object",
                              kind="bad_data")
        context = {**data, "recipient_id": recipient_id}
        render = _Renderer(template_id, compiled, context)
        budget = _DEADLINE.set(time.perf_counter() + RENDER_BUDGET_S)
        try:
            return self._content(template_id, channel_kind, compiled, render)
        finally:
            _DEADLINE.reset(budget)

    def _content(self, template_id: str, channel_kind: str,
                 compiled: Mapping[str, Template | RenderError], render: _Renderer
                 ) -> Content:
        if channel_kind == "sms":
            text = render(SMS, required_for="sms").strip()
            if not text:
                raise RenderError(f"template {template_id!r} {SMS}: renders empty", kind="empty")
            length = sms_length(text)
            if length.segments > self.max_sms_segments:
                raise RenderError(
                    f"template {template_id!r} {SMS}: renders to {length.segments} "
                    f"{length.encoding} segments ({length.units} units), the limit is "
                    f"{self.max_sms_segments}", kind="too_long")
            return Content(text=text)
        subject = render(SUBJECT, required_for="email").strip()
        if not subject:
            raise RenderError(f"template {template_id!r} {SUBJECT}: renders empty", kind="empty")
        if "\n" in subject or "\r" in subject:
            raise RenderError(f"template {template_id!r} {SUBJECT}: renders to more than "
                              "one line", kind="invalid")
        if _NOT_IN_A_HEADER.search(subject):
            # U+2028, a form feed, NUL...: no header may carry them (SMTP refused the
            # message, an HTTP provider got them raw).
            raise RenderError(f"template {template_id!r} {SUBJECT}: renders a control or "
                              "line-break character", kind="invalid")
        if len(subject) > MAX_SUBJECT_CHARS:
            raise RenderError(f"template {template_id!r} {SUBJECT}: renders to "
                              f"{len(subject)} characters, the limit is {MAX_SUBJECT_CHARS}",
                              kind="too_long")
        body = render(BODY, required_for="email")
        if not body.strip():
            raise RenderError(f"template {template_id!r} {BODY}: renders empty", kind="empty")
        html = render(HTML) if HTML in compiled else None
        if html is not None and not html.strip():
            raise RenderError(f"template {template_id!r} {HTML}: renders empty", kind="empty")
        return Content(text=body, subject=subject, html=html)


class _Renderer:
    """Renders the files of one version with one context, turning every failure into
    a RenderError whose detail is scrubbed of the context's values."""

    def __init__(self, template_id: str, compiled: Mapping[str, Template | RenderError],
                 context: Mapping[str, Any]) -> None:
        self.template_id = template_id
        self.compiled = compiled
        self.context = context

    def __call__(self, file: str, *, required_for: str | None = None) -> str:
        where = f"template {self.template_id!r} {file}"
        template = self.compiled.get(file)
        if template is None:
            raise RenderError(f"{where}: missing, and {required_for} needs it",
                              kind="missing_file")
        if isinstance(template, RenderError):  # a compile error, cached: raise a fresh one
            raise RenderError(template.reason, kind=template.kind)
        try:
            # Streamed, so the budget is checked between chunks too.
            chunks: list[str] = []
            size = 0
            for chunk in template.generate(self.context):
                size += len(chunk)
                if size > MAX_RENDER_CHARS:
                    raise _OverBudget(f"renders past {MAX_RENDER_CHARS:,} characters")
                if not len(chunks) & 255:
                    _on_time()
                chunks.append(chunk)
            return "".join(chunks)
        except _OverBudget as exc:
            raise RenderError(f"{where}: {exc}", kind="too_long") from None
        except SecurityError as exc:
            raise self._error(where, "blocked by the sandbox", exc, "security") from None
        except UndefinedError as exc:
            raise self._error(where, "", exc, "undefined") from None
        except TemplateNotFound as exc:
            raise self._error(where, "includes another template, but a version must be "
                              "self-contained", exc, "failed", detail=False) from None
        except TemplateRuntimeError as exc:
            raise self._error(where, "", exc, "failed") from None
        except Exception as exc:
            # Anything else may quote a value in its message (int('…')): name the type only.
            raise RenderError(f"{where}: rendering failed ({type(exc).__name__})",
                              kind="failed") from None

    def _error(self, where: str, label: str, exc: Exception, kind: RenderErrorKind, *,
               detail: bool = True) -> RenderError:
        text = _scrub(str(exc), self.context) if detail else ""
        parts = [p for p in (label, text) if p]
        return RenderError(f"{where}: {': '.join(parts)}", kind=kind)


def _scrub(text: str, context: Mapping[str, Any]) -> str:
    """``text`` with every value of ``context`` (and its repr form) replaced by ``…``.

    Single characters and blanks stay: they identify no one, and removing every single
    letter would leave nothing readable.
    """
    secrets: set[str] = set()
    stack: list[Any] = [context]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, str):
            secrets.update((value, repr(value)[1:-1]))
        elif value is not None and not isinstance(value, bool):
            secrets.add(str(value))
    for secret in sorted((s for s in secrets if len(s) >= 2 and not s.isspace()), key=len,
                         reverse=True):
        text = text.replace(secret, "…")
    return text
