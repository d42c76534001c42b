"""Import paths that moved, kept working with a ``DeprecationWarning`` for a release.

``tidings.model``, ``tidings.worker``, ``tidings.settings`` and the other modules of
the flat tree before the stage packages (and the names renamed on 2026-12-01:
``tidings.schedule``, ``tidings.transports.pg``, ``tidings.transports.sql``) still
import: a finder on ``sys.meta_path`` answers each old path with a module that warns
once, naming the new path, and hands every attribute over from where it lives now.
A name that moved on its own (``tidings.model.Accepted`` is
``tidings.core.outcomes.Accepted``) is listed beside its module.

Nothing inside tidings imports an old path (``tests/unit/test_moved.py`` holds each
one to its warning and its names).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Loader as _LoaderBase
    from importlib.abc import MetaPathFinder as _FinderBase
else:
    # The import system asks a finder and a loader only for the methods below; the
    # abstract bases would import importlib.abc, and with it importlib.resources, in
    # every tidings process (12 ms of each start) for nothing.
    _LoaderBase = _FinderBase = object

#: old module -> (its new home, {name that lives elsewhere: "module" or "module:attr"}).
MOVED: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "tidings.addresses": ("tidings.core.addresses", {}),
    "tidings.audience": ("tidings.admission.audience", {}),
    "tidings.bulk": ("tidings.operate.bulk", {}),
    "tidings.campaign": ("tidings.admission.campaign", {}),
    "tidings.capacity": ("tidings.operate.capacity", {}),
    "tidings.claims": ("tidings.core.claims", {}),
    "tidings.clock": ("tidings.core.clock", {}),
    "tidings.compose": ("tidings.delivery.compose", {}),
    "tidings.cron": ("tidings.core.cron", {}),
    "tidings.durations": ("tidings.core.durations", {}),
    "tidings.errors": ("tidings.core.errors", {}),
    "tidings.gc_tuning": ("tidings.processes.gc_tuning", {}),
    "tidings.group_commit": ("tidings.delivery.group_commit", {}),
    "tidings.guardrails": ("tidings.operate.guardrails", {}),
    "tidings.holds": ("tidings.operate.holds", {
        "GATE_TTL_S": "tidings.delivery.hold_gate",
        "HoldGate": "tidings.delivery.hold_gate",
    }),
    "tidings.intake": ("tidings.admission.intake", {}),
    "tidings.keys": ("tidings.core.keys", {}),
    "tidings.lazy_names": ("tidings.core.lazy_names", {}),
    "tidings.liveness": ("tidings.core.liveness", {}),
    "tidings.logs": ("tidings.core.logs", {}),
    "tidings.metrics": ("tidings.api.metrics", {}),
    "tidings.model": ("tidings.core.model", {
        "Accepted": "tidings.core.outcomes",
        "Lookup": "tidings.core.outcomes",
        "LookupHint": "tidings.core.outcomes",
        "LookupStatus": "tidings.core.outcomes",
        "MAX_KEY_LENGTH": "tidings.core.keys",
        "Outcome": "tidings.core.outcomes",
        "Permanent": "tidings.core.outcomes",
        "RateLimited": "tidings.core.outcomes",
        "Transient": "tidings.core.outcomes",
        "Uncertain": "tidings.core.outcomes",
        "campaign_key": "tidings.core.keys",
        "campaign_key_maker": "tidings.core.keys",
        "campaign_key_parts": "tidings.core.keys",
        "check_recipient_ids": "tidings.core.keys",
        "notify_key": "tidings.core.keys",
    }),
    "tidings.operations": ("tidings.operate.operations", {}),
    "tidings.outcomes": ("tidings.core.outcomes", {}),
    "tidings.pacing": ("tidings.delivery.pacing", {}),
    "tidings.pacing.algorithm": ("tidings.core.pacing", {}),
    "tidings.pacing.memory": ("tidings.delivery.pacing.memory", {}),
    "tidings.pacing.pacer": ("tidings.delivery.pacing.pacer", {}),
    "tidings.policy": ("tidings.core.policy", {}),
    "tidings.preferences": ("tidings.core.preferences", {}),
    "tidings.processes.embedded": ("tidings.processes.hosted", {}),
    "tidings.progress": ("tidings.processes.progress", {}),
    "tidings.providers.config": ("tidings.config.providers", {
        "SOURCES": "tidings.providers.http",
        "build_provider_from": "tidings.providers.build",
    }),
    "tidings.providers.defaults": ("tidings.config.endpoints", {}),
    "tidings.providers.redaction": ("tidings.core.redaction", {}),
    "tidings.raised": ("tidings.delivery.raised", {}),
    "tidings.readmodel": ("tidings.operate.readmodel", {}),
    "tidings.reconciler": ("tidings.recovery.reconciler", {}),
    "tidings.relay": ("tidings.admission.relay", {}),
    "tidings.retention": ("tidings.recovery.retention", {
        "EVENT_SKEW_S": "tidings.core.retention",
        "PARTITIONS_AHEAD": "tidings.core.retention",
        "PARTITION_S": "tidings.core.retention",
        "PENDING_STATES": "tidings.core.retention",
        "PRUNABLE_STATES": "tidings.core.retention",
        "PartitionPlan": "tidings.core.retention",
        "day_partition": "tidings.core.retention",
        "day_start": "tidings.core.retention",
        "parse_partition": "tidings.core.retention",
        "pruned_before": "tidings.core.retention",
    }),
    "tidings.rollout": ("tidings.admission.rollout", {}),
    "tidings.scaffold": ("tidings.cli.scaffold", {}),
    "tidings.schedule": ("tidings.core.cron", {}),
    "tidings.scheduler": ("tidings.admission.scheduler", {}),
    "tidings.service": ("tidings.processes.service", {
        "WORKER_GC_YOUNG": "tidings.processes.gc_tuning",
    }),
    "tidings.settings": ("tidings.config.settings", {}),
    "tidings.settings_reference": ("tidings.config.reference", {}),
    "tidings.states": ("tidings.core.states", {}),
    "tidings.supervisor": ("tidings.processes.supervisor", {}),
    "tidings.surrogate": ("tidings.core.surrogate", {}),
    "tidings.templates": ("tidings.delivery.templates", {}),
    "tidings.textout": ("tidings.cli.textout", {}),
    "tidings.transports.pg": ("tidings.transports.postgres", {
        "PgTransport": "tidings.transports.postgres:PostgresTransport",
    }),
    "tidings.transports.pg_listen": ("tidings.transports.postgres_listen", {}),
    "tidings.transports.sql": ("tidings.transports.sqlite", {
        "SqlTransport": "tidings.transports.sqlite:SqliteTransport",
    }),
    "tidings.uncertain": ("tidings.delivery.uncertain", {}),
    "tidings.webhooks.evidence": ("tidings.recovery.evidence", {}),
    "tidings.webhooks.receive": ("tidings.recovery.provider_reports", {}),
    "tidings.worker": ("tidings.delivery.worker", {}),
}


#: The public modules a moved name can be public in, in the order a warning prefers them
#: (``Clock`` is in all three; ``tidings.Clock`` is the one a warning names).
PUBLIC_MODULES = ("tidings", "tidings.providers", "tidings.testing", "tidings.embedded")


def _public_home(name: str, value: object) -> str | None:
    """The public module that exports ``value`` as ``name``, or None."""
    for public in PUBLIC_MODULES:
        module = importlib.import_module(public)
        if name not in getattr(module, "__all__", ()):
            continue
        # tidings resolves its names lazily: its table says where each one lives, so
        # nothing is imported to compare.
        homes: Mapping[str, str] | None = getattr(module, "_HOMES", None)
        if homes is not None and homes.get(name) == getattr(value, "__module__", None):
            return public
        if homes is None and getattr(module, name, None) is value:
            return public
    return None


def _defined_in(value: object, module: str) -> bool:
    # A class or a function knows its module; any other value (a constant, a type alias
    # such as Outcome) is taken as the module's own.
    if isinstance(value, (type, types.FunctionType)):
        return value.__module__ == module
    return True


def public_homes(old: str) -> dict[str, list[str]]:
    """The names an old module hands over that are public, by their public module: the
    names defined in its new home and those listed as moved on their own (a name its
    home merely imports is counted where it is defined)."""
    new, names = MOVED[old]
    home = importlib.import_module(new)
    found: dict[str, list[str]] = {}
    candidates = {n: getattr(home, n) for n in dir(home)
                  if not n.startswith("_") and _defined_in(getattr(home, n), new)}
    candidates.update({n: _resolve(target, n) for n, target in names.items()})
    for name, value in sorted(candidates.items()):
        public = _public_home(name, value)
        if public is not None:
            found.setdefault(public, []).append(name)
    return found


def _warning(old: str) -> str:
    new = MOVED[old][0]
    homes = public_homes(old)
    if not homes:
        return f"{old} moved to {new}; import it from there (the old path goes in a later release)"
    parts = [f"{', '.join(names)} from {public}" for public, names in homes.items()]
    whose = "its" if sum(map(len, homes.values())) == 1 else "their"
    return (f"{old} moved: import {' and '.join(parts)}, {whose} public "
            f"{'homes' if len(homes) > 1 else 'home'} (anything else of it is internal, now "
            f"in {new}; the old path goes in a later release)")


def _resolve(target: str, name: str) -> object:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr or name)


class _MovedModule(types.ModuleType):
    """An old path: every attribute comes from the new home (or from where it moved)."""

    def __init__(self, old: str, new: str, names: Mapping[str, str]) -> None:
        super().__init__(old, f"Moved to {new}.")
        self._tidings_new = new
        self._tidings_names = names

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") or name.startswith("_tidings_"):
            raise AttributeError(name)
        if name in self._tidings_names:
            return _resolve(self._tidings_names[name], name)
        new = importlib.import_module(self._tidings_new)
        try:
            return getattr(new, name)
        except AttributeError:
            raise AttributeError(f"module {self.__name__!r} (now {self._tidings_new!r}) "
                                 f"has no attribute {name!r}") from None

    def __dir__(self) -> list[str]:
        new = importlib.import_module(self._tidings_new)
        return sorted(set(dir(new)) | set(self._tidings_names))


class _Loader(_LoaderBase):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new, names = MOVED[spec.name]
        return _MovedModule(spec.name, new, names)

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED[module.__name__][0]
        warnings.warn(_warning(module.__name__),
                      # 2: the import machinery's own frames are skipped by warnings itself
                      DeprecationWarning, stacklevel=2)
        home = importlib.import_module(new)
        if hasattr(home, "__path__"):  # an old package: its old submodules import too
            module.__path__ = []


class _Finder(_FinderBase):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        is_package = any(other.startswith(fullname + ".") for other in MOVED)
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=is_package)


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once): a real module always wins."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def moved_attribute(package: str, name: str, moved: Mapping[str, str]) -> object:
    """A package's ``__getattr__`` for names it exported before they moved: the name from
    its new module, with a ``DeprecationWarning``; AttributeError for any other."""
    if name not in moved:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(f"{package}.{name} moved to {moved[name]}.{name}; import it from there "
                  "(the old path goes in a later release)", DeprecationWarning, stacklevel=3)
    return _resolve(moved[name], name)
