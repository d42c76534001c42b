"""The setting ``transport`` as data: which kind a URL names, its key prefix, and the
URL with its password hidden (``tidings.transports.open`` opens it)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit

#: The store's own queue table.
SQL = "sql"
#: The key or queue-name prefix of a broker transport when its URL names none.
DEFAULT_PREFIX = "tidings"

_SCHEMES = {"redis": "redis", "rediss": "redis", "amqp": "amqp", "amqps": "amqp"}
_EXAMPLES = ('"sql" (the store\'s own queue), "redis://127.0.0.1:6379/0" or '
             '"amqp://guest:guest@127.0.0.1:5672/"')


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: safe for errors and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{host}{slash}{tail}"


def transport_kind(value: str) -> str:
    """``"sql"``, ``"redis"`` or ``"amqp"`` for a valid setting; ValueError (its text
    never quoting a password) otherwise."""
    if value == SQL:
        return SQL
    safe = redact_url(value)
    scheme, sep, _ = value.partition("://")
    kind = _SCHEMES.get(scheme.lower()) if sep else None
    if kind is None:
        raise ValueError(f"{safe!r} is not a transport; use {_EXAMPLES}")
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{safe!r} is not a valid {scheme} URL ({exc})") from None
    if not host:
        raise ValueError(f"{safe!r} names no host; e.g. {_EXAMPLES}")
    if port == 0:
        raise ValueError(f"{safe!r}: port 0 is not a port")
    if kind == "redis" and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise ValueError(f"{safe!r}: a Redis URL's path is its database number (/0)")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"prefix"})
    if unknown:
        raise ValueError(f"{safe!r}: unknown option {unknown[0]!r}; the one option is prefix")
    prefix = query.get("prefix", [DEFAULT_PREFIX])[-1]
    if not prefix or not all(c.isalnum() or c in "-_.:" for c in prefix):
        raise ValueError(f"{safe!r}: prefix must be letters, digits and - _ . : only")
    return kind


def split_prefix(url: str) -> tuple[str, str]:
    """``(url without its prefix option, prefix)`` of a broker URL."""
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    prefix = query.pop("prefix", [DEFAULT_PREFIX])[-1]
    rest = "&".join(f"{k}={v}" for k, values in query.items() for v in values)
    return urlunsplit(parts._replace(query=rest)), prefix
