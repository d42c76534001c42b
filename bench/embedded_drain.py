"""Drain rate of a worker embedded in a FastAPI process served by uvicorn, against
``tidings worker`` as a process of its own: same store, same backlog, same provider.

    python bench/embedded_drain.py [--n 5000] [--rounds 4] [--stores sqlite,postgresql]
        [--modes embedded,worker] [--latency-ms 2] [--healthz-per-s 20]
        [--loop asyncio|uvloop] [--pg URL] [--keep] [--json]

One sandbox server process (``tidings sandbox``: a constant ``--latency-ms`` a send, a
quota no run reaches, dedupe off so a second send of a key counts twice) is the
provider and the witness of every run; its counts are reset before each. A run: a
fresh store (a SQLite file, or the PostgreSQL database ``<db>_<mode>`` beside
``--pg``, re-created), N intents admitted beforehand with ``notify_many``, then

- *embedded*: ``uvicorn`` serving this module's FastAPI app (``app_factory``), whose
  lifespan runs ``tidings.embedded.embedded(runtime, channels=["email"])``;
- *worker*: the same app, with no embedded service, and ``tidings worker --channel
  email`` as a process of its own;
- *embedded-gc* (asked for with ``--modes``): embedded, the app's lifespan also tuning
  the host's collector for serving (``tidings.processes.gc_tuning.serving_gc``) as
  ``tidings worker`` tunes its own, which ``embedded()`` leaves to its host,

while the bench sends a trickle of ``GET /healthz`` (``--healthz-per-s``) to the app,
so the embedded worker shares its loop with a real server answering requests. The
modes take turns in ``--rounds`` rounds per store (the order reversing every round:
A B, B A) so drift of this shared machine's load falls on each alike. uvicorn runs
``--loop asyncio`` by default, the loop ``tidings worker`` runs on, so the ratio is the
embedding's alone.

The drain is read from the sandbox: its ``accepted`` count polled every 20 ms from the
first send it saw to the last of N; ``rate_per_s`` = keys accepted in that span / the
span (start-up is left out, and printed apart as the first send after the draining
process started). ``ratio`` = embedded / worker deliveries a second (target: at least
0.9), pooled over the rounds, with each round's and their median. Also printed: the
/healthz latencies during the drain, and the CPU per 1,000 deliveries (from /proc) of
what each mode runs (embedded: its one process; worker: the worker and the app beside
it), with their ratio, steadier than the rates on a shared machine. Checked: the
sandbox accepted N keys, none twice, and the ledger holds N intents, all ``accepted``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchlib import Report, emit, rounded, source_revision
from pglib import is_pg, redact, sibling_pg

if TYPE_CHECKING:
    import httpx
    from fastapi import FastAPI

BENCH = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench_drain"
MODES = ("embedded", "embedded-gc", "worker")
DEFAULT_MODES = ("embedded", "worker")
STORES = ("sqlite", "postgresql")
POLL_S = 0.02
CONFIG_ENV = "TIDINGS_BENCH_DRAIN_CONFIG"
EMBED_ENV = "TIDINGS_BENCH_DRAIN_EMBED"


# ------------------------------------------------------------------ the app under test


def app_factory() -> FastAPI:
    """The FastAPI app uvicorn serves (``--factory``): a runtime in its lifespan and,
    when ``TIDINGS_BENCH_DRAIN_EMBED`` names an embedded mode, the email worker embedded
    beside it (``embedded-gc``: with the collector tuned as ``tidings worker`` tunes it)."""
    from fastapi import FastAPI

    from tidings import Settings, build_runtime
    from tidings.embedded import embedded

    settings = Settings.load(os.environ[CONFIG_ENV])
    mode = os.environ.get(EMBED_ENV, "worker")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with await build_runtime(settings) as runtime:
            app.state.runtime = runtime
            if mode == "worker":
                app.state.services = None
                yield
                return
            # embedded-gc: what `tidings worker` does for itself, the host's collector
            # tuned for serving (embedded(tune_gc=True)); left as is otherwise.
            async with embedded(runtime, channels=["email"],
                                tune_gc=mode == "embedded-gc") as services:
                app.state.services = services
                yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        services = app.state.services
        failed = [] if services is None else services.failed()
        return {"ok": not failed, "embedded": services is not None}

    return app


# ------------------------------------------------------------------ pure figures


def drain_rate(samples: list[tuple[float, int]], n: int) -> tuple[float, float, int]:
    """(deliveries/s, span s, deliveries counted) over polls of (time, accepted): from the
    first poll that saw a send to the first that saw all N."""
    first = next((i for i, (_, a) in enumerate(samples) if a > 0), None)
    last = next((i for i, (_, a) in enumerate(samples) if a >= n), None)
    if first is None or last is None:
        raise ValueError("the samples do not reach the first send and the last")
    (t0, a0), (t1, a1) = samples[first], samples[last]
    if last == first:
        return float("inf"), 0.0, a1 - a0
    return (a1 - a0) / (t1 - t0), t1 - t0, a1 - a0


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run_order(rounds: int, modes: tuple[str, ...] = DEFAULT_MODES) -> list[str]:
    """The modes in turn, the first of each round alternating: A B, B A, A B, ..."""
    order: list[str] = []
    for r in range(rounds):
        order.extend(modes if r % 2 == 0 else tuple(reversed(modes)))
    return order


def store_figures(runs: list[Report], modes: tuple[str, ...]) -> Report:
    """One store's runs summed up: each mode's deliveries a second over its rounds (the
    deliveries over the time they took: a slow round weighs its time), its CPU per 1,000
    deliveries (weighted the same way), and each embedded mode's ratios to the worker's
    (pooled, and each round's with their median)."""
    def of(mode: str) -> list[Report]:
        return [r for r in runs if r["mode"] == mode]

    rate = {m: sum(r["counted"] for r in of(m)) / sum(r["drain_s"] for r in of(m))
            for m in modes}
    cpu = {m: sum(sum(r["cpu_ms_per_1000"].values()) * r["counted"] for r in of(m))
           / sum(r["counted"] for r in of(m)) for m in modes}
    figures: Report = {"rate_per_s": {m: rounded(rate[m], 1) for m in modes},
                       "rounds_per_s": {m: [r["rate_per_s"] for r in of(m)] for m in modes},
                       "cpu_ms_per_1000": {m: rounded(cpu[m], 1) for m in modes},
                       "vs_worker": {}}
    for m in modes:
        if m == "worker" or "worker" not in modes:
            continue
        pairs = [e["rate_per_s"] / w["rate_per_s"]
                 for e, w in zip(of(m), of("worker"), strict=True)]
        figures["vs_worker"][m] = {
            "ratio": rounded(rate[m] / rate["worker"], 3),
            "round_ratios": [rounded(p, 3) for p in pairs],
            "median_round_ratio": rounded(statistics.median(pairs), 3),
            "cpu_ratio": rounded(cpu[m] / cpu["worker"], 3)}
    return figures


# ------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` so far, its waited-for children included."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> int:
    """SIGTERM (the graceful drain of both), then SIGKILL if it is not gone in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def tail(path: Path, chars: int = 2000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-chars:]
    return ""


@dataclass
class Sandbox:
    """The ``tidings sandbox`` process every run sends to."""

    proc: subprocess.Popen[bytes]
    url: str

    @classmethod
    def start(cls, folder: Path, latency_ms: float) -> Sandbox:
        config = folder / "sandbox.json"
        config.write_text(json.dumps({
            "quotas": {"email": 1_000_000}, "dedupe": False,
            "latency": {"email": {"median_ms": latency_ms, "p99_ms": latency_ms}}}))
        log = folder / "sandbox.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tidings", "sandbox", "--port", "0",
                 "--config", str(config)], stdout=subprocess.PIPE, stderr=out)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if "listening on " not in line:
            stop_process(proc)
            raise SystemExit(f"the sandbox did not start: {line!r}\n{tail(log)}")
        return cls(proc, line.rsplit(" ", 1)[1].strip())


@dataclass
class Run:
    """One drain: its processes and what was seen of them."""

    mode: str
    store: str
    n: int
    folder: Path
    samples: list[tuple[float, int]] = field(default_factory=list)
    healthz_ms: list[float] = field(default_factory=list)
    healthz_errors: int = 0


def settings_text(store: str, sandbox_url: str) -> str:
    return f"""store = "{store}"

[channels.email.provider]
kind = "sandbox"
url = "{sandbox_url}"
timeout_s = 5.0
"""


async def seed(config: Path, n: int) -> None:
    """N intents due now, admitted before any worker runs."""
    from tidings import Settings, build_runtime
    from tidings.admission.intake import NotifyRequest

    async with await build_runtime(Settings.load(config)) as runtime:
        for start in range(0, n, 1000):
            await runtime.notify_many([
                NotifyRequest(key=f"drain-{i:06d}", template="receipt", channels=["email"],
                              recipient={"id": f"c{i:06d}", "email": f"c{i:06d}@example.com"})
                for i in range(start, min(n, start + 1000))])


async def ledger_counts(config: Path) -> dict[str, Any]:
    from tidings import Settings, build_runtime

    async with await build_runtime(Settings.load(config)) as runtime:
        counts: dict[str, Any] = await runtime.store.intent_counts()
        return counts


def start_app(run: Run, config: Path, *, loop: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, CONFIG_ENV: str(config), EMBED_ENV: run.mode}
    with (run.folder / f"app-{run.mode}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "embedded_drain:app_factory",
             "--app-dir", str(BENCH), "--host", "127.0.0.1", "--port", str(port),
             "--loop", loop, "--no-access-log", "--lifespan", "on"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=run.folder)
    return proc, f"http://127.0.0.1:{port}"


def start_worker(run: Run, config: Path) -> subprocess.Popen[bytes]:
    with (run.folder / "worker.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tidings", "worker", "--channel", "email",
             "--config", str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=run.folder)


async def wait_ready(client: httpx.AsyncClient, base: str, proc: subprocess.Popen[bytes],
                     log: Path, guard_s: float) -> None:
    import httpx

    deadline = time.monotonic() + guard_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited ({proc.returncode}):\n{tail(log)}")
        with contextlib.suppress(httpx.TransportError):
            if (await client.get(f"{base}/healthz")).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the app did not answer /healthz in {guard_s:.0f} s")
        await asyncio.sleep(0.05)


async def trickle(client: httpx.AsyncClient, base: str, per_s: float, run: Run,
                  stop: asyncio.Event) -> None:
    """GET /healthz at ``per_s`` until ``stop``, each answer's latency recorded."""
    import httpx

    gap = 1.0 / per_s
    next_at = time.perf_counter()
    while not stop.is_set():
        began = time.perf_counter()
        try:
            answer = await client.get(f"{base}/healthz")
            if answer.status_code == 200 and answer.json().get("ok"):
                run.healthz_ms.append((time.perf_counter() - began) * 1000)
            else:
                run.healthz_errors += 1
        except httpx.HTTPError:
            run.healthz_errors += 1
        next_at += gap
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.perf_counter()))


