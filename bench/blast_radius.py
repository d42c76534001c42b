"""Blast radius of a crash: lease expiries per SIGKILL of a `tidings worker`, before/after.

    python bench/blast_radius.py [--intents 3000] [--workers 3] [--quota 200]
        [--lease-s 5] [--visibility-s 5] [--kill-every-s 2] [--drop 0.02]
        [--witness sandbox|smtp] [--seed N] [--before REV] [--only before|after] [--json]
        [--store postgresql://user@host:port/db]
    python bench/blast_radius.py --chaos [--intents 20000] ...

The kill loop: a SQLite store (``--store postgresql://…/db``: a fresh database
``db_blast_<pid>`` per run, migrated, left behind for inspection), ``--intents`` intents
on one email channel paced at ``--quota``/s, ``--workers`` real ``tidings worker``
processes (each running the reconciler beside it), the sandbox HTTP server in this
process as the witness (dedupe off: a second send of a key counts twice; ``--drop`` of
its replies lost after the acceptance), and every ``--kill-every-s`` one worker
SIGKILLed and started again, in turn, until every intent is terminal (or held) and the
queue is empty.

``--witness smtp`` puts a real SMTP server in the sandbox's place: the aiosmtpd
process of ``tests/support/smtp_server.py``, reached through the SMTP adapter, which
stores every message it accepts in an inbox folder and drops the connection after
taking the whole message for ``--drop`` of the keys (chosen by a hash of ``--seed``
and the key), before its reply. SMTP has no lookup, so the channel's uncertain-send
policy is ``hold``: an intent whose send may have arrived (its reply lost, or its
worker killed holding the lease) is held for evidence and never resent. The inbox is
then the judge: copies per ``X-Tidings-Key`` and per ``Message-ID``, every accepted
intent in it once, every held one at most once, every dropped key held.

``--chaos`` runs this checkout twice instead: fault-free (no kills, no lost replies),
then the kill loop, and prints ``chaos_ratio`` = the kill loop's total time over the
fault-free run's (the fleet target: at most 1.3 with 3 workers, a kill every 2 s and
20,000 intents). ``--kill-every-s 0`` alone is a fault-free run.

Otherwise it runs twice: *before*, with the code of ``--before`` (default ``main``, taken out
with ``git archive`` into a temporary folder and put first on ``PYTHONPATH`` of every
process of that run), and *after*, with this checkout. For each it prints the kills,
the leases each kill cut (``lease_expired`` events, and ``lease_ended`` where the
reconciler saw the dead worker's liveness marker gone first) per kill (mean, and the
most one kill cost: events are told apart by the dead process's lease owner), what
one worker could start in one lease at its share of the pacer, dead letters and dead
intents by the poison limit, and the witness's counts (keys accepted, keys accepted
twice; with SMTP also the held intents, and which of them reached the inbox).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.parser
import email.policy
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMTP_SERVER = ROOT / "tests" / "support" / "smtp_server.py"
WITNESSES = ("sandbox", "smtp")
_OWNER = re.compile(r"^lease of (\S+) (?:expired|ended)")

Report = dict[str, Any]


def config_text(*, db: Path | str, url: str, quota: int, lease_s: float, visibility_s: float,
                smtp_port: int | None = None, templates: Path | None = None) -> str:
    """The settings of the run (every worker reads the same file); with ``smtp_port`` the
    channel sends over SMTP to that port, rendering ``templates``, and holds uncertain
    sends."""
    if smtp_port is None:
        channel = f"""[channels.email]
quota = "{quota}/s"

[channels.email.provider]
kind = "sandbox"
url = "{url}"
timeout_s = 1.0
"""
    else:
        channel = f"""[channels.email]
quota = "{quota}/s"
kind = "email"
templates = "{templates}"
uncertain = "hold"

[channels.email.provider]
kind = "smtp"
host = "127.0.0.1"
port = {smtp_port}
security = "none"
from_address = "news@example.com"
timeout_s = 5.0
data_timeout_s = 5.0
max_connections = 4
"""
    store = db if isinstance(db, str) else f"sqlite:///{db}"
    return f"""store = "{store}"

{channel}
[worker]
lease_s = {lease_s}
visibility_s = {visibility_s}
reconcile_every_s = 0.5

[reconciler]
uncertain_after_s = 0.2
lost_after_s = 10.0

