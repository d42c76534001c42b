"""The sandbox provider: a fake email/SMS provider that fails the way real ones do.

``SandboxCore`` decides and counts; ``sandbox.server`` serves it over HTTP; the
adapters in ``tidings.providers.sandbox`` call it over HTTP or in-process.
"""

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
