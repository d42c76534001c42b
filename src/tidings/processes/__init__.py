"""tidings as processes: the long-running services (worker, scheduler, reconciler),
their signals and drain, the supervisor that runs several, and live progress.

Imports ``tidings.runtime`` and the stages; the CLI and the API start them.
"""