[retry]
max_failures = 12
base_s = 0.05
cap_s = 0.5
"""


class Fleet:
    """``tidings worker`` processes, each one restartable after a SIGKILL."""

    def __init__(self, config: Path, folder: Path, count: int, env: dict[str, str]) -> None:
        self.config = config
        self.folder = folder
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = [self._start(n) for n in range(count)]
        self.killed: list[int] = []
        self.starts = count

    def _start(self, n: int) -> subprocess.Popen[bytes]:
        log = (self.folder / f"worker-{n}.log").open("ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "tidings", "worker", "--channel", "email",
                 "--config", str(self.config)],
                stdout=log, stderr=log, env=self.env, cwd=self.folder)
        finally:
            log.close()

    def kill_and_restart(self, n: int) -> None:
        proc = self.procs[n]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.killed.append(proc.pid)
        self.procs[n] = self._start(n)
        self.starts += 1

    def exited(self) -> list[int]:
        return [p.returncode for p in self.procs if p.poll() is not None]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def _ledger_sql(db: Path | str) -> Iterator[Callable[[str], list[tuple[Any, ...]]]]:
    """Raw reads of the run's ledger (the same SQL on both stores: no parameters)."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            yield lambda sql: list(pg.execute(sql).fetchall())
        return
    with sqlite3.connect(db, timeout=30) as conn:
        yield lambda sql: list(conn.execute(sql).fetchall())


def _settled(db: Path | str, n: int) -> bool:
    # Held is settled for the loop: the policy has decided, and only evidence or an
    # operator moves a held intent on (it is never resent on its own).
    with _ledger_sql(db) as query:
        open_intents = query(
            "SELECT count(*) FROM intents WHERE state NOT IN "
            "('accepted', 'delivered', 'bounced', 'complained', 'rejected', 'dead', "
            "'cancelled', 'expired', 'held')")[0][0]
        total = query("SELECT count(*) FROM intents")[0][0]
        queued = query("SELECT count(*) FROM messages")[0][0]
    return bool(total == n and open_intents == 0 and queued == 0)


def _ledger(db: Path | str, killed: list[int]) -> Report:
    with _ledger_sql(db) as query:
        # A lease ends early when its worker's liveness marker is seen gone, or
        # expires when it is not: either way the kill cut it.
        # A claim with no send started under it is released instead (issue 40's rule).
        cut = query("SELECT type, detail FROM events"
                    " WHERE type IN ('lease_expired', 'lease_ended', 'released')")
        expired = [detail for (kind, detail) in cut if kind == "lease_expired"]
        ended = [detail for (kind, detail) in cut if kind == "lease_ended"]
        released = [detail for (kind, detail) in cut if kind == "released"]
        states = dict(query("SELECT state, count(*) FROM intents GROUP BY state"))
        dead_reasons = [r for (r,) in query("SELECT reason FROM intents WHERE state = 'dead'")]
        letters = [r for (r,) in query("SELECT reason FROM dead_letters")]
    owners = Counter(m.group(1) for d in expired + ended if d and (m := _OWNER.match(d)))
    per_kill = [sum(c for owner, c in owners.items() if f":{pid}:" in owner) for pid in killed]
    freed = Counter(m.group(1) for d in released if d and (m := _OWNER.match(d)))
    released_by_kills = sum(c for owner, c in freed.items()
                            if any(f":{pid}:" in owner for pid in killed))
    poison = [r for r in dead_reasons + letters if r and r.startswith("poison")]
    by_receives = [r for r in poison + letters if re.search(r"received \d+ times without", r)]
    return {"lease_expired": len(expired), "lease_ended": len(ended), "per_kill": per_kill,
            "released_by_kills": released_by_kills,
            "states": states,
            "dead_intents": len(dead_reasons), "dead_letters": len(letters),
            "poison": len(poison), "dead_by_receive_count": len(set(by_receives)),
            "poison_sample": sorted(set(poison))[:3]}


async def _seed(config: Path, n: int, template: str) -> None:
    from tidings.admission.intake import NotifyRequest
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    rt = await build_runtime(Settings.load(config))
    try:
        for start in range(0, n, 1000):
            await rt.notify_many([
                NotifyRequest(key=f"blast-{i:05d}", template=template, channels=["email"],
                              recipient={"id": f"c{i:05d}", "email": f"c{i:05d}@example.com"})
                for i in range(start, min(n, start + 1000))])
    finally:
        await rt.close()


