"""The demo's report: the ledger's view beside the sandbox's own counts.

Every invariant is judged by the sandbox (the provider is the witness): what it
accepted, what it accepted twice, and how many requests it saw per second.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tidings.core.states import ACCEPTED_FAMILY, TERMINAL, State
from tidings.delivery.uncertain import BY_EVIDENCE, BY_LOOKUP, RESENT
from tidings.runtime import Runtime

RETRY_EVENTS = ("transient_failure", "rate_limited", "resolved_retry", "released")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def build_report(runtime: Runtime, stats: dict[str, Any], *, recipients: int,
                       elapsed_s: float, injected: dict[str, Any]) -> dict[str, Any]:
    counts = await runtime.store.intent_counts()
    events = await runtime.store.event_counts()
    channels: dict[str, Any] = {}
    lost = duplicate_sends = violations = 0
    for channel in sorted(set(counts) | set(runtime.channels)):
        by_state = counts.get(channel, {})
        by_event = events.get(channel, {})
        sandbox = stats["channels"].get(channel, {})
        latencies = await runtime.store.intent_latencies(channel)
        accepted = sum(by_state.get(s.value, 0) for s in ACCEPTED_FAMILY)
        eligible = sum(by_state.values())
        unfinished = sum(n for s, n in by_state.items() if State(s) not in TERMINAL)
        provider_accepted = int(sandbox.get("accepted_keys", 0))
        row = {
            "eligible": eligible,
            "accepted": accepted,
            "rejected": by_state.get("rejected", 0),
            "dead": by_state.get("dead", 0),
            "cancelled": by_state.get("cancelled", 0),
            "expired": by_state.get("expired", 0),
            "unfinished": unfinished,
            "duplicates_suppressed": by_event.get("duplicate_observed", 0),
            "provider_accepted": provider_accepted,
            "provider_duplicate_accepts": int(sandbox.get("keys_accepted_twice", 0)),
            "provider_requests": int(sandbox.get("requests", 0)),
            "quota_per_s": sandbox.get("quota"),
            "max_rate_1s": int(sandbox.get("max_rate_1s", 0)),
            "quota_violations": int(sandbox.get("quota_violations", 0)),
            "rate_limited": by_event.get("rate_limited", 0),
            "provider_refused_quota": int(sandbox.get("refused_quota", 0)),
            "retries": sum(by_event.get(e, 0) for e in RETRY_EVENTS),
            "uncertain_resolved": by_event.get("resolved_accepted", 0)
            + by_event.get("resolved_retry", 0),
            "leases_expired": by_event.get("lease_expired", 0),
            # How each uncertain send was settled (events), and what is still held.
            "uncertain": {
                "resolved_by_lookup": sum(by_event.get(e, 0) for e in BY_LOOKUP),
                "resolved_by_webhook": sum(by_event.get(e, 0) for e in BY_EVIDENCE),
                "held": by_state.get(State.HELD.value, 0),
                "resent": sum(by_event.get(e, 0) for e in RESENT),
            },
            "latency_p50_s": round(percentile(latencies, 0.5), 3),
            "latency_p99_s": round(percentile(latencies, 0.99), 3),
        }
        channels[channel] = row
        # Lost: still unfinished, or the ledger claims acceptances the provider never made.
        lost += unfinished + max(0, accepted - provider_accepted)
        duplicate_sends += row["provider_duplicate_accepts"] + max(0, provider_accepted - accepted)
        violations += row["quota_violations"]
    invariants = {"lost": lost, "duplicate_sends": duplicate_sends,
                  "quota_violations": violations}
    ok = all(v == 0 for v in invariants.values()) and all(
        c["accepted"] == c["provider_accepted"] for c in channels.values())
    return {
        "ok": ok,
        "recipients": recipients,
        "elapsed_s": round(elapsed_s, 2),
        "channels": channels,
        "invariants": invariants,
        "injected": injected,
        "provider_totals": {k: stats["total"].get(k) for k in (
            "requests", "accepted", "deduplicated", "refused_quota", "refused_injected",
            "server_errors", "timeouts", "lost_responses", "rejected")},
        # With --batch: the batch endpoint's requests, and the messages they carried.
        **({"batch_requests": stats["batch_requests"]} if "batch_requests" in stats else {}),
    }


def render_report(report: dict[str, Any], console: Console) -> None:
    """A table per channel, then the invariants, for a terminal."""
    table = Table(title="delivery report",
                  caption="provider_* and rate figures are the sandbox's own counts")
    table.add_column("")
    names = list(report["channels"])
    for name in names:
        table.add_column(name, justify="right")
    fields = ["eligible", "accepted", "provider_accepted", "rejected", "dead", "cancelled",
              "expired", "duplicates_suppressed", "provider_duplicate_accepts", "rate_limited",
              "retries", "uncertain_resolved", "leases_expired", "quota_per_s", "max_rate_1s",
              "quota_violations", "latency_p50_s", "latency_p99_s"]
    for f in fields:
        table.add_row(f, *(str(report["channels"][n].get(f)) for n in names))
    for f in ("resolved_by_lookup", "resolved_by_webhook", "held", "resent"):
        table.add_row(f"uncertain: {f}",
                      *(str(report["channels"][n].get("uncertain", {}).get(f)) for n in names))
    console.print(table)
    inv = report["invariants"]
    verdict = "[green]OK[/green]" if report["ok"] else "[red]FAILED[/red]"
    console.print(f"{verdict}  lost {inv['lost']}, duplicate sends {inv['duplicate_sends']}, "
                  f"quota violations {inv['quota_violations']}; "
                  f"{report['recipients']:,} customers in {report['elapsed_s']} s")
    if batches := report.get("batch_requests"):
        console.print(f"  email in {batches['requests']:,} batch requests carrying "
                      f"{batches['messages']:,} messages (at most {batches['largest']} a "
                      "request)")
    for what, value in report.get("injected", {}).items():
        console.print(f"  injected {what}: {value}")
    if report.get("workdir"):
        console.print(f"  kept in {report['workdir']}: {', '.join(report.get('kept') or [])} "
                      "(tidings.db for `tidings inspect --config "
                      f"{report['workdir']}/tidings.toml`, each process's log)", soft_wrap=True)
    else:
        console.print("  work folder removed (--keep or --db keeps it)")
