"""Tables and plots of a peer run, for bench/RESULTS.md.

    bench/peers/.venv/bin/python bench/peers/report.py [--results bench/peers/results]

Reads ``throughput.json``, ``pacing.json`` and ``crash.json`` (whichever exist) from the
results folder, draws ``bench/peers/plots/{pacing,crash}.png`` (send rate over time per
system, from the sandbox's per-second log) and rewrites the part of bench/RESULTS.md
between ``<!-- peers:tables:begin -->`` and ``<!-- peers:tables:end -->``; the text
around it is left alone. Each figure is the median over the repetitions, with the
smallest and largest in brackets when they differ.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE.parent / "RESULTS.md"
PLOTS = HERE / "plots"
BEGIN, END = "<!-- peers:tables:begin -->", "<!-- peers:tables:end -->"

Report = dict[str, Any]


def fmt(value: float | None, digits: int = 0, pct: bool = False) -> str:
    if value is None:
        return "—"
    if pct:
        return f"{value * 100:.{digits}f} %"
    return f"{value:,.{digits}f}"


def cell(summary: Report, digits: int = 0, pct: bool = False) -> str:
    """Median, with [min–max] when the repetitions differ."""
    median = summary.get("median")
    if median is None:
        return "—"
    text = fmt(median, digits, pct)
    lo, hi = summary["min"], summary["max"]
    if len(summary["runs"]) > 1 and fmt(lo, digits, pct) != fmt(hi, digits, pct):
        text += f" [{fmt(lo, digits, pct)}–{fmt(hi, digits, pct)}]"
    return text


def versions(entry: Report) -> str:
    return ", ".join(f"{k} {v}" for k, v in entry["versions"].items())


def throughput_table(report: Report) -> list[str]:
    systems = report["systems"]
    lines = [
        f"### throughput — {report['n']:,} jobs, {report['processes']} worker processes, "
        f"{report['repeat']} repetition(s)",
        "",
        "| system | enqueue (jobs/s) | processing (jobs/s) | end-to-end (jobs/s) | "
        "peak RSS, all worker processes (MB) | largest process (MB) | note |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]
    for name, entry in systems.items():
        s, runs = entry["summary"], entry["runs"]
        notes = []
        if any(r.get("capped") for r in runs):
            done = [f"{r.get('done', 0):,}/{r.get('e2e_done', 0):,}" for r in runs
                    if r.get("capped")]
            notes.append(f"cut at {report.get('phase_cap_s', 0):.0f} s (jobs done "
                         f"processing/end-to-end: {', '.join(done)})")
        repeats = sum(r.get("repeats", 0) + r.get("e2e_repeats", 0) for r in runs)
        if repeats:
            notes.append(f"{repeats} jobs run twice")
        errors = [r["error"] for r in runs if "error" in r]
        if errors:
            notes.append(f"error: {errors[0][:80]}")
        lines.append(
            f"| {name} | {cell(s['enqueue_rate'])} | {cell(s['processing_rate'])} | "
            f"{cell(s['e2e_rate'])} | {cell(s['peak_rss_total_mb'])} | "
            f"{cell(s['peak_rss_process_mb'])} | {'; '.join(notes)} |")
    peers = {k: v["summary"]["processing_rate"]["median"] for k, v in systems.items()
             if not k.startswith("tidings") and v["summary"]["processing_rate"]["median"]}
    if peers:
        best = max(peers, key=lambda k: peers[k])
        lines.append("")
        for name, entry in systems.items():
            rate = entry["summary"]["processing_rate"]["median"]
            if name.startswith("tidings") and rate:
                lines.append(f"- {name}: processing rate ÷ fastest peer's ({best}, "
                             f"{peers[best]:,.0f}/s) = **{rate / peers[best]:.2f}**")
    return lines


def pacing_table(report: Report) -> list[str]:
    lines = [
        f"### pacing — {report['n']:,} jobs, sandbox quota 50/s, {report['processes']} "
        f"worker processes, {report['repeat']} repetition(s)",
        "",
        "| system | rate-limit feature used | highest count in a 1 s window | "
        "windows over 50 | utilisation of the quota | 429s | all accepted after (s) | "
        "peak RSS (MB) |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, entry in report["systems"].items():
        s, runs = entry["summary"], entry["runs"]
        incomplete = [r for r in runs if not r.get("complete")]
        done = "" if not incomplete else " (not all: " + ", ".join(
            f"{r.get('sandbox', {}).get('accepted_keys', 0):,}/{report['n']:,}"
            for r in incomplete) + " by the cap)"
        lines.append(
            f"| {name} | {entry['limiter']} | {cell(s['max_rate_1s'])} | "
            f"{cell(s['windows_over_quota'])} | {cell(s['utilisation'], 1, pct=True)} | "
            f"{cell(s['refused_429'])} | {cell(s['completion_s'], 1)}{done} | "
            f"{cell(s['peak_rss_total_mb'])} |")
    return lines


def crash_table(report: Report) -> list[str]:
    latency = report.get("latency_ms")
    lines = [
        f"### crash{f' with a {latency:g} ms provider latency' if latency else ''} — "
        f"{report['n']:,} jobs, sandbox dedupe off, SIGKILL every 2 s, "
        f"{report['processes']} worker processes, {report['repeat']} repetition(s)"
        + (f"; the sandbox answers after a lognormal latency, median {latency:g} ms, "
           f"p99 {3 * latency:g} ms" if latency else ""),
        "",
        "| system | what is killed | kills | lost (never accepted) | delivered twice or more | "
        "extra deliveries | all accepted after (s) | peak RSS (MB) |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, entry in report["systems"].items():
        s, runs = entry["summary"], entry["runs"]
        kills = [len(r.get("kills", [])) for r in runs]
        what = ("a pool process (the system restarts it)" if entry.get("crash_kill") == "child"
                else "a worker instance (restarted by the driver)")
        lines.append(
            f"| {name} | {what} | {', '.join(map(str, kills))} | {cell(s['lost'])} | "
            f"{cell(s['delivered_twice'])} | {cell(s['extra_deliveries'])} | "
            f"{cell(s['completion_s'], 1)} | {cell(s['peak_rss_total_mb'])} |")
    return lines


def _frame(row: Report | None) -> str:
    return f"`{row['frame']}`" if row else ""


def _share(row: Report | None) -> str:
    return f"{row['share']:.1%}" if row else ""


def profile_lines(report: Report, top: int = 12) -> list[str]:
    """The py-spy summaries of a ``--profile`` throughput run."""
    lines = [f"### where tidings' time goes — py-spy, {report['n']:,} jobs, "
             f"{report['processes']} processes (a separate, profiled run)", ""]
    for name, entry in report["systems"].items():
        for run in entry["runs"]:
            prof = run.get("profile")
            if not prof or "error" in prof:
                continue
            threads = ", ".join(f"{t.split(': ', 1)[-1]} {share:.0%}"
                                for t, share in prof["threads"].items())
            lines += [f"**{name}** — {prof['busy']:,} busy samples of the first worker "
                      f"process while it drained the backlog (idle waits left out: "
                      f"{prof['idle']:,}); busy by thread: {threads}", "",
                      "| self (leaf) | share | | inclusive (tidings frames) | share |",
                      "|---|--:|---|---|--:|"]
            rows = max(len(prof["self"][:top]), len(prof["inclusive"][:top]))
            for i in range(rows):
                a = prof["self"][i] if i < len(prof["self"][:top]) else None
                b = prof["inclusive"][i] if i < len(prof["inclusive"][:top]) else None
                lines.append(f"| {_frame(a)} | {_share(a)} | | {_frame(b)} | {_share(b)} |")
            lines.append("")
    return lines


def settings_table(reports: dict[str, Report]) -> list[str]:
    first = next(iter(reports.values()))
    lines = ["### systems", "", "| system | versions | worker processes | settings and why |",
             "|---|---|---|---|"]
    for name, entry in first["systems"].items():
        lines.append(f"| {name} | {versions(entry)} | {entry['topology']} | "
                     f"`{entry['settings'].split(' ')[0]}` |")
    return lines


def machine_lines(reports: dict[str, Report], extra_commands: list[str]) -> list[str]:
    m = next(iter(reports.values()))["machine"]
    lines = ["### machine and commands", "",
             f"- {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; "
             f"Python {m['python']}; Redis {m['redis']}; PostgreSQL {m['postgresql']}",
             "- shared with other work while measured; load average (1, 5, 15 min) at the "
             "start → end of each workload: " + "; ".join(
                 f"{w} {_load(r.get('load_avg_at_start'))} → "
                 f"{_load(r['machine'].get('load_avg_at_end'))}"
                 for w, r in reports.items()),
             ""]
    def rev_text(rev: Report | None) -> str:
        if not rev:
            return "?"
        return f"{rev.get('commit')}{' + local changes' if rev.get('src_dirty') else ''}"

    revs = [f"{w} {rev_text(r.get('tidings_at_start'))} → {rev_text(r.get('tidings'))}"
            if r.get("tidings_at_start") else f"{w} (at its end) {rev_text(r.get('tidings'))}"
            for w, r in reports.items()]
    last = next(iter(reports.values())).get("tidings") or {}
    lines.insert(3, "- tidings measured (commit of the tree imported, per workload): "
                    + "; ".join(revs) + f"; pacer quota_safety default "
                    f"{last.get('quota_safety_default')}")
    lines += ["```sh", "bash bench/peers/setup.sh"]
    lines += [r["command"] for r in reports.values()] + extra_commands
    lines += ["bench/peers/.venv/bin/python bench/peers/report.py --results "
              "bench/peers/last-run", "```"]
    finished = [f"{w}: {r['finished_at']}" for w, r in reports.items()]
    lines.append(f"Finished {'; '.join(finished)}.")
    return lines


def _load(values: list[float] | None) -> str:
    return "/".join(f"{x:.1f}" for x in values) if values else "?"


def plot(report: Report, kind: str, path: Path) -> None:
    """Accepted (and all) requests per second, per system, from the sandbox's log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = report["systems"]
    cols = 3
    rows = (len(systems) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.0 * rows), sharex=True, squeeze=False)
    for ax, (name, entry) in zip(axes.flat, systems.items(), strict=False):
        run = next((r for r in entry["runs"] if "requests_per_window" in r), None)
        ax.set_title(name, fontsize=10)
        if run is None:
            ax.text(0.5, 0.5, "no data", ha="center", transform=ax.transAxes)
            continue
        req = {int(k): v for k, v in run["requests_per_window"].items()}
        acc = {int(k): v for k, v in run["accepted_per_window"].items()}
        start = int(run["started_at"])
        if req:
            span = range(min(req), max(req) + 1)
            ax.bar([w - start for w in span], [req.get(w, 0) for w in span], width=1.0,
                   color="#f2b8b5", label="requests (429s included)", align="edge")
            ax.bar([w - start for w in span], [acc.get(w, 0) for w in span], width=1.0,
                   color="#3a6ea5", label="accepted", align="edge")
        if kind == "pacing":
            ax.axhline(50, color="black", linestyle="--", linewidth=1, label="quota 50/s")
        for k in run.get("kills", []):
            ax.axvline(k["at"] - start, color="#c0392b", linewidth=0.6, alpha=0.6)
        ax.set_ylabel("per second", fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(systems):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the workers started", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if kind == "crash":
        from matplotlib.lines import Line2D

        handles.append(Line2D([0], [0], color="#c0392b", linewidth=0.8))
        labels.append("SIGKILL")
    title = ("pacing: sandbox requests per second (quota 50/s), first repetition"
             if kind == "pacing" else
             "crash: sandbox acceptances per second (dedupe off), first repetition"
             + (f", provider latency {report['latency_ms']:g} ms median"
                if report.get("latency_ms") else ""))
    top = 1 - 0.9 / (3.0 * rows + 0.9)  # room for the title and the legend, in inches
    fig.set_figheight(3.0 * rows + 0.9)
    fig.suptitle(title, y=0.995, fontsize=11)
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.35 / (3.0 * rows + 0.9)))
    fig.tight_layout(rect=(0, 0, 1, top))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--markdown", type=Path, default=RESULTS_MD)
    parser.add_argument("--plots", type=Path, default=PLOTS)
    args = parser.parse_args()
    reports = {w: json.loads((args.results / f"{w}.json").read_text())
               for w in ("throughput", "pacing", "crash")
               if (args.results / f"{w}.json").exists()}
    extra_crash = {p.stem: json.loads(p.read_text())
                   for p in sorted(args.results.glob("crash-latency-*.json"))}
    profile_file = args.results / "profile" / "throughput.json"
    profiled = json.loads(profile_file.read_text()) if profile_file.exists() else None
    if not reports:
        raise SystemExit(f"no <workload>.json in {args.results}")
    lines: list[str] = [BEGIN, ""]
    lines += [*settings_table(reports), ""]
    if "throughput" in reports:
        lines += [*throughput_table(reports["throughput"]), ""]
    rel = Path("peers") / args.plots.relative_to(HERE) if args.plots.is_relative_to(HERE) \
        else args.plots
    for kind, table in (("pacing", pacing_table), ("crash", crash_table)):
        if kind in reports:
            plot(reports[kind], kind, args.plots / f"{kind}.png")
            lines += [*table(reports[kind]), "",
                      f"![{kind}: send rate over time per system]({rel}/{kind}.png)", ""]
    for stem, extra in extra_crash.items():
        plot(extra, "crash", args.plots / f"{stem}.png")
        lines += [*crash_table(extra), "",
                  f"![{stem}: send rate over time per system]({rel}/{stem}.png)", ""]
    if profiled is not None:
        lines += profile_lines(profiled)
    extra = [profiled["command"] + "   # the profile, a separate run"] if profiled else []
    lines += [*machine_lines({**reports, **extra_crash}, extra), "", END]
    block = "\n".join(lines)
    text = args.markdown.read_text() if args.markdown.exists() else f"# Results\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    args.markdown.write_text(head + block + tail)
    print(f"wrote {args.markdown} and {args.plots}/")


if __name__ == "__main__":
    main()
