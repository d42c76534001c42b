"""``/metrics`` for Prometheus and ``/healthz`` for load balancers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tidings.api.context import ctx
from tidings.api.metrics import CONTENT_TYPE

router = APIRouter(tags=["observe"])


@router.get("/healthz", summary="Liveness: the process answers and its store responds")
async def healthz(request: Request) -> dict[str, Any]:
    version = await ctx(request).runtime.store.schema_version()
    return {"ok": True, "schema_version": version}


@router.get("/metrics", response_class=Response, summary="Prometheus metrics",
            responses={200: {"content": {CONTENT_TYPE.split(";")[0]: {}}}})
async def metrics(request: Request) -> Response:
    """The fleet's numbers (read from the store) and this process's refusal counters."""
    m = ctx(request).metrics
    await m.refresh()
    return Response(m.render(), media_type=CONTENT_TYPE)
