"""A worker's start-up: from exec to its first claim and its first send, phase by phase.

    python bench/startup.py [--store postgresql://user@host:port/db] [--runs 5]
        [--intents 5000] [--src LABEL=PATH ...] [--json]

What a kill costs, besides the work it cuts: the restart of a ``tidings worker``
process, which claims and sends nothing until it has imported the package, read its
settings, opened the store, checked the schema, registered its liveness marker and
announced itself to the pacer. This runs that start ``--runs`` times per tree given by
``--src`` (default: this checkout; e.g. ``--src base=/tmp/base/src --src after=src``),
the trees in turn (A B A B …), against one ledger of ``--intents`` intents on one
unpaced email channel (a SQLite file, or the fresh PostgreSQL database ``<db>_startup``
beside ``--store``, left behind) and the sandbox HTTP server in this process.

Each start is the worker of ``python -m tidings worker`` in a child process that times
the first call of each step (its wall time from the exec, and its CPU time), and ends
itself with ``os._exit`` as soon as its first send is answered: the next start then
finds a worker that died holding claims, as a restart after a SIGKILL does. Printed:
per tree, the median of every step's end (ms after the exec) and the CPU spent by the
first send; the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: (module, class, method, label): the first call of each is timed in the child.
STEPS = (
    ("tidings.processes.service", None, "serve_worker", "serve_worker"),
    ("tidings.config.settings", "Settings", "load", "settings"),
    ("tidings.runtime", None, "open_store", "open_store"),
    ("{store}", "{Store}", "schema_version", "schema_version"),
    ("{store}", "{Store}", "check_schema", "check_schema"),
    ("tidings.runtime", None, "build_provider", "build_provider"),
    ("tidings.core.logs", None, "configure_logging", "configure_logging"),
    ("tidings.processes.commands", None, "build_runtime", "build_runtime"),
    ("tidings.processes.gc_tuning", None, "tune_for_serving", "gc_freeze"),
    ("tidings.runtime", "Runtime", "worker", "runtime_worker"),
    ("tidings.core.liveness", "Marker", "start", "marker_start"),
    ("tidings.delivery.pacing.pacer", "Pacer", "announce", "pacer_announce"),
    ("tidings.recovery.reconciler", "Reconciler", "run_pass", "first_reconcile_pass"),
    ("tidings.recovery.reconciler", "Reconciler", "end_gone_workers", "end_gone_workers"),
    ("{transport}", "{Transport}", "receive", "first_receive"),
    ("{store}", "{Store}", "intent_claim_many", "first_claim"),
    ("tidings.delivery.compose", "Composer", "compose", "first_compose"),
    ("tidings.delivery.pacing.pacer", "Pacer", "slot", "first_pacer_slot"),
    ("tidings.delivery.pacing.pacer", "Pacer", "start", "first_pacer_start"),
    ("tidings.delivery.sending", "Sending", "_last_checks_and_send", "first_last_checks"),
    ("tidings.providers.sandbox", "SandboxHttpProvider", "send", "first_send"),
)


def child(argv: list[str]) -> None:
    """One timed worker start (in the child process); never returns."""
    t0 = float(argv[0])
    config, url = argv[1], argv[2]
    marks: dict[str, Any] = {"python_up": (time.time() - t0) * 1000}
    cpu: dict[str, float] = {}
    import importlib

    import tidings.cli as cli

    marks["import_cli"] = (time.time() - t0) * 1000
    pg = url.startswith("postgres")
    names = {"{store}": "tidings.stores.postgres" if pg else "tidings.stores.sqlite",
             "{Store}": "PostgresStore" if pg else "SqliteStore",
             "{transport}": "tidings.transports.postgres" if pg else "tidings.transports.sqlite",
             "{Transport}": "PostgresTransport" if pg else "SqliteTransport"}
    # Imported here (after the CLI was timed): what the worker reaches for later.
    modules = {m: importlib.import_module(names.get(m, m)) for m, _, _, _ in STEPS}
    marks["import_worker_modules"] = (time.time() - t0) * 1000

    def timed(owner: Any, name: str, label: str) -> None:
        raw = owner.__dict__.get(name) if isinstance(owner, type) else None
        bound = isinstance(raw, classmethod)
        original = raw.__func__ if bound else getattr(owner, name)

        def begin() -> None:
            marks.setdefault(f"{label}.start", (time.time() - t0) * 1000)

        def end() -> None:
            if f"{label}.end" not in marks:
                marks[f"{label}.end"] = (time.time() - t0) * 1000
                cpu[label] = time.process_time() * 1000
            if label == "first_send":
                print(json.dumps({"marks": marks, "cpu_ms": cpu}), flush=True)
                os._exit(0)

        wrapper: Any
        if asyncio.iscoroutinefunction(original):
            async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
                begin()
                try:
                    return await original(*args, **kwargs)
                finally:
                    end()
            wrapper = wrapped_async
        else:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                begin()
                try:
                    return original(*args, **kwargs)
                finally:
                    end()
            wrapper = wrapped
        setattr(owner, name, classmethod(wrapper) if bound else wrapper)

    for module, cls, method, label in STEPS:
        mod = modules[module]
        owner = getattr(mod, names.get(cls, cls)) if cls else mod
        timed(owner, method, label)
    sys.argv = ["tidings", "worker", "--channel", "email", "--config", config]
    cli.main()
    os._exit(3)


def config_text(store: str, sandbox_url: str) -> str:
    return f"""store = "{store}"

