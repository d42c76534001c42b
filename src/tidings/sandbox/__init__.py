"""The sandbox provider: a fake email/SMS provider that fails the way real ones do.

``SandboxCore`` decides and counts; ``sandbox.server`` serves it over HTTP; the
adapters in ``tidings.providers.sandbox`` call it over HTTP or in-process.

The names are imported when first used (PEP 562): a worker whose provider is the
sandbox imports the core and the adapter, not the server (aiohttp.web).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.core.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from tidings.sandbox.core import (
        AnswerKind,
        LatencySpec,
        SandboxAnswer,
        SandboxConfig,
        SandboxCore,
    )
    from tidings.sandbox.server import (
        SandboxServer,
        create_app,
        load_config,
        main_sandbox,
        run_forever,
        serve,
    )

__all__ = [
    "AnswerKind",
    "LatencySpec",
    "SandboxAnswer",
    "SandboxConfig",
    "SandboxCore",
    "SandboxServer",
    "create_app",
    "load_config",
    "main_sandbox",
    "run_forever",
    "serve",
]

#: Where each name lives.
_HOMES = {
    "AnswerKind": "tidings.sandbox.core",
    "LatencySpec": "tidings.sandbox.core",
    "SandboxAnswer": "tidings.sandbox.core",
    "SandboxConfig": "tidings.sandbox.core",
    "SandboxCore": "tidings.sandbox.core",
    "SandboxServer": "tidings.sandbox.server",
    "create_app": "tidings.sandbox.server",
    "load_config": "tidings.sandbox.server",
    "main_sandbox": "tidings.sandbox.server",
    "run_forever": "tidings.sandbox.server",
    "serve": "tidings.sandbox.server",
}


__getattr__ = lazy_getattr("tidings.sandbox", _HOMES, globals())
