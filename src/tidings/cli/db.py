"""``tidings db migrate``: create or upgrade the store's schema."""

from __future__ import annotations

from typing import Any

from tidings.cli import textout
from tidings.cli.common import ConfigOpt, JsonOpt, StoreOpt, _emit, _run, _settings, db_app


@db_app.command("migrate")
def db_migrate(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Create or upgrade the schema to this version of tidings."""
    from tidings.processes.commands import migrate_store

    async def work() -> dict[str, Any]:
        settings = _settings(config, store)
        applied, version = await migrate_store(settings)
        return {"store": settings.store, "applied": applied, "version": version}
    result = _run(work)
    _emit(as_json, result, textout.migrated(result["store"], result["applied"],
                                            result["version"]))