class SmtpWitness:
    """The SMTP server process of ``tests/support/smtp_server.py`` and its inbox."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, inbox: Path) -> None:
        self.process = process
        self.port = port
        self.inbox = inbox

    @classmethod
    async def start(cls, folder: Path, *, drop: float, seed: int) -> SmtpWitness:
        inbox = folder / "inbox"
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(SMTP_SERVER), "--dir", str(inbox),
            "--drop-after-data", str(drop), "--drop-seed", str(seed),
            stdout=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().strip()
        if not line.startswith("listening on "):
            process.kill()
            await process.wait()
            raise RuntimeError(f"the SMTP server did not start: {line!r}")
        return cls(process, int(line.rsplit(" ", 1)[1]), inbox)

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
        await self.process.wait()

    def judge(self, db: Path | str) -> Report:
        """The inbox's copies per key and per Message-ID, against each intent's state."""
        parser = email.parser.BytesHeaderParser(policy=email.policy.default)
        per_key: Counter[str] = Counter()
        per_id: Counter[str] = Counter()
        ids_of: dict[str, set[str]] = {}
        for path in sorted((self.inbox / "new").glob("*.eml")):
            headers = parser.parsebytes(path.read_bytes())
            key, message_id = str(headers["X-Tidings-Key"]), str(headers["Message-ID"])
            per_key[key] += 1
            per_id[message_id] += 1
            ids_of.setdefault(key, set()).add(message_id)
        log_path = self.inbox / "log.jsonl"
        entries = ([json.loads(line) for line in log_path.read_text().splitlines()]
                   if log_path.exists() else [])
        dropped = {e["key"] for e in entries if e.get("dropped")}
        with _ledger_sql(db) as query:
            state_of = dict(query("SELECT key, state FROM intents"))
        accepted = [k for k, state in state_of.items() if state == "accepted"]
        held = [k for k, state in state_of.items() if state == "held"]
        return {
            "inbox_messages": sum(per_key.values()),
            "accepted_keys": len(per_key),
            "keys_accepted_twice": sum(1 for c in per_key.values() if c > 1),
            "message_ids_twice": sum(1 for c in per_id.values() if c > 1),
            "keys_with_two_message_ids": sum(1 for ids in ids_of.values() if len(ids) > 1),
            "log_matches_inbox": Counter(e["key"] for e in entries) == per_key,
            "lost_responses": sum(1 for e in entries if e.get("dropped")),
            "accepted_not_in_inbox_once": sum(1 for k in accepted if per_key[k] != 1),
            "held": len(held),
            "held_in_inbox": sum(1 for k in held if per_key[k] >= 1),
            "held_twice": sum(1 for k in held if per_key[k] > 1),
            "dropped_not_held": sum(1 for k in dropped if state_of.get(k) != "held"),
            "inbox_keys_unknown": sum(1 for k in per_key if k not in state_of),
        }


def _templates(folder: Path) -> Path:
    """One email template, ``t/v1``, for the SMTP adapter to render."""
    version = folder / "templates" / "t" / "v1"
    version.mkdir(parents=True)
    (version / "subject.txt").write_text("Your notice")
    (version / "body.txt").write_text("Hello {{ recipient_id }}, this is your notice.")
    return folder / "templates"


async def kill_loop(folder: Path, *, intents: int, workers: int, quota: int, lease_s: float,
                    visibility_s: float, kill_every_s: float, drop: float,
                    witness: str = "sandbox", seed: int = 0, guard_s: float = 600.0,
                    env: dict[str, str] | None = None, store: str | None = None,
                    max_kills: int | None = None) -> Report:
    """One kill loop in ``folder`` (on SQLite there, or on the PostgreSQL database
    ``store``); the figures, the witness's counts and the ledger's. With ``max_kills``
    the kills stop after that many: on a loaded machine the loop runs longer, and kills
    by the clock alone would grow with it (each restart costs a process's start-up)."""
    from tidings.sandbox import LatencySpec, SandboxConfig, serve

    if witness not in WITNESSES:
        raise ValueError(f"witness must be one of {WITNESSES}, not {witness!r}")
    smtp = await SmtpWitness.start(folder, drop=drop, seed=seed) if witness == "smtp" else None
    sandbox = None if smtp is not None else await serve(SandboxConfig(
        dedupe=False, quotas={"email": quota}, lost_response=drop,
        latency={"email": LatencySpec(median_ms=3, p99_ms=15)}), "127.0.0.1", 0)
    db: Path | str = store if store is not None else folder / "blast.db"
    config = folder / "tidings.toml"
    config.write_text(config_text(
        db=db, url=sandbox.url if sandbox is not None else "", quota=quota, lease_s=lease_s,
        visibility_s=visibility_s, smtp_port=smtp.port if smtp is not None else None,
        templates=_templates(folder) if smtp is not None else None))
    fleet: Fleet | None = None
    try:
        await _seed(config, intents, "t/v1" if smtp is not None else "t")
        began = time.monotonic()
        fleet = Fleet(config, folder, workers, dict(env or os.environ))
        next_kill, victim = began + kill_every_s, 0
        while not await asyncio.to_thread(_settled, db, intents):
            if fleet.exited():
                raise RuntimeError(f"a worker exited on its own: {fleet.exited()}")
            if smtp is not None and smtp.process.returncode is not None:
                raise RuntimeError(f"the SMTP server exited: {smtp.process.returncode}")
            if time.monotonic() > began + guard_s:
                raise RuntimeError(f"not settled after {guard_s:.0f} s")
            if (kill_every_s > 0 and time.monotonic() >= next_kill
                    and (max_kills is None or len(fleet.killed) < max_kills)):
                fleet.kill_and_restart(victim)
                victim = (victim + 1) % workers
                next_kill += kill_every_s
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - began
        fleet.stop()
        exits = [p.returncode for p in fleet.procs]
        ledger = _ledger(db, fleet.killed)
        if smtp is not None:
            seen = await asyncio.to_thread(smtp.judge, db)
        else:
            assert sandbox is not None
            stats: dict[str, Any] = sandbox.core.stats()["channels"].get("email", {})
            seen = {k: stats.get(k, 0)
                    for k in ("accepted_keys", "keys_accepted_twice", "lost_responses")}
    finally:
        if fleet is not None:
            fleet.stop()
        if sandbox is not None:
            await sandbox.close()
        if smtp is not None:
            await smtp.close()
    from tidings.delivery.pacing import PaceLimits

    paced = PaceLimits(quota_per_s=quota).paced_per_s or float(quota)
    per_kill = ledger["per_kill"]
    return {
        "witness": witness, "intents": intents, "workers": workers, "quota": quota,
        "lease_s": lease_s, "kills": len(fleet.killed), "elapsed_s": round(elapsed, 1),
        "worker_exits": exits, "lease_expired": ledger["lease_expired"],
        "lease_ended": ledger["lease_ended"], "released_by_kills": ledger["released_by_kills"],
        "expired_per_kill_mean": round(sum(per_kill) / len(per_kill), 1) if per_kill else 0.0,
        "expired_per_kill_max": max(per_kill, default=0), "expired_per_kill": per_kill,
        "one_worker_one_lease": math.ceil(paced / workers * lease_s),
        **seen,
        "states": ledger["states"], "dead_intents": ledger["dead_intents"],
        "dead_letters": ledger["dead_letters"], "poison": ledger["poison"],
        "dead_by_receive_count": ledger["dead_by_receive_count"],
        "poison_sample": ledger["poison_sample"],
    }


def _archive(rev: str, into: Path) -> Path:
    """``rev``'s ``src`` taken out of git into ``into``; returns the folder to import from."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _run_child(label: str, args: argparse.Namespace, src: Path | None) -> Report:
    """One kill loop in a child process whose every import of tidings comes from ``src``."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    argv = [sys.executable, __file__, "--child", "--intents", str(args.intents),
            "--workers", str(args.workers), "--quota", str(args.quota),
            "--lease-s", str(args.lease_s), "--visibility-s", str(args.visibility_s),
            "--kill-every-s", str(args.kill_every_s), "--drop", str(args.drop),
            "--witness", args.witness, "--seed", str(args.seed),
            *(["--store", args.store] if args.store else []),
            *(["--max-kills", str(args.max_kills)] if args.max_kills is not None else [])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{label} run failed:\n{done.stderr[-4000:]}")
    report: Report = json.loads(done.stdout.strip().splitlines()[-1])
    report["label"] = label
    return report


def summary(report: Report) -> str:
    held = (f"; held {report['held']} (in the inbox {report['held_in_inbox']}, twice "
            f"{report['held_twice']}), replies dropped {report['lost_responses']}, "
            f"Message-IDs twice {report['message_ids_twice']}"
            if report["witness"] == "smtp" else "")
    return (f"{report['label']:>6} [{report['witness']}, {report.get('store', 'sqlite')}]: "
            f"{report['kills']} kills in "
            f"{report['elapsed_s']} s; "
            f"lease_expired {report['lease_expired']} + lease_ended "
            f"{report.get('lease_ended', 0)} = {report['expired_per_kill_mean']} "
            f"per kill (most {report['expired_per_kill_max']}; one worker's share of one "
            f"lease: {report['one_worker_one_lease']}); accepted keys "
            f"{report['accepted_keys']}/{report['intents']}, twice "
            f"{report['keys_accepted_twice']}; dead intents {report['dead_intents']}, dead "
            f"letters {report['dead_letters']}, by receive count "
            f"{report['dead_by_receive_count']}{held}")


def chaos(args: argparse.Namespace) -> int:
    """This checkout fault-free, then under the kill loop; the ratio of their times."""
    calm = argparse.Namespace(**{**vars(args), "kill_every_s": 0.0, "drop": 0.0})
    reports = [_run_child("fault-free", calm, ROOT / "src")]
    if not args.json:
        print(summary(reports[-1]), flush=True)
    reports.append(_run_child("chaos", args, ROOT / "src"))
    if not args.json:
        print(summary(reports[-1]), flush=True)
    ratio = reports[1]["elapsed_s"] / max(reports[0]["elapsed_s"], 1e-9)
    if args.json:
        print(json.dumps({"runs": reports, "chaos_ratio": round(ratio, 3)}, indent=2))
    else:
        print(f"chaos_ratio {ratio:.2f} (kill loop {reports[1]['elapsed_s']} s / fault-free "
              f"{reports[0]['elapsed_s']} s; target <= 1.3)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intents", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--quota", type=int, default=200)
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--visibility-s", type=float, default=5.0)
    parser.add_argument("--kill-every-s", type=float, default=2.0)
    parser.add_argument("--max-kills", type=int, default=None,
                        help="stop killing after this many kills (default: kill to the end)")
    parser.add_argument("--drop", type=float, default=0.02,
                        help="share of the witness's replies lost after it accepted")
    parser.add_argument("--witness", choices=WITNESSES, default="sandbox",
                        help="the sandbox HTTP server, or a real SMTP server process")
    parser.add_argument("--seed", type=int, default=0,
                        help="with --witness smtp: chooses the keys whose replies are lost")
    parser.add_argument("--before", default="main", help="the git revision to compare with")
    parser.add_argument("--only", choices=["before", "after"])
    parser.add_argument("--store", metavar="URL",
                        help="postgresql://user@host:port/db: each run in a fresh sibling "
                             "database db_<run> (default: a SQLite file per run)")
    parser.add_argument("--chaos", action="store_true",
                        help="this checkout fault-free, then with the kills: the time ratio")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.chaos:
        return chaos(args)

    if args.child:
        store = None
        if args.store is not None:
            from pglib import migrate, sibling_pg

            store = sibling_pg(args.store, f"blast_{os.getpid()}")
            migrate(store)
        with tempfile.TemporaryDirectory(prefix="blast-") as folder:
            report = asyncio.run(kill_loop(
                Path(folder), intents=args.intents, workers=args.workers, quota=args.quota,
                lease_s=args.lease_s, visibility_s=args.visibility_s,
                kill_every_s=args.kill_every_s, drop=args.drop, witness=args.witness,
                seed=args.seed, store=store, max_kills=args.max_kills))
        report["store"] = "postgresql" if store is not None else "sqlite"
        print(json.dumps(report))
        return 0

    reports: list[Report] = []
    with tempfile.TemporaryDirectory(prefix="blast-src-") as scratch:
        if args.only != "after":
            reports.append(_run_child(f"before ({args.before})", args,
                                      _archive(args.before, Path(scratch))))
            if not args.json:
                print(summary(reports[-1]), flush=True)
        if args.only != "before":
            reports.append(_run_child("after", args, ROOT / "src"))
            if not args.json:
                print(summary(reports[-1]), flush=True)
    if args.json:
        print(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
