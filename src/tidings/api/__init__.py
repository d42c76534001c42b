"""The HTTP API (``tidings api``): built by ``create_app(runtime)`` from the composition
root; ``/openapi.json`` documents every route.

=======================================  ==========  ========================================
route                                    scope       what
=======================================  ==========  ========================================
POST /v1/trigger/{campaign}              trigger     one bounded admission pass (or HMAC)
POST /v1/queue/publish                   publish     managed-queue style publish, idempotent
GET  /v1/status                          viewer      per channel and campaign, SLI, drain
GET  /v1/plan                            viewer      drain time vs freshness deadline
GET  /v1/timeline?key=|recipient=        viewer      selected? enqueued? accepted? + events
GET  /v1/dead-letters/{channel}          viewer      dead letters with their intents' state
POST /v1/dead-letters/{channel}/redrive  operator    reopen dead intents, requeue messages
POST /v1/admission/pause|resume          operator    campaign or channel admission switch
POST /v1/replay/{campaign}/{date}        operator    admit a past date as a replay
POST /v1/cancel                          operator    cancel a key before its send
GET  /v1/suppressions[/export|/history]  operator    the list (JSON pages, CSV); who changed one
POST /v1/suppressions[/remove|/import]   operator    suppress, take off (audited), import CSV
GET  /metrics                            viewer      Prometheus
GET  /healthz, /openapi.json, /docs      public
=======================================  ==========  ========================================

``operator`` includes ``viewer``. Tokens: ``tidings token create --scope …``.

The names are imported when first used (PEP 562): ``tidings token create`` and the
other commands that read or write tokens import ``tidings.api.tokens``, not FastAPI
(half of such a command's start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.core.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from tidings.api.app import create_app
    from tidings.api.auth import ScopeMap, default_scope_map, sign
    from tidings.api.tokens import Scope

__all__ = ["Scope", "ScopeMap", "create_app", "default_scope_map", "sign"]

#: Where each name lives.
_HOMES = {
    "Scope": "tidings.api.tokens",
    "ScopeMap": "tidings.api.auth",
    "create_app": "tidings.api.app",
    "default_scope_map": "tidings.api.auth",
    "sign": "tidings.api.auth",
}

__getattr__ = lazy_getattr("tidings.api", _HOMES, globals())
