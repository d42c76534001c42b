"""Prometheus numbers of provider webhooks (no web framework here, so ``tidings.api.metrics``
can import it without importing the HTTP app).

- ``WebhookMetrics``: in-process counters of one API process (Prometheus sums them
  across processes): requests by provider and outcome, events by provider and result.
- ``provider_event_families``: the fleet's stored provider events
  (``Store.provider_event_counts()``) as metric families, for the collector that
  reads the store at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from tidings.stores.base import ProviderEventCount


class WebhookMetrics:
    """Counters registered in ``registry`` (the app's own, never the global one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tidings_webhook_requests",
            "Provider webhook requests, by provider and outcome (ok, unauthorized, "
            "invalid, too_large, not_found).", ["provider", "outcome"], registry=registry)
        self.events = Counter(
            "tidings_webhook_events",
            "Provider webhook events, by provider and result (recorded, duplicate, "
            "orphaned, ignored).", ["provider", "result"], registry=registry)


def provider_event_families(counts: Sequence[ProviderEventCount]) -> Iterator[Metric]:
    """Every provider event stored, per provider and type, and how many are orphaned."""
    total = CounterMetricFamily("tidings_provider_events",
                                "Provider events recorded (once each), by provider and type.",
                                labels=["provider", "type"])
    orphaned = GaugeMetricFamily("tidings_provider_events_orphaned",
                                 "Provider events whose message id is no delivery's receipt.",
                                 labels=["provider", "type"])
    for c in counts:
        total.add_metric([c.provider, c.type], c.total)
        orphaned.add_metric([c.provider, c.type], c.orphaned)
    yield total
    yield orphaned
