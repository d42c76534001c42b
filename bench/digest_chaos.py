"""Digests under SIGKILLs, as an operator runs them, judged by a real SMTP server's inbox.

    python bench/digest_chaos.py [--store URL] [--events 20000] [--recipients 500]
        [--producers 3] [--rate 0] [--workers 2] [--window-s 5] [--max-items 3]
        [--connections 2]
        [--kill-every-s 2] [--max-kills 40] [--drop 0.02] [--guard-s 900] [--json]

Processes of their own, all real: the SMTP server of ``tests/support/smtp_server.py``
(it loses the reply to ``--drop`` of the messages after storing them), a ``tidings
scheduler``, ``--workers`` ``tidings worker`` processes on one SMTP channel (no lookup:
an uncertain send is held for an operator), and ``--producers`` producer processes
(this script, ``--producer``) that notify the events one at a time, each into its
recipient's digest window (``window_s``; a window that reaches ``--max-items`` is
filled and closed by the call that filled it). Every ``--kill-every-s`` one of the
workers or the scheduler, in turn, is SIGKILLed and started again (``--max-kills`` at
most). The store is a SQLite file, or the PostgreSQL database ``--store`` names
(dropped and made again).

When every window is closed and every digest settled, the witness is the inbox:

- **held**: the digests held at the end, beside the sends that had started (in the
  ledger, read once the killed worker was dead) at the kills, the replies the server
  lost, and how many held digests never reached the server (on the wire at a kill);
- **every event in exactly one message**: the held digests are then decided as an
  operator does, by the inbox (one in it was accepted, one not in it is sent again),
  and no event may be missing or in two messages, no Message-ID twice;
- **close to inbox**: per window, from its due moment (the filling call's return, or
  its ``closes_at``) to its message's arrival at the server: p50, p95, max (windows
  decided by the operator left out);
- **the filling call**: p50 / p99 / max of the producers' calls that filled a window,
  beside those that only added an item.
"""

from __future__ import annotations

import argparse
import asyncio
import email.policy
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from benchlib import Report, emit, quantile, rounded, source_revision

ROOT = Path(__file__).resolve().parents[1]
SMTP_SERVER = ROOT / "tests" / "support" / "smtp_server.py"
TEMPLATE = "activity/v1"


def config_text(store: str, templates: Path, smtp_port: int, connections: int) -> str:
    return f'''
store = "{store}"
[scheduler]
interval_s = 0.2
[worker]
reconcile_every_s = 0.5
heartbeat_s = 0.5
gone_after_s = 2.0
[channels.email]
kind = "email"
templates = "{templates}"
uncertain = "hold"
[channels.email.provider]
kind = "smtp"
host = "127.0.0.1"
port = {smtp_port}
security = "none"
from_address = "digest@example.com"
max_connections = {connections}
'''


def write_templates(folder: Path) -> Path:
    version = folder / "templates" / "activity" / "v1"
    version.mkdir(parents=True)
    (version / "subject.txt").write_text("{{ count }} new events")
    (version / "body.txt").write_text("{% for item in items %}<{{ item.event }}>{% endfor %}")
    return folder / "templates"


# ------------------------------------------------------------------ a producer


