"""One error shape for every refusal: ``{"error", "field", "message"}`` (plus
``errors`` when a body has several problems), so a client always learns which field."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from tidings.core.errors import ConfigurationError, FieldError, StoreError, TransportError
from tidings.core.redaction import scrub

log = logging.getLogger("tidings.api")

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
          415: "unsupported_media_type", 422: "invalid", 429: "too_many_requests",
          503: "unavailable"}


class ErrorItem(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    """What every 4xx/5xx answer carries."""

    error: str
    field: str
    message: str
    errors: list[ErrorItem] | None = None


class ApiError(Exception):
    """A refusal with its status, the field it is about, and extra headers."""

    def __init__(self, status: int, field: str, message: str, *,
                 headers: Mapping[str, str] | None = None, reason: str | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.status = status
        self.field = field
        self.message = message
        self.headers = dict(headers or {})
        self.reason = reason or _CODES.get(status, "error")
        """A label for the refusal counters (``paused`` and ``rate`` tell 429s apart)."""


def error_response(status: int, field: str, message: str, *,
                   errors: Sequence[tuple[str, str]] | None = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    # A field name or message may quote what the client sent: never an address or a
    # phone number in an error body (nor, through it, in a client's or proxy's logs).
    body: dict[str, Any] = {"error": _CODES.get(status, "error"), "field": _safe(field),
                            "message": _safe(message)}
    if errors:
        body["errors"] = [{"field": _safe(f), "message": _safe(m)} for f, m in errors]
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _safe(text: str) -> str:
    """``text`` scrubbed, and encodable: a lone surrogate the client sent (in a data
    key, say) is shown escaped, where it would make the answer itself fail (a 500)."""
    return scrub(text).encode("utf-8", "backslashreplace").decode("utf-8")


def location(loc: Sequence[Any]) -> str:
    """``("body", "payload", "customer_id")`` -> ``body.payload.customer_id``;
    list indexes as ``[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "request"


def install(app: FastAPI, refused: Callable[[str, int, str], None]) -> None:
    """Register the handlers that turn every error into the shape above; each refusal
    is reported to ``refused(path, status, reason)`` (the metrics count them)."""

    def report(request: Request, status: int, reason: str | None = None) -> None:
        refused(request.url.path, status, reason or _CODES.get(status, "error"))

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        report(request, exc.status, exc.reason)
        return error_response(exc.status, exc.field, exc.message, headers=exc.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        items = []
        for err in exc.errors():
            loc = list(err.get("loc", ()))
            if loc and loc[0] == "body" and err.get("type") == "json_invalid":
                loc = ["body"]
            items.append((location(loc), str(err.get("msg", "is invalid"))))
        first_field, first_message = items[0] if items else ("request", "is invalid")
        report(request, 422)
        return error_response(422, first_field, first_message, errors=items)

    async def on_field_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, FieldError)
        status = 503 if isinstance(exc, ConfigurationError) else 422
        report(request, status)
        return error_response(status, exc.field, exc.message)

    async def on_store_error(request: Request, exc: Exception) -> JSONResponse:
        # The store or queue is down or refused: the caller may retry; nothing was lost.
        log.error("store or transport failure: %s", exc)
        report(request, 503)
        return error_response(503, "store", "temporarily unavailable; retry later",
                              headers={"Retry-After": "5"})

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        report(request, exc.status_code)
        # 400: FastAPI could not read the body (nested too deeply, a number too long).
        field = {400: "body", 404: "path", 405: "path"}.get(exc.status_code, "request")
        return error_response(exc.status_code, field, str(exc.detail), headers=exc.headers)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(FieldError, on_field_error)
    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(TransportError, on_store_error)
    app.add_exception_handler(StarletteHTTPException, on_http)
