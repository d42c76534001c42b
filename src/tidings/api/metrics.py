"""Prometheus metrics for ``/metrics``, in a registry of the app's own (never the global
one, so two apps in one process, or a test, never share counters).

Most of what matters happens in other processes (workers, schedulers, reconcilers on
other machines), so those numbers are read from the store at scrape time: admissions,
attempts, 429s, retries, duplicates suppressed, dead letters, queue depth and age, the
latency histogram and the SLI are the fleet's, whichever API process is scraped.
The providers' bounce and complaint reports per campaign are counted against the
campaign's accepted sends the ledger holds (``tidings_campaign_bounce_rate``,
``tidings_campaign_complaint_rate``: the share over what the retention keeps, the
reputation a mailbox provider judges a sender on). Their reads are cached for
``cache_s`` so a busy scraper costs one ledger scan per interval. Only what happens
inside this API process (publish refusals, trigger refusals) is counted in-process;
Prometheus sums those across API instances.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tidings.core.lanes import lane_name
from tidings.operate import guardrails, operations
from tidings.operate.readmodel import PlanLine, UncertainSends
from tidings.runtime import Runtime
from tidings.stores.base import CampaignReports, LatencyHistogram, ProviderEventCount
from tidings.webhooks.metrics import provider_event_families

#: The content type ``render`` produces.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, kw_only=True)
class _Reading:
    snap: operations.Snapshot
    histograms: tuple[LatencyHistogram, ...]
    triggers: dict[str, int]
    plan: tuple[PlanLine, ...]
    provider_events: tuple[ProviderEventCount, ...] = ()
    guardrails: tuple[guardrails.Reading, ...] = ()
    uncertain: Mapping[str, UncertainSends] = field(default_factory=dict)
    suppressed_sends: Mapping[tuple[str, str], int] = field(default_factory=dict)
    suppressions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    throttled_sends: Mapping[tuple[str, str], int] = field(default_factory=dict)
    reports: tuple[CampaignReports, ...] = ()
    min_accepted: int = 1
    """Accepted sends below which a campaign's report rates are not given (the
    guardrails' ``min_sends``)."""
    lanes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Each channel's lane names (``Runtime.channel_lanes``)."""