async def produce(config: Path, index: int, of: int, events: int, recipients: int,
                  window_s: float, max_items: int, rate: float) -> Report:
    """Notify events ``index``, ``index + of``, … one at a time; what each call took and
    when the windows it filled were filled."""
    from tidings import Digest
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    runtime = await build_runtime(Settings.load(config))
    adds: list[float] = []
    fills: list[float] = []
    filled: dict[str, float] = {}
    closes: dict[str, float] = {}
    rng = random.Random(index)
    # This producer's share of --rate (0: as fast as the calls return).
    every_s = of / rate if rate > 0 else 0.0
    started = time.monotonic()
    try:
        for done, n in enumerate(range(index, events, of)):
            if every_s:
                await asyncio.sleep(max(0.0, started + done * every_s - time.monotonic()))
            r = n % recipients
            event = f"r{r}-e{n}"
            digest = Digest(key=f"activity:cust-{r}", window_s=window_s, max_items=max_items)
            began = time.perf_counter()
            added = await runtime.notify(
                key=event, recipient={"id": f"cust-{r}", "email": f"cust{r}@example.com"},
                channels=["email"], template=TEMPLATE, data={"event": event}, digest=digest)
            took = time.perf_counter() - began
            (key,) = added.intent_keys(["email"])
            closes[key] = added.closes_at
            if added.sealed and added.items >= max_items:
                fills.append(took)
                filled[key] = time.time()
            else:
                adds.append(took)
            if not every_s and rng.random() < 0.05:
                await asyncio.sleep(rng.uniform(0.0, 0.02))
    finally:
        await runtime.close()
    return {"adds": adds, "fills": fills, "filled": filled, "closes": closes}


# ------------------------------------------------------------------ the run


def claims_of(store: str, pid: int) -> tuple[int, int]:
    """The claims the dead worker ``pid`` held, and how many had their send started."""
    query = ("SELECT count(*), coalesce(sum(CASE WHEN send_started_token = lease_token "
             "THEN 1 ELSE 0 END), 0) FROM intents WHERE state = 'claimed' AND lease_owner "
             "LIKE {}")
    pattern = f"%:{pid}:%"
    if store.startswith("sqlite:///"):
        with sqlite3.connect(store.removeprefix("sqlite:///"), timeout=30) as conn:
            row = conn.execute(query.format("?"), (pattern,)).fetchone()
    else:
        import psycopg

        with psycopg.connect(store) as pg:
            row = pg.execute(query.format("%s"), (pattern,)).fetchone()  # type: ignore[arg-type]
    return (int(row[0]), int(row[1])) if row else (0, 0)


def admitted_at(store: str) -> dict[str, float]:
    """When each digest intent was admitted (its ``created_at``)."""
    query = "SELECT key, created_at FROM intents"
    if store.startswith("sqlite:///"):
        with sqlite3.connect(store.removeprefix("sqlite:///"), timeout=30) as conn:
            rows = conn.execute(query).fetchall()
    else:
        import psycopg

        with psycopg.connect(store) as pg:
            rows = pg.execute(query).fetchall()
    return {str(key): float(at) for key, at in rows}