[worker]
lease_s = 30.0
visibility_s = 60.0

[channels.email.provider]
kind = "sandbox"
url = "{sandbox_url}"
timeout_s = 5.0
"""


async def _seed(config: Path, n: int) -> None:
    from tidings.admission.intake import NotifyRequest
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    rt = await build_runtime(Settings.load(config))
    try:
        for start in range(0, n, 1000):
            await rt.notify_many([
                NotifyRequest(key=f"start-{i:05d}", template="t", channels=["email"],
                              recipient={"id": f"c{i:05d}", "email": f"c{i:05d}@example.com"})
                for i in range(start, min(n, start + 1000))])
    finally:
        await rt.close()


def _start_once(src: Path, config: Path, url: str, folder: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "bench"),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["TIDINGS_LOG_LEVEL"] = env.get("TIDINGS_LOG_LEVEL", "warning")
    t0 = time.time()
    done = subprocess.run([sys.executable, __file__, "--child", repr(t0), str(config), url],
                          env=env, capture_output=True, text=True, cwd=folder, check=False,
                          timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the worker did not send (exit {done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tidings.sandbox import SandboxConfig, serve

    trees: dict[str, Path] = args.trees
    sandbox = await serve(SandboxConfig(dedupe=False), "127.0.0.1", 0)
    loads = [os.getloadavg()]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    try:
        with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
            folder = Path(scratch)
            if args.store:
                from pglib import migrate, sibling_pg

                url = sibling_pg(args.store, "startup")
                await asyncio.to_thread(migrate, url)  # its own event loop
            else:
                url = f"sqlite:///{folder / 'startup.db'}"
            config = folder / "tidings.toml"
            config.write_text(config_text(url, sandbox.url))
            await _seed(config, args.intents)
            for _ in range(args.runs):
                for label, src in trees.items():
                    runs[label].append(await asyncio.to_thread(
                        _start_once, src, config, url, folder))
    finally:
        await sandbox.close()
    loads.append(os.getloadavg())
    summary: dict[str, Any] = {}
    for label, results in runs.items():
        keys = sorted({k for r in results for k in r["marks"]},
                      key=lambda k: statistics.median(r["marks"].get(k, 0) for r in results))
        summary[label] = {
            "ms_after_exec": {k: round(statistics.median(r["marks"][k] for r in results
                                                         if k in r["marks"]), 1)
                              for k in keys},
            "cpu_ms_at_first_send": round(statistics.median(
                r["cpu_ms"]["first_send"] for r in results), 1),
            "first_send_ms_all": [round(r["marks"]["first_send.end"], 1) for r in results],
        }
        if args.each:
            summary[label]["each"] = results
    return {"store": "postgresql" if args.store else "sqlite", "runs": args.runs,
            "load_avg": [[round(x, 2) for x in la] for la in loads], "trees": summary}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", metavar="URL")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--intents", type=int, default=5000)
    parser.add_argument("--src", action="append", metavar="LABEL=PATH")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--each", action="store_true", help="with --json: every start's marks")
    args = parser.parse_args(argv)
    args.trees = {label: Path(src).resolve() for label, src in
                  (spec.split("=", 1) for spec in args.src)} if args.src else {
        "this": ROOT / "src"}
    report = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"store {report['store']}, {report['runs']} starts per tree, load average "
          f"{report['load_avg'][0]} -> {report['load_avg'][1]}")
    for label, tree in report["trees"].items():
        print(f"{label}: cpu by the first send {tree['cpu_ms_at_first_send']} ms; first send "
              f"(ms after exec) {tree['first_send_ms_all']}")
        for key, ms in tree["ms_after_exec"].items():
            print(f"    {key:<32} {ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
