"""``tidings sandbox``: run the sandbox provider (an HTTP email/SMS provider that fails
like real ones, optionally speaking Postmark's, SendGrid's and Twilio's APIs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from tidings.cli.common import _fail, app
from tidings.core.errors import TidingsError


@app.command()
def sandbox(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port (0 picks a free one).")] = 8025,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Sandbox fault and quota settings (JSON).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for injected faults.")] = 0,
    dialect: Annotated[list[str] | None, typer.Option(
        "--dialect", help="Also speak this provider's API: postmark, sendgrid, resend, twilio "
                          "(repeat for several).")] = None,
    postmark_webhook: Annotated[str | None, typer.Option(
        help="With --dialect postmark: post Delivery records here "
             "(http://user:pass@host/v1/webhooks/postmark).")] = None,
    twilio_auth_token_env: Annotated[str | None, typer.Option(
        help="With --dialect twilio: the variable holding the auth token that signs "
             "status callbacks (none: no callbacks).")] = None,
    sendgrid_webhook: Annotated[str | None, typer.Option(
        help="With --dialect sendgrid: post signed event batches here.")] = None,
    sendgrid_signing_key_env: Annotated[str | None, typer.Option(
        help="With --sendgrid-webhook: the variable holding the ECDSA P-256 private key "
             "(PEM) that signs them.")] = None,
    clock_offset: Annotated[float, typer.Option(
        help="Seconds added to the clock (a simulated time, as tidings' clock_offset_s).")
    ] = 0.0,
) -> None:
    """Run the sandbox provider: an HTTP email/SMS provider that fails like real ones."""
    from tidings.sandbox.dialects import DIALECTS, DialectSettings, signing_key_from
    from tidings.sandbox.server import main_sandbox

    for name in dialect or ():
        if name not in DIALECTS:
            raise typer.BadParameter(f"{name!r}: one of {', '.join(DIALECTS)}",
                                     param_hint="--dialect")
    token = os.environ.get(twilio_auth_token_env) if twilio_auth_token_env else None
    if twilio_auth_token_env and not token:
        raise typer.BadParameter(f"environment variable {twilio_auth_token_env} is not set",
                                 param_hint="--twilio-auth-token-env")
    signing_key = None
    if sendgrid_signing_key_env:
        try:
            signing_key = signing_key_from(os.environ.get(sendgrid_signing_key_env, ""))
        except ValueError as exc:
            raise typer.BadParameter(f"{sendgrid_signing_key_env}: {exc}",
                                     param_hint="--sendgrid-signing-key-env") from None
    try:
        main_sandbox(host, port, str(config) if config else None, seed,
                     dialects=DialectSettings(dialects=tuple(dialect or ()),
                                              postmark_webhook=postmark_webhook,
                                              twilio_auth_token=token,
                                              sendgrid_webhook=sendgrid_webhook,
                                              sendgrid_signing_key=signing_key),
                     clock_offset_s=clock_offset)
    except TidingsError as exc:  # its settings file
        _fail(str(exc))
    except OSError as exc:  # the address: in use, not this host's, no such name
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