async def drain(run: Run, sandbox: Sandbox, config: Path, *, loop: str,
                healthz_per_s: float, guard_s: float) -> Report:
    """One mode's drain of the seeded backlog; its figures and checks."""
    import httpx

    async with httpx.AsyncClient(timeout=30) as client, httpx.AsyncClient(
            timeout=30) as poller:
        (await poller.post(f"{sandbox.url}/v1/reset")).raise_for_status()
        embed = run.mode != "worker"
        started = time.monotonic()
        app, base = start_app(run, config, loop=loop)
        worker: subprocess.Popen[bytes] | None = None
        stop = asyncio.Event()
        feeder: asyncio.Task[None] | None = None
        try:
            await wait_ready(client, base, app, run.folder / f"app-{run.mode}.log", guard_s)
            if not embed:
                started = time.monotonic()
                worker = start_worker(run, config)
            drainer = app if worker is None else worker
            feeder = asyncio.create_task(trickle(client, base, healthz_per_s, run, stop))
            first_at: float | None = None
            cpu: dict[str, float] = {}
            while True:
                stats = (await poller.get(f"{sandbox.url}/v1/stats")).json()
                accepted = int(stats["channels"].get("email", {}).get("accepted", 0))
                now = time.monotonic()
                run.samples.append((now, accepted))
                if accepted > 0 and first_at is None:
                    first_at = now
                    cpu = {"drainer": proc_cpu_s(drainer.pid), "app": proc_cpu_s(app.pid)}
                if accepted >= run.n:
                    cpu = {"drainer": proc_cpu_s(drainer.pid) - cpu["drainer"],
                           "app": proc_cpu_s(app.pid) - cpu["app"]}
                    if embed:  # one process: the app's CPU is the drainer's
                        del cpu["app"]
                    break
                for proc, log in ((app, f"app-{run.mode}.log"), (worker, "worker.log")):
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"{log[:-4]} exited ({proc.returncode}):\n"
                                           f"{tail(run.folder / log)}")
                if now - started > guard_s:
                    raise RuntimeError(f"{accepted} of {run.n} sent after {guard_s:.0f} s")
                await asyncio.sleep(POLL_S)
        finally:
            stop.set()
            if feeder is not None:
                await feeder
            exits = {}
            if worker is not None:
                exits["worker"] = await asyncio.to_thread(stop_process, worker)
            exits["app"] = await asyncio.to_thread(stop_process, app)
        sandbox_stats = (await poller.get(f"{sandbox.url}/v1/stats")).json()
    email = sandbox_stats["channels"].get("email", {})
    ledger = await ledger_counts(config)
    rate, span, counted = drain_rate(run.samples, run.n)
    problems = []
    if email.get("accepted_keys") != run.n or email.get("keys_accepted_twice"):
        problems.append(f"sandbox accepted {email.get('accepted_keys')} keys, "
                        f"{email.get('keys_accepted_twice')} twice")
    if ledger != {"email": {"accepted": run.n}}:
        problems.append(f"ledger {ledger}")
    if any(code not in (0, -signal.SIGTERM) for code in exits.values()):
        problems.append(f"exit codes {exits}")
    per_k = 1000 / counted if counted else 0.0
    assert first_at is not None
    return {
        "mode": run.mode, "store": run.store, "rate_per_s": rounded(rate, 1),
        "drain_s": rounded(span), "counted": counted,
        "first_send_after_start_s": rounded(first_at - started, 2),
        "cpu_ms_per_1000": {k: rounded(v * 1000 * per_k, 1) for k, v in cpu.items()},
        "healthz": {"answered": len(run.healthz_ms), "errors": run.healthz_errors,
                    "p50_ms": rounded(percentile(run.healthz_ms, 0.5), 2),
                    "p99_ms": rounded(percentile(run.healthz_ms, 0.99), 2),
                    "max_ms": rounded(max(run.healthz_ms, default=0.0), 2)},
        "sandbox": {k: email.get(k) for k in ("requests", "accepted", "accepted_keys",
                                              "keys_accepted_twice")},
        "exits": exits, "problems": problems,
    }


