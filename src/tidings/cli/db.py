"""``tidings db migrate``: create or upgrade the store's schema."""

from __future__ import annotations

from typing import Any

from tidings.cli import textout
from tidings.cli.common import ConfigOpt, JsonOpt, StoreOpt, _emit, _run, _settings, db_app


@db_app.command("migrate")
def db_migrate(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Create or upgrade the schema to this version of tidings."""
    from tidings.core.clock import SystemClock
    from tidings.runtime import open_store

    async def work() -> dict[str, Any]:
        settings = _settings(config, store)
        st, transport = await open_store(settings.store)
        try:
            applied = await st.migrate(now=SystemClock(settings.clock_offset_s).now())
            return {"store": settings.store, "applied": applied,
                    "version": await st.schema_version()}
        finally:
            await transport.close()
            await st.close()
    result = _run(work)
    _emit(as_json, result, textout.migrated(result["store"], result["applied"],
                                            result["version"]))