class Fleet:
    """The scheduler and the workers, each restartable, with a log each."""

    def __init__(self, config: Path, folder: Path, workers: int) -> None:
        self.config = config
        self.folder = folder
        self.commands = [["scheduler"]] + [["worker", "--channel", "email"]] * workers
        self.procs = [self._start(n) for n in range(len(self.commands))]
        self.kills: list[tuple[str, int]] = []

    def _start(self, n: int) -> subprocess.Popen[bytes]:
        with (self.folder / f"process-{n}.log").open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "tidings", *self.commands[n], "--config",
                 str(self.config)], stdout=subprocess.DEVNULL, stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def kill_and_restart(self, n: int) -> int:
        proc = self.procs[n]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.kills.append((self.commands[n][0], proc.pid))
        self.procs[n] = self._start(n)
        return proc.pid

    def exited(self) -> list[int]:
        return [p.returncode for p in self.procs if p.poll() is not None]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def inbox(folder: Path) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The server's log lines, and each stored message's events by its delivery key."""
    lines = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    parser = BytesParser(policy=email.policy.default)
    events: dict[str, list[str]] = {}
    for line in lines:
        message = parser.parsebytes((folder / "new" / line["file"]).read_bytes())
        body = message.get_body(preferencelist=("plain",))
        assert body is not None
        events.setdefault(line["key"], []).extend(re.findall(r"<([^>]+)>", body.get_content()))
    return lines, events


def arrived_keys(folder: Path) -> set[str]:
    """The delivery keys the SMTP server has stored so far."""
    return {json.loads(line)["key"]
            for line in (folder / "inbox" / "log.jsonl").read_text().splitlines()}


async def held_keys(runtime: Any) -> list[str]:
    from tidings.core.states import State

    return [i.key for i in await runtime.store.intent_find(
        states=[State.HELD], channel="email", limit=100_000)]


async def settled(runtime: Any) -> bool:
    pending = await runtime.store.digest_pending()
    states = (await runtime.store.intent_counts()).get("email", {})
    open_ = sum(n for state, n in states.items() if state not in {"accepted", "held"})
    return pending.windows == 0 and open_ == 0 and sum(states.values()) > 0


def set_up(args: argparse.Namespace, folder: Path
           ) -> tuple[str, subprocess.Popen[bytes], Path]:
    """The store (migrated), the SMTP server, and the settings file naming both."""
    store = (f"sqlite:///{folder / 'digests.db'}" if args.store is None
             else _fresh_pg(args.store))
    smtp = subprocess.Popen(
        [sys.executable, str(SMTP_SERVER), "--dir", str(folder / "inbox"), "--security",
         "none", "--drop-after-data", str(args.drop)], stdout=subprocess.PIPE)
    assert smtp.stdout is not None
    said = smtp.stdout.readline().decode().strip()
    if not said.startswith("listening on "):
        raise RuntimeError(f"the SMTP server said {said!r}")
    config = folder / "tidings.toml"
    config.write_text(config_text(store, write_templates(folder), int(said.rsplit(" ", 1)[1]),
                                  args.connections))
    subprocess.run([sys.executable, "-m", "tidings", "db", "migrate", "--config",
                    str(config)], check=True, capture_output=True)
    return store, smtp, config


def start_producers(args: argparse.Namespace, config: Path,
                    outs: list[Path]) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(
        [sys.executable, __file__, "--producer", str(i), "--of", str(args.producers),
         "--config", str(config), "--events", str(args.events), "--recipients",
         str(args.recipients), "--window-s", str(args.window_s), "--max-items",
         str(args.max_items), "--rate", str(args.rate), "--out", str(outs[i])])
        for i in range(args.producers)]


async def run(args: argparse.Namespace, folder: Path) -> Report:
    from tidings.config.settings import Settings
    from tidings.operate.operations import uncertain_resolve
    from tidings.runtime import build_runtime

    store, smtp, config = set_up(args, folder)
    runtime = await build_runtime(Settings.load(config))
    fleet = Fleet(config, folder, args.workers)
    outs = [folder / f"producer-{i}.json" for i in range(args.producers)]
    producers = start_producers(args, config, outs)
    at_kills: list[tuple[int, int]] = []
    began = time.monotonic()
    try:
        victim, next_kill = 0, began + args.kill_every_s
        while True:
            if any(p.poll() not in (None, 0) for p in producers):
                raise RuntimeError("a producer failed")
            if fleet.exited():
                raise RuntimeError(f"a process exited on its own: {fleet.exited()}")
            producing = any(p.poll() is None for p in producers)
            if not producing and await settled(runtime):
                break
            if time.monotonic() > began + args.guard_s:
                raise RuntimeError(f"not settled after {args.guard_s:g} s: "
                                   f"{await runtime.store.intent_counts()}")
            if time.monotonic() >= next_kill and len(fleet.kills) < args.max_kills:
                pid = fleet.kill_and_restart(victim)
                if victim > 0:
                    at_kills.append(claims_of(store, pid))
                victim = (victim + 1) % len(fleet.procs)
                next_kill = time.monotonic() + args.kill_every_s
            await asyncio.sleep(0.2)
        produced_s = time.monotonic() - began
        await asyncio.sleep(1.0)  # a late duplicate would have landed by now
        held = await held_keys(runtime)
        # What the server had stored when they were held (the operator's resends land later).
        stored_then = arrived_keys(folder)
        # The operator's step, by the witness, until nothing is held: a held digest in
        # the inbox was accepted, one not in it is sent again (and may be held again, its
        # reply lost once more: the server loses the same keys' replies every time).
        while (still := await held_keys(runtime)) or not await settled(runtime):
            if time.monotonic() > began + args.guard_s:
                raise RuntimeError("held digests did not settle after the operator's step")
            arrived = arrived_keys(folder)
            for decision, keys in (("accepted", [k for k in still if k in arrived]),
                                   ("resend", [k for k in still if k not in arrived])):
                if keys:
                    await uncertain_resolve(runtime.store, runtime.transport,
                                            decision=decision, keys=keys,
                                            who="digest_chaos, by the inbox",
                                            now=runtime.clock.now())
            await asyncio.sleep(0.3)
        await asyncio.sleep(1.0)
        states = (await runtime.store.intent_counts()).get("email", {})
        admitted = admitted_at(store)
    finally:
        for p in producers:
            if p.poll() is None:
                p.kill()
        fleet.stop()
        smtp.send_signal(signal.SIGKILL)
        smtp.wait()
        await runtime.close()
    return judge(args, folder, held=held, at_kills=at_kills, kills=fleet.kills,
                 produced_s=produced_s, states=states, outs=outs, admitted=admitted,
                 stored_then=stored_then)


def judge(args: argparse.Namespace, folder: Path, *, held: list[str],
          at_kills: list[tuple[int, int]], kills: list[tuple[str, int]], produced_s: float,
          states: dict[str, int], outs: list[Path], admitted: dict[str, float],
          stored_then: set[str]) -> Report:
    lines, events = inbox(folder / "inbox")
    keys = Counter(line["key"] for line in lines)
    dropped = {line["key"] for line in lines if line.get("dropped")}
    first_at: dict[str, float] = {}
    for line in lines:
        first_at.setdefault(line["key"], float(line["at"]))
    seen = Counter(e for message in events.values() for e in message)
    expected = {f"r{n % args.recipients}-e{n}" for n in range(args.events)}
    produced = [json.loads(out.read_text()) for out in outs]
    adds = [t for p in produced for t in p["adds"]]
    fills = [t for p in produced for t in p["fills"]]
    filled = {k: v for p in produced for k, v in p["filled"].items()}
    closes = {k: v for p in produced for k, v in p["closes"].items()}
    due = {key: filled.get(key, closes[key]) for key in closes}
    latencies = [first_at[key] - due[key] for key in due if key in first_at and key not in held]
    # The closing alone: from the window's due moment to its digest's admission (the
    # rest of close-to-inbox is the digest's wait for a send, as any intent's).
    closing = [admitted[key] - due[key] for key in due if key in admitted]
    held_set = set(held)
    return {
        "store": "sqlite" if args.store is None else "postgresql",
        "events": args.events, "recipients": args.recipients, "producers": args.producers,
        "workers": args.workers, "window_s": args.window_s, "max_items": args.max_items,
        "connections": args.connections, "rate": args.rate,
        "elapsed_s": rounded(produced_s, 1),
        "kills": len(kills), "worker_kills": sum(1 for kind, _ in kills if kind == "worker"),
        "digests": len(closes), "states": states,
        "held": len(held), "held_in_inbox": len(held_set & stored_then),
        "held_never_sent": len(held_set - stored_then),
        "claims_at_kills": sum(c for c, _ in at_kills),
        "started_at_kills": sum(s for _, s in at_kills),
        "replies_lost": len(dropped),
        "events_missing": len(expected - set(seen)),
        "events_twice": sum(1 for c in seen.values() if c > 1),
        "events_unknown": len(set(seen) - expected),
        "keys_twice": sum(1 for c in keys.values() if c > 1),
        "fills": len(fills), "fill_ms": _ms(fills), "add_ms": _ms(adds),
        "close_to_inbox_s": {"p50": rounded(quantile(latencies, 0.5), 2),
                             "p95": rounded(quantile(latencies, 0.95), 2),
                             "max": rounded(max(latencies, default=0.0), 2),
                             "windows": len(latencies)},
        "close_to_admission_s": {"p50": rounded(quantile(closing, 0.5), 2),
                                 "p95": rounded(quantile(closing, 0.95), 2),
                                 "max": rounded(max(closing, default=0.0), 2)},
        "deliveries_per_s": rounded(len(first_at) / produced_s, 1) if produced_s else 0.0,
        **source_revision(),
    }


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": rounded(quantile(values, 0.5) * 1000, 1),
            "p99": rounded(quantile(values, 0.99) * 1000, 1),
            "max": rounded(max(values, default=0.0) * 1000, 1)}


def _fresh_pg(url: str) -> str:
    from pglib import sibling_pg

    return sibling_pg(url, "chaos")


def summary(r: Report) -> str:
    c, a = r["close_to_inbox_s"], r["close_to_admission_s"]
    pace = f"{r['rate']:g}/s" if r["rate"] else "flat out"
    return (
        f"digest chaos [{r['store']}]: {r['events']} events ({pace}), "
        f"{r['recipients']} recipients, "
        f"{r['digests']} digests in {r['elapsed_s']} s; {r['kills']} kills "
        f"({r['worker_kills']} of workers)\n"
        f"  held {r['held']} (in the inbox {r['held_in_inbox']}, never sent "
        f"{r['held_never_sent']}); sends started at the kills {r['started_at_kills']} of "
        f"{r['claims_at_kills']} claims held; replies lost {r['replies_lost']}\n"
        f"  events missing {r['events_missing']}, twice {r['events_twice']}, unknown "
        f"{r['events_unknown']}; keys twice {r['keys_twice']}\n"
        f"  filling call p50/p99/max {r['fill_ms']['p50']}/{r['fill_ms']['p99']}/"
        f"{r['fill_ms']['max']} ms ({r['fills']} calls); adding call "
        f"{r['add_ms']['p50']}/{r['add_ms']['p99']}/{r['add_ms']['max']} ms\n"
        f"  close to inbox p50 {c['p50']} s, p95 {c['p95']} s, max {c['max']} s "
        f"({c['windows']} windows, {r['deliveries_per_s']} digests/s delivered); close to "
        f"admission p50 {a['p50']} s, p95 {a['p95']} s, max {a['max']} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", metavar="URL", default=None,
                        help="a PostgreSQL URL; its database gets a sibling <db>_chaos, "
                             "made afresh (default: a SQLite file in a temporary folder)")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--recipients", type=int, default=500)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--max-items", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="events per second, all producers together (default 0: each "
                             "producer calls again as soon as its call returns)")
    parser.add_argument("--connections", type=int, default=2,
                        help="the SMTP adapter's max_connections per worker (its default: 2)")
    parser.add_argument("--kill-every-s", type=float, default=2.0)
    parser.add_argument("--max-kills", type=int, default=40)
    parser.add_argument("--drop", type=float, default=0.02,
                        help="the share of messages whose reply the SMTP server loses")
    parser.add_argument("--guard-s", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="keep the run's folder")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--producer", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--of", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.producer is not None:
        assert args.config is not None and args.out is not None
        produced = asyncio.run(produce(args.config, args.producer, args.of, args.events,
                                       args.recipients, args.window_s, args.max_items,
                                       args.rate))
        args.out.write_text(json.dumps(produced))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="digest-chaos-"))
    report = asyncio.run(run(args, folder))
    if args.keep:
        report["folder"] = str(folder)
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    emit(report, as_json=args.json, summary=summary)
    bad = (report["events_missing"] or report["events_twice"] or report["events_unknown"]
           or report["keys_twice"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
