"""Services inside an application's own event loop: the public home of ``embedded``.

    from tidings.embedded import embedded

    async with await tidings.build_runtime(settings) as runtime, \\
               embedded(runtime, channels=["email"], scheduler=True):
        ...                                # serve; the workers drain when it exits

``embedded`` runs a worker per channel (with its reconciler and heartbeat) and, with
``scheduler=True``, the admission loop, as tasks of the running loop; ``Embedded`` is
what it yields (``failed()`` for a health probe). Public: these names keep their path
(docs/compatibility.md); the implementation is ``tidings.processes.hosted``.
"""

from tidings.processes.hosted import Embedded, embedded

__all__ = ["Embedded", "embedded"]