def fresh_store(kind: str, mode: str, round_no: int, folder: Path, pg: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{folder / f'drain-{mode}-{round_no}.db'}"
    return sibling_pg(pg, mode)


async def bench(args: argparse.Namespace, folder: Path) -> Report:
    sandbox = Sandbox.start(folder, args.latency_ms)
    runs: list[Report] = []
    try:
        for kind in args.stores:
            for i, mode in enumerate(run_order(args.rounds, args.modes)):
                round_no = i // len(args.modes)
                run_folder = folder / f"{kind}-{round_no}-{mode}"
                run_folder.mkdir()
                store = fresh_store(kind, mode, round_no, run_folder, args.pg)
                config = run_folder / "tidings.toml"
                config.write_text(settings_text(store, sandbox.url))
                await seed(config, args.n)
                run = Run(mode=mode, store=kind, n=args.n, folder=run_folder)
                report = await drain(run, sandbox, config, loop=args.loop,
                                     healthz_per_s=args.healthz_per_s, guard_s=args.guard_s)
                report["round"] = round_no
                runs.append(report)
                print(f"  {kind:<10} round {round_no} {mode:<11} "
                      f"{report['rate_per_s']:>9,.0f}/s", file=sys.stderr, flush=True)
    finally:
        stop_process(sandbox.proc)
    stores = {kind: store_figures([r for r in runs if r["store"] == kind], args.modes)
              for kind in args.stores}
    return {"n": args.n, "rounds": args.rounds, "modes": list(args.modes),
            "latency_ms": args.latency_ms,
            "healthz_per_s": args.healthz_per_s, "loop": args.loop,
            "pg": redact(args.pg) if "postgresql" in args.stores else None,
            "stores": stores, "runs": runs,
            "problems": [p for r in runs for p in r["problems"]],
            "revision": source_revision()}


def summary(report: Report) -> str:
    lines = [f"{report['n']:,} intents admitted beforehand, drained by the sandbox's counts "
             f"({report['latency_ms']:g} ms a send), {report['rounds']} rounds a mode, "
             f"GET /healthz {report['healthz_per_s']:g}/s, uvicorn --loop {report['loop']}"]
    labels = {"embedded": "embedded in uvicorn", "embedded-gc": "embedded, GC tuned",
              "worker": "tidings worker"}
    for kind, figures in report["stores"].items():
        rate, cpu = figures["rate_per_s"], figures["cpu_ms_per_1000"]
        lines.append(f"  {kind}")
        lines += [f"    {labels[m]:<20} {rate[m]:>8,.0f}/s   {cpu[m]:>5,.0f} CPU ms a 1,000"
                  for m in rate]
        for mode, versus in figures["vs_worker"].items():
            each = ", ".join(f"{p:.3f}" for p in versus["round_ratios"])
            lines.append(f"    {mode} / worker: ratio {versus['ratio']:.3f} (rounds {each}; "
                         f"median {versus['median_round_ratio']:.3f}), CPU a delivery "
                         f"{versus['cpu_ratio']:.3f}")
    lines.append("  run                          rate/s  first send  CPU ms/1000 (drainer, app)"
                 "  /healthz p50 / p99 / max ms")
    for r in report["runs"]:
        cpu, hz = r["cpu_ms_per_1000"], r["healthz"]
        app = f"{cpu['app']:>6,.0f}" if "app" in cpu else "  same"
        lines.append(f"  {r['store']:<10} {r['round']} {r['mode']:<11} {r['rate_per_s']:>10,.0f}"
                     f"  {r['first_send_after_start_s']:>8.2f} s  {cpu['drainer']:>8,.0f}, "
                     f"{app}           {hz['p50_ms']:>6.1f} / {hz['p99_ms']:>6.1f} / "
                     f"{hz['max_ms']:>6.1f}")
    lines.append("  ratio = embedded / tidings worker deliveries a second (target >= 0.9); "
                 "CPU: the embedded process, the worker and the app beside it")
    if report["problems"]:
        lines.append(f"  PROBLEMS: {report['problems']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="intents in the backlog")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of both modes a store (even: ABBA cancels drift)")
    parser.add_argument("--stores", default=",".join(STORES),
                        help="comma-separated: sqlite, postgresql")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--latency-ms", type=float, default=2.0,
                        help="the sandbox's constant latency a send")
    parser.add_argument("--healthz-per-s", type=float, default=20.0)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="uvicorn's event loop (tidings worker runs asyncio's)")
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--guard-s", type=float, default=600.0,
                        help="give up on a run not drained by then")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    for kind in args.stores:
        if kind not in STORES:
            parser.error(f"--stores: {kind!r} is not one of {', '.join(STORES)}")
    args.modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    for mode in args.modes:
        if mode not in MODES:
            parser.error(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
    if not args.modes or len(set(args.modes)) != len(args.modes):
        parser.error("--modes: name each mode once")
    if args.n < 1 or args.rounds < 1 or args.healthz_per_s <= 0 or args.latency_ms < 0:
        parser.error("--n and --rounds must be at least 1, --healthz-per-s positive, "
                     "--latency-ms not negative")
    if "postgresql" in args.stores and not is_pg(args.pg):
        parser.error("--pg must be a postgresql:// URL")
    folder = Path(tempfile.mkdtemp(prefix="tidings-bench-drain-"))
    try:
        report = asyncio.run(bench(args, folder))
    finally:
        if args.keep:
            print(f"work folder kept: {folder}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    emit(report, as_json=args.json, summary=summary)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
