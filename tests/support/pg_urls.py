"""The test URLs' search_path (tests/conftest.py gives each test a schema of its own,
``?options=-csearch_path%3D<schema>``): which schema it names, and the same database
without it, as an application whose search_path lacks tidings' schema connects."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit


def schema_of(url: str) -> str:
    """The schema ``url``'s search_path names."""
    return parse_qs(urlsplit(url).query)["options"][0].split("=", 1)[1]


def without_search_path(url: str) -> str:
    """``url`` with no search_path of its own: the database's default ("$user", public)."""
    return urlunsplit(urlsplit(url)._replace(query=""))
