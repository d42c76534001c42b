"""A real SMTP server process for the SMTP adapter's integration tests (aiosmtpd).

    python tests/support/smtp_server.py --dir INBOX [--security starttls|tls|none]
        [--cert CERT --key KEY] [--login USER:PASSWORD]
        [--drop-after-data RATE [--drop-seed SEED]]

Prints ``listening on PORT`` once it accepts connections (port 0 picks a free one),
then serves until killed. Every accepted message is written whole to
``INBOX/new/<n>.eml`` (written aside, then renamed in, as a maildir does) and one
JSON line ``{"file", "peer", "key", "at"}`` (``at``: when it was stored, Unix seconds)
is appended to ``INBOX/log.jsonl``: the inbox
is the tests' witness of what really arrived, and over which connection.

The recipient's local part scripts the answer:

- ``rcpt-CODE@…``: RCPT is answered CODE (421, 451, 452, 550, …) with realistic text;
- ``data-CODE@…``: the message is received, then refused with CODE at the end of DATA;
- ``hang@…``: the message is received, ``DATA <key>`` is printed, and no answer ever
  comes (the test kills the process);
- anything else is accepted with ``250 2.0.0 Ok: queued as <id>``.

``--drop-after-data RATE`` loses the reply of that share of the accepted messages: the
message is stored and logged (``"dropped": true``) like any other, then the connection
is dropped before ``250`` is sent, so the client cannot know it arrived. Which keys
are dropped is decided by the key alone (a hash of ``SEED:key``), not by arrival
order: a run is reproducible, the same key is dropped on every send of it, and the
log names them.
"""

from __future__ import annotations

import argparse
import asyncio
import email.policy
import hashlib
import itertools
import json
import os
import ssl
import time
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

REPLIES = {
    421: "421 4.7.0 mx.test Too many concurrent connections, try again later",
    450: ("450 4.2.1 The user you are trying to contact is receiving mail at a rate that "
          "prevents additional messages from being delivered"),
    451: "451 4.7.1 <{to}>: Recipient address rejected: Greylisted, please try again later",
    452: "452 4.3.1 Insufficient system storage",
    550: "550 5.1.1 <{to}>: Recipient address rejected: User unknown in virtual mailbox table",
    554: "554 5.7.1 Message rejected: content policy",
}


class Inbox:
    """The handler: scripted answers, and a maildir-like inbox of what was accepted."""

    def __init__(self, directory: Path, *, drop_after_data: float = 0.0,
                 drop_seed: int = 0) -> None:
        self.drop_after_data = drop_after_data
        self.drop_seed = drop_seed
        self.new = directory / "new"
        self.tmp = directory / "tmp"
        self.new.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.log = directory / "log.jsonl"
        self.seq = itertools.count(1)

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        local = address.partition("@")[0]
        if local.startswith("rcpt-"):
            return REPLIES[int(local[5:])].format(to=address)
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        message = BytesParser(policy=email.policy.default).parsebytes(content)
        key = str(message["X-Tidings-Key"])
        local = envelope.rcpt_tos[0].partition("@")[0]
        if local.startswith("data-"):
            return REPLIES[int(local[5:])].format(to=envelope.rcpt_tos[0])
        if local == "hang":
            print(f"DATA {key}", flush=True)
            await asyncio.Event().wait()
        n = next(self.seq)
        name = f"{n:06d}.eml"
        (self.tmp / name).write_bytes(content)
        os.replace(self.tmp / name, self.new / name)
        peer: Any = session.peer
        dropped = self.drops(key)
        entry: dict[str, Any] = {"file": name, "peer": list(peer), "key": key,
                                 "at": round(time.time(), 4)}
        if dropped:
            entry["dropped"] = True
        with self.log.open("a") as log:
            log.write(json.dumps(entry) + "\n")
        if dropped and isinstance(server.transport, asyncio.Transport):
            # Stored, and the reply never leaves: the client cannot tell it arrived.
            server.transport.abort()
        return f"250 2.0.0 Ok: queued as MX{n:06d}"

    def drops(self, key: str) -> bool:
        """Whether the reply to ``key``'s message is lost (``--drop-after-data``)."""
        if self.drop_after_data <= 0:
            return False
        digest = hashlib.sha256(f"{self.drop_seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.drop_after_data


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--security", choices=("starttls", "tls", "none"), default="none")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--login", help="USER:PASSWORD that AUTH accepts")
    parser.add_argument("--drop-after-data", type=float, default=0.0, metavar="RATE",
                        help="share of accepted messages whose reply is lost (by key)")
    parser.add_argument("--drop-seed", type=int, default=0,
                        help="chooses which keys --drop-after-data drops")
    args = parser.parse_args()
    asyncio.run(serve(args))


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    context: ssl.SSLContext | None = None
    if args.security != "none":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
    user, _, password = (args.login or "").partition(":")

    def authenticate(server: SMTP, session: Session, envelope: Envelope, mechanism: str,
                     auth_data: Any) -> AuthResult:
        ok = (isinstance(auth_data, LoginPassword) and _text(auth_data.login) == user
              and _text(auth_data.password) == password)
        # handled=False: aiosmtpd then answers the failure itself (535).
        return AuthResult(success=ok, handled=False)

    inbox = Inbox(args.dir, drop_after_data=args.drop_after_data, drop_seed=args.drop_seed)
    smtp_options: dict[str, Any] = {"hostname": "mx.test", "loop": loop}
    if args.security == "starttls":
        smtp_options.update(tls_context=context, require_starttls=True)
    if args.login:
        smtp_options.update(authenticator=authenticate, auth_required=True,
                            auth_require_tls=args.security != "none")
    server = await loop.create_server(
        lambda: SMTP(inbox, **smtp_options), args.host, args.port,
        ssl=context if args.security == "tls" else None)
    print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    main()
