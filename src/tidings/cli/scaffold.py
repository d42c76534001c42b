"""``tidings init``: a folder to start from — commented settings, a sample customer
database, templates — and the commands that deliver its first campaign.

Everything written is relative to the folder (the settings file's paths resolve
against it), so the folder can be moved or renamed as a whole.
"""

from __future__ import annotations

import shlex
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tidings.core.errors import InvalidInput

SETTINGS_FILE = "tidings.toml"
CUSTOMERS_FILE = "customers.db"
DEFAULT_SANDBOX_PORT = 8025
CAMPAIGN = "digest"

#: The sample audience: two active customers (one without a phone), one inactive.
CUSTOMERS: tuple[tuple[str, str, str, str | None, int], ...] = (
    ("cust_001", "Ada", "ada@example.com", "+14155550101", 1),
    ("cust_002", "Grace", "grace@example.com", None, 1),
    ("cust_003", "Alan", "alan@example.com", "+442079460000", 0),
)

AUDIENCE_QUERY = ("SELECT id, email, phone, active, name FROM customers"
                  " WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit")

TEMPLATES: dict[str, str] = {
    "subject.txt": "Your hourly digest, {{ name }}",
    "body.txt": ("Hello {{ name }},\n\n"
                 "this is your digest from tidings (customer {{ recipient_id }}).\n"),
    "body.html": ("<p>Hello {{ name }},</p>\n"
                  "<p>this is your digest from <b>tidings</b>.</p>\n"),
    "sms.txt": "Hi {{ name }}, your tidings digest is ready.",
}

SETTINGS = '''\
# tidings settings, written by `tidings init`. Every field, its default and its meaning:
# docs/settings.md in the tidings repository. Relative paths are relative to this folder.
# tidings commands run in this folder find this file; elsewhere give --config PATH
# (or TIDINGS_CONFIG).

# The ledger and the queues: a SQLite file beside this one, no server needed. The
# scheduler, the workers and the API create its schema on first use. For a fleet:
# store = "postgresql://user@host:5432/db", then `tidings db migrate`.
store = "sqlite:///tidings.db"

# Email through the sandbox provider (`tidings sandbox`): it enforces a quota,
# deduplicates by delivery key and counts what it accepted ({url}/v1/stats).
# For real mail, see docs/providers.md, "Providers, templates and preferences".
[channels.email]
kind = "email"                 # addresses are checked before any send
templates = "templates"        # <name>/v<N>/subject.txt, body.txt, body.html
quota = "50/s"                 # the provider's quota; the pacer aims just under it
max_in_flight = 16             # requests at once, across every worker of the channel
provider = {{ kind = "sandbox", url = "{url}", timeout_s = 5 }}

[channels.sms]
kind = "sms"
templates = "templates"        # <name>/v<N>/sms.txt
quota = "10/s"
provider = {{ kind = "sandbox", url = "{url}", timeout_s = 5 }}

# One campaign, every hour on the hour, to the active customers of customers.db. The
# latest hour is due as soon as the scheduler starts (it is admitted up to grace_s
# late); a weekly digest would say cron = "0 9 * * 1".
[campaigns.{campaign}]
cron = "0 * * * *"
timezone = "UTC"
channels = ["email", "sms"]
template = "{campaign}"            # templates/{campaign}/v1/
version = 1                    # part of every delivery key: new words, new version
expires_after_s = 86400        # never sent more than a day late
grace_s = 3600
# One page at a time: the query must filter on :after, order by id and stop at :limit.
# Columns id, email, phone and active fill the recipient; the others (name) are data
# for the templates.
audience = {{ sql = {{ url = "sqlite:///{customers}", query = "{query}" }} }}

[api]
port = 8080                    # `tidings api`: the HTTP API, and the dashboard at /ui
'''


@dataclass(frozen=True, kw_only=True)
class Starter:
    """What ``write_starter`` made: the folder, the files, and the commands to run next
    (each in its own terminal, in the folder)."""

    folder: Path
    files: tuple[Path, ...]
    commands: tuple[str, ...]


def write_starter(folder: Path, *, sandbox_port: int = DEFAULT_SANDBOX_PORT) -> Starter:
    """Write settings, a sample customer database and templates into ``folder``.

    Refuses a folder that already has a settings file or a customer database, so
    nothing of the user's is overwritten.
    """
    if not 1 <= sandbox_port <= 65535:
        raise InvalidInput("sandbox_port", f"{sandbox_port} is not a port (1-65535)")
    folder.mkdir(parents=True, exist_ok=True)
    for name in (SETTINGS_FILE, CUSTOMERS_FILE, "templates"):
        if (folder / name).exists():
            raise InvalidInput("dir", f"{folder / name} already exists; tidings init "
                                      "writes into a folder without it")
    url = f"http://127.0.0.1:{sandbox_port}"
    settings = folder / SETTINGS_FILE
    settings.write_text(SETTINGS.format(url=url, campaign=CAMPAIGN, customers=CUSTOMERS_FILE,
                                        query=AUDIENCE_QUERY))
    customers = _write_customers(folder / CUSTOMERS_FILE)
    version = folder / "templates" / CAMPAIGN / "v1"
    version.mkdir(parents=True)
    written = [settings, customers]
    for name, text in TEMPLATES.items():
        (version / name).write_text(text + "\n")
        written.append(version / name)
    sandbox = ("tidings sandbox" if sandbox_port == DEFAULT_SANDBOX_PORT
               else f"tidings sandbox --port {sandbox_port}")
    return Starter(folder=folder, files=tuple(written),
                   commands=(sandbox, "tidings scheduler", "tidings worker --channel email"))


def _write_customers(path: Path) -> Path:
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT NOT NULL, "
                         "email TEXT, phone TEXT, active INTEGER NOT NULL DEFAULT 1)")
            conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", CUSTOMERS)
    finally:
        conn.close()
    return path


def describe(starter: Starter, *, cwd: Path) -> str:
    """What ``tidings init`` prints: what it wrote, then the three commands."""
    try:
        shown = starter.folder.resolve().relative_to(cwd.resolve())
    except ValueError:
        shown = starter.folder
    lines = [f"wrote {len(starter.files)} files into {shown}/: {SETTINGS_FILE}, "
             f"{CUSTOMERS_FILE} ({len(CUSTOMERS)} customers), templates/{CAMPAIGN}/v1/", ""]
    where = "" if str(shown) == "." else f" after `cd {shlex.quote(str(starter.folder))}`"
    lines.append(f"Next, run each of these in its own terminal{where}:")
    notes = ("the provider; its counts at /v1/stats",
             f"admits the {CAMPAIGN} campaign's due hour",
             "delivers the email intents")
    width = max(len(c) for c in starter.commands)
    lines += [f"  {c.ljust(width)}  # {n}" for c, n in zip(starter.commands, notes, strict=True)]
    lines += ["", "Then `tidings status`, `tidings inspect --recipient cust_001`, and "
                  "`tidings worker --channel sms` for the SMS."]
    return "\n".join(lines)
