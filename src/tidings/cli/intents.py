"""One delivery by its key: ``tidings cancel`` (before its send starts) and ``tidings
inspect`` (its ledger row and timeline, or a recipient's deliveries)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tidings.cli import textout
from tidings.cli.common import ConfigOpt, JsonOpt, StoreOpt, _emit, _stdout, _with_runtime, app
from tidings.runtime import Runtime


@app.command()
def cancel(key: str, config: ConfigOpt = None, store: StoreOpt = None,
           as_json: JsonOpt = False) -> None:
    """Cancel an intent (or every channel of a notify key) before its send starts.

    Exit code 1 when it was too late for every one of them (sent, or finished), so a
    script can tell."""
    async def go(runtime: Runtime) -> dict[str, Any]:
        return {k: (v.value if v else None) for k, v in (await runtime.cancel(key)).items()}
    result = _with_runtime(config, store, go)
    _emit(as_json, result, textout.cancelled(result))
    if result and not any(state in ("cancelled", "claimed") for state in result.values()):
        raise typer.Exit(1)


@app.command()
def inspect(
    key: Annotated[str | None, typer.Argument(help="An intent key or a notify key.")] = None,
    recipient: Annotated[str | None, typer.Option(
        help="A recipient id, or its surrogate (r_…) as logged, instead of KEY.")] = None,
    config: ConfigOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Was it selected, enqueued, accepted: a delivery's ledger row and timeline."""
    from tidings.operate import operations
    from tidings.operate.readmodel import Delivery, as_dict

    if (key is None) == (recipient is None):
        raise typer.BadParameter("give KEY or --recipient (one of them)", param_hint="KEY")

    async def go(runtime: Runtime) -> list[Delivery]:
        found = await operations.timeline(runtime.store, key=key, recipient=recipient,
                                          channels=runtime.channels)
        if not found:
            if key is not None:
                raise typer.BadParameter(f"no intent has key {key!r}", param_hint="KEY")
            raise typer.BadParameter(f"no delivery found for {recipient!r}",
                                     param_hint="--recipient")
        return found
    deliveries = _with_runtime(config, store, go)
    if as_json:
        _emit(True, {"deliveries": [as_dict(d) for d in deliveries]})
        return
    out = _stdout()
    for delivery in deliveries:
        lines, events = textout.inspected(delivery, width=out.width)
        out.print("\n".join(lines), soft_wrap=True, highlight=False, markup=False)
        out.print(events, soft_wrap=isinstance(events, str))
