"""The HTTP API's commands: ``tidings api`` serves it (optionally as N supervised
processes on one port) and ``tidings token create|revoke|list`` manage its tokens."""

from __future__ import annotations

import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import (
    ConfigOpt,
    JsonOpt,
    StoreOpt,
    _emit,
    _fail,
    _settings,
    _stderr,
    _when,
    _with_runtime,
    app,
    token_app,
)
from tidings.core import logs
from tidings.core.errors import InvalidInput
from tidings.runtime import Runtime


@app.command("api")
def api_command(
    config: ConfigOpt = None, store: StoreOpt = None,
    host: Annotated[str | None, typer.Option(help="Address (default: api.host).")] = None,
    port: Annotated[int | None, typer.Option(
        min=0, max=65535, help="Port (default: api.port; 0 picks a free one).")] = None,
    processes: Annotated[int, typer.Option(
        min=0, help="API processes sharing the port (0: one per CPU core).")] = 1,
) -> None:
    """Serve the HTTP API: cron trigger, queue publish, operator endpoints, /metrics.

    With --processes N the command supervises N API processes, each with its own
    runtime, all listening on the same port (SO_REUSEPORT: the kernel spreads the
    connections); one that dies is started again, and SIGTERM is passed on to all.
    """
    if processes == 1:
        _serve_api(config, store, host, port, False)
        return
    from tidings.api.serve import shared_socket
    from tidings.processes.supervisor import Supervisor

    s = _settings(config, store).api
    host = host or s.host
    # Hold the port (bound, never listening, so it takes no connection) while the
    # children bind theirs: port 0 becomes one free port for all of them.
    try:
        holder = shared_socket(host, s.port if port is None else port)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{s.port if port is None else port}: "
              f"{exc.strerror or exc}")
    count = processes or os.cpu_count() or 1
    supervisor = Supervisor(count, _serve_api,
                            (config, store, host, holder.getsockname()[1], True),
                            name="tidings-api")
    try:
        raise typer.Exit(supervisor.run())
    finally:
        holder.close()


def _serve_api(config: Path | None, store: str | None, host: str | None, port: int | None,
               reuse_port: bool) -> None:
    from tidings.api.serve import serve_api, use_uvloop

    if reuse_port:  # a --processes child starts here: set its logs up again
        logs.configure_logging(*logs.from_env(os.environ))
    use_uvloop()

    def go(runtime: Runtime) -> Awaitable[None]:
        s = runtime.settings.api
        return serve_api(runtime, host=host or s.host, port=s.port if port is None else port,
                         reuse_port=reuse_port)
    _with_runtime(config, store, go, migrate="new")


@token_app.command("create")
def token_create(
    scope: Annotated[list[str], typer.Option(
        "--scope", help="viewer, operator, trigger or publish (repeat, or comma-separate).")],
    name: Annotated[str, typer.Option(help="Who or what holds it, for the record.")] = "token",
    expires_in: Annotated[str | None, typer.Option(
        "--expires-in", metavar="DURATION",
        help="Refuse it after this long: 90s, 15m, 12h, 30d (at most 36500d). "
             "Default: never.")] = None,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create a token. It is shown once: only its hash is stored."""
    from tidings.api.tokens import check_lifetime, new_token
    from tidings.core.durations import parse_duration

    try:
        lifetime = (None if expires_in is None
                    else check_lifetime(parse_duration(expires_in, "expires_in")))
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message, param_hint="--expires-in") from None

    async def go(runtime: Runtime) -> dict[str, Any]:
        text, row = new_token(name=name, scopes=scope, now=runtime.clock.now(),
                              expires_in_s=lifetime)
        await runtime.store.api_token_insert(row)
        return {"id": row.id, "name": row.name, "scopes": list(row.scopes), "token": text,
                "created_at": row.created_at, "expires_at": row.expires_at}
    result = _with_runtime(config, store, go)
    if as_json:
        _emit(True, result)
        return
    until = f", expires {_when(result['expires_at'])}" if result["expires_at"] else ""
    _stderr().print(f"token {result['id']} ({', '.join(result['scopes'])}) for {result['name']}"
                  f"{until}; shown once, store it now:")
    typer.echo(result["token"])


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(
                     metavar="ID", help="The token's id (the part after tid_), or the token.")],
                 config: ConfigOpt = None, store: StoreOpt = None,
                 as_json: JsonOpt = False) -> None:
    """Revoke a token at once, on every API process."""
    ident = token_id.split("_")[1] if token_id.startswith("tid_") else token_id

    async def go(runtime: Runtime) -> dict[str, Any]:
        now = runtime.clock.now()
        row = await runtime.store.api_token_revoke(ident, now=now)
        if row is None:
            raise typer.BadParameter(f"no token has id {ident!r}", param_hint="ID")
        return _token_row(row, now)
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.revoked(result))


@token_app.command("list")
def token_list(config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False
               ) -> None:
    """Every token: id, name, scopes, created, expires, revoked (never the secret)."""
    async def go(runtime: Runtime) -> list[dict[str, Any]]:
        now = runtime.clock.now()
        return [_token_row(row, now) for row in await runtime.store.api_token_list()]
    rows = _with_runtime(config, store, go)
    table = textout.table("id", "name", "scopes", "created", "expires", "revoked",
                          title="API tokens")
    for r in rows:
        expires = _when(r["expires_at"]) + (" (expired)" if r["expired"] else "")
        table.add_row(r["id"], r["name"], ", ".join(r["scopes"]), _when(r["created_at"]),
                      expires or "never", _when(r["revoked_at"]))
    _emit(as_json, {"tokens": rows}, table)


def _token_row(row: Any, now: float) -> dict[str, Any]:
    from tidings.api.tokens import expired

    return {"id": row.id, "name": row.name, "scopes": list(row.scopes),
            "created_at": row.created_at, "expires_at": row.expires_at,
            "expired": expired(row, now), "revoked_at": row.revoked_at,
            "revoked": row.revoked_at is not None}