class _StoreCollector(Collector):
    """Yields the fleet's numbers from the last reading."""

    def __init__(self) -> None:
        self.reading: _Reading | None = None

    def describe(self) -> list[Metric]:
        return []  # names are dynamic per reading; nothing to reserve at registration

    def collect(self) -> Iterator[Metric]:
        r = self.reading
        if r is None:
            return
        snap = r.snap
        triggers = CounterMetricFamily("tidings_trigger_success",
                                       "HTTP triggers accepted, per campaign.", labels=["campaign"])
        for campaign, count in sorted(r.triggers.items()):
            triggers.add_metric([campaign], count)
        yield triggers

        admitted = CounterMetricFamily("tidings_admitted", "Intents admitted (ever created).",
                                       labels=["campaign", "channel"])
        backlog = GaugeMetricFamily("tidings_backlog", "Due intents not yet settled.",
                                    labels=["campaign", "channel"])
        campaign_sli = GaugeMetricFamily(
            "tidings_campaign_sli", "Share of eligible intents accepted before expiry.",
            labels=["campaign", "channel"])
        totals: dict[str, operations.Totals] = {}
        for s in snap.summaries:
            campaign = s.campaign or ""
            admitted.add_metric([campaign, s.channel], s.total)
            backlog.add_metric([campaign, s.channel], s.backlog)
            value = operations.sli(s)
            if value is not None:
                campaign_sli.add_metric([campaign, s.channel], value)
            totals.setdefault(s.channel, operations.Totals()).add(s)
        yield admitted
        yield backlog
        yield campaign_sli

        sli = GaugeMetricFamily("tidings_sli", "Share of eligible intents accepted before "
                                "expiry, per channel.", labels=["channel"])
        for channel, t in sorted(totals.items()):
            value = operations.sli(t)
            if value is not None:
                sli.add_metric([channel], value)
        yield sli

        depth = GaugeMetricFamily("tidings_queue_depth", "Messages on a channel queue.",
                                  labels=["channel", "state"])
        age = GaugeMetricFamily("tidings_queue_oldest_age_seconds",
                                "Age of the oldest message on a channel queue.",
                                labels=["channel"])
        dead = GaugeMetricFamily("tidings_dead_letters", "Messages in a channel's dead letters.",
                                 labels=["channel"])
        for channel, q in sorted(snap.queues.items()):
            for state, value in (("ready", q.ready), ("delayed", q.delayed),
                                 ("in_flight", q.in_flight)):
                depth.add_metric([channel, state], value)
            age.add_metric([channel], q.oldest_age_s)
            dead.add_metric([channel], q.dead)
        yield depth
        yield age
        yield dead
        lane_ready = GaugeMetricFamily(
            "tidings_queue_lane_ready", "Messages ready now in a lane of a channel queue.",
            labels=["channel", "lane"])
        lane_age = GaugeMetricFamily(
            "tidings_queue_lane_oldest_age_seconds",
            "Age of the oldest message in a lane of a channel queue.", labels=["channel", "lane"])
        for channel, q in sorted(snap.queues.items()):
            names = r.lanes.get(channel, ())
            for d in q.lanes:
                lane_ready.add_metric([channel, lane_name(names, d.lane)], d.ready)
                lane_age.add_metric([channel, lane_name(names, d.lane)], d.oldest_age_s)
        yield lane_ready
        yield lane_age
        group_ready = GaugeMetricFamily(
            "tidings_queue_group_ready",
            "Messages ready now in a group of a lane (fair share), for the groups holding "
            "the most messages.", labels=["channel", "lane", "group"])
        group_total = GaugeMetricFamily(
            "tidings_queue_group_messages",
            "Messages in a group of a lane (fair share), ready or not, for the groups "
            "holding the most messages.", labels=["channel", "lane", "group"])
        for channel, q in sorted(snap.queues.items()):
            names = r.lanes.get(channel, ())
            for g in q.groups:
                labels = [channel, lane_name(names, g.lane), g.group]
                group_ready.add_metric(labels, g.ready)
                group_total.add_metric(labels, g.total)
        yield group_ready
        yield group_total
        out = GaugeMetricFamily(
            "tidings_provider_out",
            "1 while a worker last said a provider of a channel with fallbacks is out (its "
            "circuit open), 0 once one said it is back.", labels=["channel", "provider"])
        for channel, providers in sorted(snap.providers.items()):
            for name, said in sorted(providers.items()):
                out.add_metric([channel, name], 1.0 if said.get("out") else 0.0)
        yield out

        for name, event, doc in (
            ("tidings_attempts", "claimed", "Delivery attempts (claims) per channel."),
            ("tidings_duplicates_suppressed", "duplicate_observed",
             "Redeliveries of finished intents, acked with no send."),
            ("tidings_rate_limited", "rate_limited", "Provider 429 answers per channel."),
            ("tidings_retries", "transient_failure", "Transient failures to be retried."),
            ("tidings_rejected", "rejected",
             "Permanent rejections (an invalid address, a 4xx other than 429)."),
            ("tidings_dead", "dead", "Intents whose retry budget was spent."),
            ("tidings_throttle_deferred", "throttle_deferred",
             "Sends a per-recipient throttle moved to its next window."),
        ):
            family = CounterMetricFamily(name, doc, labels=["channel"])
            for channel in sorted(set(snap.queues) | set(snap.events)):
                family.add_metric([channel], snap.events.get(channel, {}).get(event, 0))
            yield family

        latency = HistogramMetricFamily(
            "tidings_delivery_latency_seconds",
            "Seconds from an intent's due time to the provider's acceptance.",
            labels=["channel"])
        for h in r.histograms:
            cumulative, buckets = 0, []
            for bound, count in zip((*h.bounds, float("inf")), h.counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
            latency.add_metric([h.channel], buckets, sum_value=h.sum)
        yield latency

        drain = GaugeMetricFamily("tidings_drain_seconds",
                                  "Backlog divided by the sustained send rate.",
                                  labels=["channel"])
        deadline = GaugeMetricFamily(
            "tidings_deadline_seconds",
            "Seconds until the earliest expiry among a channel's backlog.", labels=["channel"])
        for line in r.plan:
            if line.campaign is not None:
                continue
            if line.drain_s is not None:
                drain.add_metric([line.channel], line.drain_s)
            if line.deadline_in_s is not None:
                deadline.add_metric([line.channel], line.deadline_in_s)
        yield drain
        yield deadline
        yield from provider_event_families(r.provider_events)
        unsettled = GaugeMetricFamily(
            "tidings_uncertain",
            "Sends whose answer was lost, not yet settled: uncertain (being settled by the "
            "channel's policy), held (waiting for evidence), awaiting_operator (held past "
            "hold_s).", labels=["channel", "state"])
        for channel, row in sorted(r.uncertain.items()):
            for state, count in (("uncertain", row.uncertain), ("held", row.held),
                                 ("awaiting_operator", row.awaiting_operator)):
                unsettled.add_metric([channel, state], count)
        yield unsettled
        yield from _guardrail_families(snap, r.guardrails)
        yield from _hold_families(snap)
        yield from _suppression_families(r)
        yield from _digest_families(snap)
        yield from _report_families(r)


def _report_families(r: _Reading) -> Iterator[Metric]:
    """Per (campaign, channel): accepted sends, hard bounces and complaints the providers
    reported against them, and their shares (once ``min_accepted`` sends were accepted;
    a rate is capped at 1, as a report may outlive its send's intent)."""
    accepted = {(s.campaign or "", s.channel): s.accepted for s in r.snap.summaries}
    reports = {(c.campaign or "", c.channel): c for c in r.reports}
    counts = {name: CounterMetricFamily(f"tidings_campaign_{name}", doc,
                                        labels=["campaign", "channel"])
              for name, doc in (
                  ("accepted", "Sends the provider accepted, per campaign and channel "
                   "(of the intents the ledger holds)."),
                  ("bounced", "Hard bounces (and bounces the provider did not class) "
                   "reported against a campaign's accepted sends."),
                  ("complained", "Spam complaints reported against a campaign's accepted "
                   "sends."))}
    rates = {name: GaugeMetricFamily(f"tidings_campaign_{name}_rate", doc,
                                     labels=["campaign", "channel"])
             for name, doc in (
                 ("bounce", "Hard bounces per accepted send of a campaign (of the intents "
                  "the ledger holds)."),
                 ("complaint", "Spam complaints per accepted send of a campaign (of the "
                  "intents the ledger holds); mailbox providers ask for under 0.003."))}
    for pair in sorted(set(accepted) | set(reports)):
        sent = accepted.get(pair, 0)
        report = reports.get(pair)
        bounced = report.bounced if report is not None else 0
        complained = report.complained if report is not None else 0
        labels = list(pair)
        counts["accepted"].add_metric(labels, sent)
        counts["bounced"].add_metric(labels, bounced)
        counts["complained"].add_metric(labels, complained)
        if sent >= r.min_accepted:
            rates["bounce"].add_metric(labels, min(1.0, bounced / sent))
            rates["complaint"].add_metric(labels, min(1.0, complained / sent))
    yield from counts.values()
    yield from rates.values()


def _suppression_families(r: _Reading) -> Iterator[Metric]:
    sends = CounterMetricFamily(
        "tidings_suppressed_sends",
        "Sends ended unsent because their address is on the suppression list, per channel "
        "and the list's reason (no failure; not eligible for the SLI).",
        labels=["channel", "reason"])
    for (channel, reason), count in sorted(r.suppressed_sends.items()):
        sends.add_metric([channel, reason], count)
    yield sends
    listed = GaugeMetricFamily(
        "tidings_suppressions", "Addresses on the suppression list, per kind and reason.",
        labels=["kind", "reason"])
    for (kind, reason), count in sorted(r.suppressions.items()):
        listed.add_metric([kind, reason], count)
    yield listed
    throttled = CounterMetricFamily(
        "tidings_throttled_sends",
        "Sends a per-recipient throttle ended unsent, per channel and the rule that "
        "stopped them (no failure; not eligible for the SLI).", labels=["channel", "rule"])
    for (channel, rule), count in sorted(r.throttled_sends.items()):
        throttled.add_metric([channel, rule], count)
    yield throttled


def _digest_families(snap: operations.Snapshot) -> Iterator[Metric]:
    windows = GaugeMetricFamily(
        "tidings_digest_windows_pending",
        "Digest windows open or sealed and not yet admitted.")
    windows.add_metric([], snap.digests.windows)
    yield windows
    items = GaugeMetricFamily(
        "tidings_digest_items_pending", "Items in digest windows not yet admitted.")
    items.add_metric([], snap.digests.items)
    yield items
    oldest = GaugeMetricFamily(
        "tidings_digest_oldest_window_age_seconds",
        "Age of the oldest digest window not yet admitted (0: none).")
    oldest.add_metric([], 0.0 if snap.digests.oldest_opened_at is None
                      else max(0.0, snap.now - snap.digests.oldest_opened_at))
    yield oldest


def _hold_families(snap: operations.Snapshot) -> Iterator[Metric]:
    parked = GaugeMetricFamily(
        "tidings_hold_parked", "Intents a delivery hold keeps parked, per hold in place.",
        labels=["scope", "name"])
    for hold in snap.holds.active:
        parked.add_metric([hold.scope, hold.name], float(hold.parked))
    yield parked
    expired = CounterMetricFamily(
        "tidings_expired_while_held", "Intents whose freshness deadline passed while held.")
    expired.add_metric([], float(snap.holds.expired_while_held))
    yield expired


def _guardrail_families(snap: operations.Snapshot, readings: Sequence[guardrails.Reading]
                        ) -> Iterator[Metric]:
    tripped = GaugeMetricFamily(
        "tidings_guardrail_tripped",
        "1 while a guardrail holds a campaign's or channel's admission paused.",
        labels=["scope", "name"])
    for switch in snap.switches:
        tripped.add_metric([switch.scope, switch.name],
                           1.0 if guardrails.tripped_by_guardrail(switch) else 0.0)
    yield tripped
    value = GaugeMetricFamily(
        "tidings_guardrail_value",
        "A guardrail's measure over its window (rates per send; age in seconds).",
        labels=["scope", "name", "measure"])
    threshold = GaugeMetricFamily(
        "tidings_guardrail_threshold", "The threshold a guardrail's measure is held to.",
        labels=["scope", "name", "measure"])
    for reading in readings:
        labels = [reading.scope, reading.name, reading.measure]
        value.add_metric(labels, reading.value)
        if reading.threshold is not None:
            threshold.add_metric(labels, reading.threshold)
    yield value
    yield threshold



class ApiMetrics:
    """The metrics of one API app: in-process counters plus store-derived readings."""

    def __init__(self, runtime: Runtime, *, cache_s: float = 5.0, window_s: float = 300.0
                 ) -> None:
        self.runtime = runtime
        self.cache_s = cache_s
        self.window_s = window_s
        self.registry = CollectorRegistry(auto_describe=False)
        self.publish_rejections = Counter(
            "tidings_publish_rejections", "Publishes refused, by reason.", ["reason"],
            registry=self.registry)
        self.publish_accepted = Counter(
            "tidings_publish_accepted", "Publishes answered with 2xx (replays included).",
            registry=self.registry)
        self.trigger_rejections = Counter(
            "tidings_trigger_rejections", "Trigger calls refused, by reason.", ["reason"],
            registry=self.registry)
        self._store = _StoreCollector()
        self.registry.register(self._store)
        self._read_at: float | None = None

    async def refresh(self) -> None:
        """Read the store again unless the last reading is younger than ``cache_s``."""
        now = self.runtime.clock.now()
        if self._read_at is not None and 0 <= now - self._read_at < self.cache_s:
            return
        rt = self.runtime
        snap = await operations.snapshot(rt.store, rt.transport, channels=rt.channels, now=now,
                                         window_s=self.window_s, occurrences=False)
        histograms = await rt.store.intent_latency_histogram(operations.LATENCY_BUCKETS)
        triggers = await rt.store.api_trigger_counts()
        provider_events = await rt.store.provider_event_counts()
        config = rt.guardrails()
        readings = (await guardrails.measure(rt.store, rt.transport, config, now=now))[0] \
            if config.active() else []
        plan = operations.plan(snap, limits=rt.limits,
                               freshness={c.name: c.expires_after_s for c in rt.campaigns})
        uncertain = await operations.uncertain_counts(rt.store, rt.uncertain_policies(),
                                                      now=now)
        self._store.reading = _Reading(snap=snap, histograms=tuple(histograms),
                                       triggers=triggers, plan=tuple(plan),
                                       provider_events=tuple(provider_events),
                                       guardrails=tuple(readings),
                                       uncertain=uncertain,
                                       suppressed_sends=await rt.store.intent_suppressed_counts(),
                                       suppressions=await rt.store.suppression_counts(),
                                       throttled_sends=await rt.store.intent_throttled_counts(),
                                       reports=tuple(await rt.store.campaign_report_counts()),
                                       min_accepted=config.min_sends,
                                       lanes=rt.channel_lanes)
        self._read_at = now

    def render(self) -> bytes:
        """The text exposition format of every metric of this app."""
        return generate_latest(self.registry)
