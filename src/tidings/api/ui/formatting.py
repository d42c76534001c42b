"""How the dashboard writes numbers, durations, rates, shares and times (the
templates' filters), and the scrubbing of free text that might carry an address."""

from __future__ import annotations

from datetime import UTC, datetime

from tidings.core import redaction

_REDACTED = "‹redacted›"


def fmt_count(value: int | float | None) -> str:
    return "—" if value is None else f"{int(value):,}"


def fmt_duration(seconds: float | None) -> str:
    """``42 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "—"
    if 0 < seconds < 0.5:
        return "< 1 s"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86400} d" + (f" {s % 86400 // 3600} h" if s % 86400 // 3600 else "")


def fmt_rate(per_s: float | None) -> str:
    """Per second, or per minute when under one every ten seconds."""
    if per_s is None:
        return "—"
    if per_s == 0:
        return "0 /s"
    if per_s < 0.1:
        return f"{per_s * 60:.1f} /min"
    return f"{per_s:,.1f} /s"


def fmt_percent(share: float | None) -> str:
    """Rounded down, so 99.96 % never reads as a perfect 100.0 %."""
    if share is None:
        return "—"
    return f"{int(share * 1000) / 10:.1f} %"


def fmt_time(at: float | None) -> str:
    if at is None:
        return "—"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_iso(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, UTC).isoformat()


def fmt_ago(at: float | None, now: float) -> str:
    if at is None:
        return "—"
    delta = now - at
    if abs(delta) < 1:
        return "just now"
    return f"{fmt_duration(delta)} ago" if delta > 0 else f"in {fmt_duration(-delta)}"


def scrub(text: str | None) -> str:
    """Reasons never carry addresses by design; a provider's free text might, so
    pages scrub what looks like one (the same shapes as logs and API errors)."""
    return "" if text is None else redaction.scrub(text, address=_REDACTED, number=_REDACTED)
