"""The reads of the ``Store`` port, written once for every SQL store.

A read is a named query, its parameters and the shape of its rows, and those are the
same in every dialect; a store only says how it runs a read (a read transaction on
the SQLite thread, a pooled connection on PostgreSQL) and how it binds a list.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeVar

from tidings.core.model import Event, Intent
from tidings.core.states import State
from tidings.core.suppression import Suppression
from tidings.stores import base, rows

R = TypeVar("R")


class StoreReads(ABC):
    """The port's reads over four primitives a store supplies."""

    @abstractmethod
    async def _read_all(self, shape: rows.Shape[R], query: str, params: Any = None) -> list[R]:
        """Every row of ``query`` as ``shape``'s record."""

    @abstractmethod
    async def _read_one(self, shape: rows.Shape[R], query: str,
                        params: Any = None) -> R | None:
        """The first row of ``query`` as ``shape``'s record, None without one."""

    @abstractmethod
    async def _read_tuples(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Every row of ``query`` as it comes (for a column or two, unpacked on the spot)."""

    @abstractmethod
    def _array(self, values: Sequence[Any]) -> Any:
        """``values`` bound as one parameter (a JSON array on SQLite, an array on PostgreSQL)."""

    @abstractmethod
    def _pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """(address, kind) pairs bound as the dialect's queries read them: one JSON array
        of pairs on SQLite (``:pairs``), two arrays zipped by ``unnest`` on PostgreSQL
        (``addresses``, ``kinds``)."""

    async def _nested_counts(self, query: str) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for outer, inner, count in await self._read_tuples(query):
            counts.setdefault(outer, {})[inner] = count
        return counts

    # ---------------------------------------------------------------- intents and events

    async def intent_get(self, key: str) -> Intent | None:
        return await self._read_one(rows.INTENT, "intent_get", (key,))

    async def intent_find(self, *, states: Sequence[State], channel: str | None = None,
                          updated_before: float | None = None,
                          lease_expired_at: float | None = None,
                          limit: int = 1000, lease_owner: str | None = None,
                          due_before: float | None = None) -> list[Intent]:
        """Intents in ``states`` narrowed by the filters, in (state, due time) order."""
        return await self._read_all(rows.INTENT, "intent_find", {
            "states": self._array([State(s).value for s in states]), "channel": channel,
            "updated_before": updated_before, "lease_expired_at": lease_expired_at,
            "lease_owner": lease_owner, "limit": limit, "due_before": due_before})

    async def intent_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {state: count}}`` over every intent."""
        return await self._nested_counts("intent_counts")

    async def intent_latencies(self, channel: str) -> list[float]:
        """Seconds from due to acceptance for every accepted intent of ``channel``."""
        return [latency for (latency,) in await self._read_tuples("intent_latencies",
                                                                  (channel,))]

    async def events_for(self, key: str) -> list[Event]:
        """Every event of ``key``, in the order written."""
        return await self._read_all(rows.EVENT, "events_for", (key,))

    async def event_last(self, key: str) -> Event | None:
        """The latest event of ``key`` (None: it has none)."""
        return await self._read_one(rows.EVENT, "event_last", (key,))

    async def event_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {event type: count}}``."""
        return await self._nested_counts("event_counts")

    async def event_keys_by_detail(self, detail: str, *, limit: int = 100) -> list[str]:
        """Keys with an event whose ``detail`` is exactly ``detail``, latest first."""
        found = await self._read_tuples("event_keys_by_detail",
                                        {"detail": detail, "limit": limit})
        return [key for (key,) in found]

    # ---------------------------------------------------------------- occurrences, switches

    async def occurrence_get(self, id: str) -> base.Occurrence | None:
        return await self._read_one(rows.OCCURRENCE, "occurrence_get", (id,))

    async def occurrence_list(self, campaign: str | None = None) -> list[base.Occurrence]:
        return await self._read_all(rows.OCCURRENCE, "occurrence_list", {"campaign": campaign})

    async def switch_all(self) -> list[base.Switch]:
        return await self._read_all(rows.SWITCH, "switch_all")

    async def hold_all(self) -> list[base.Hold]:
        return await self._read_all(rows.HOLD, "hold_all")

    async def intent_select(self, selection: base.Selection, *, after: str | None = None,
                            limit: int = 500) -> list[Intent]:
        """A page of the selection in key order, keys after ``after``."""
        params = self._selection(selection) | {"after": after, "limit": limit}
        return await self._read_all(rows.INTENT, "intent_select", params)

    async def intent_select_counts(self, selection: base.Selection) -> dict[str, int]:
        """``{state: count}`` over the selection."""
        found = await self._read_tuples("intent_select_counts", self._selection(selection))
        return {state: int(count) for state, count in found}

    def _selection(self, selection: base.Selection) -> dict[str, Any]:
        return rows.selection_params(selection, self._array)

    async def outcome_counts(self, *, since: float, bucket_s: float
                             ) -> list[base.OutcomeCount]:
        """Outcome events at or after ``since`` per channel, campaign, type and bucket."""
        return await self._read_all(rows.OUTCOME_COUNT, "outcome_counts",
                                    {"since": since, "bucket_s": bucket_s})

    # ---------------------------------------------------------------- suppression list

    async def suppressions_for(self, pairs: Sequence[tuple[str, str]]
                               ) -> dict[tuple[str, str], Suppression]:
        """The suppressions of many (address, kind) pairs in one read."""
        if not pairs:
            return {}
        wanted = list(dict.fromkeys(pairs))
        found = await self._read_all(rows.SUPPRESSION, "suppressions_for",
                                     self._pairs(wanted))
        return {(s.address, s.kind): s for s in found}

    async def suppression_list(self, *, kind: str | None = None, reason: str | None = None,
                               after: tuple[str, str] | None = None,
                               limit: int = 100) -> list[Suppression]:
        """A page of the list in (address, kind) order, after the pair ``after``."""
        after_address, after_kind = after if after is not None else (None, None)
        return await self._read_all(rows.SUPPRESSION, "suppression_list", {
            "kind": kind, "reason": reason, "after_address": after_address,
            "after_kind": after_kind, "limit": limit})

    async def intent_suppressed_counts(self) -> dict[tuple[str, str], int]:
        """Intents ended ``suppressed``, per (channel, the list's reason)."""
        return {(channel, reason or ""): int(total) for channel, reason, total
                in await self._read_tuples("intent_suppressed_counts")}

    async def intent_throttled_counts(self) -> dict[tuple[str, str], int]:
        """Intents ended ``throttled``, per (channel, the rule that stopped them)."""
        return {(channel, reason or ""): int(total) for channel, reason, total
                in await self._read_tuples("intent_throttled_counts")}

    async def suppression_counts(self) -> dict[tuple[str, str], int]:
        """Suppressed addresses per (kind, reason)."""
        return {(kind, reason): int(total) for kind, reason, total
                in await self._read_tuples("suppression_counts")}

    # ---------------------------------------------------------------- pacer state

    async def pacer_read(self, channel: str) -> dict[str, Any] | None:
        (stored,) = next(iter(await self._read_tuples("pacer_read", (channel,))), (None,))
        return rows.pacer_state(stored)

    async def pacer_paused_until(self, channel: str) -> float:
        (until,) = next(iter(await self._read_tuples("pacer_paused_until", (channel,))),
                        (0.0,))
        return float(until)

    # ---------------------------------------------------------------- operator API

    async def api_token_get(self, id: str) -> base.ApiToken | None:
        return await self._read_one(rows.API_TOKEN, "api_token_get", (id,))

    async def api_token_list(self) -> list[base.ApiToken]:
        return await self._read_all(rows.API_TOKEN, "api_token_list")

    async def api_trigger_counts(self) -> dict[str, int]:
        return {c: int(n) for c, n in await self._read_tuples("api_trigger_counts")}

    async def api_idempotency_get(self, key: str) -> base.IdempotentResponse | None:
        return await self._read_one(rows.IDEMPOTENT_RESPONSE, "api_idempotency_get", (key,))

    async def api_idempotency_get_many(self, keys: Sequence[str]
                                       ) -> dict[str, base.IdempotentResponse]:
        """The records of ``keys`` that exist, by key."""
        found = await self._read_all(rows.IDEMPOTENT_RESPONSE, "api_idempotency_get_many",
                                     {"keys": self._array(list(dict.fromkeys(keys)))})
        return {record.key: record for record in found}

    async def intent_summary(self, *, now: float, since: float) -> list[base.IntentSummary]:
        """One summary per (campaign, channel), ordered by campaign then channel."""
        return await self._read_all(rows.INTENT_SUMMARY, "intent_summary",
                                    {"now": now, "since": since})

    async def intent_latency_histogram(
            self, bounds: Sequence[float]) -> list[base.LatencyHistogram]:
        """Due-to-accepted latencies per channel counted into ``bounds`` (ascending)."""
        buckets = await self._read_tuples("intent_latency_histogram",
                                          {"bounds": self._array([float(b) for b in bounds])})
        return rows.latency_histograms(bounds, buckets)

    async def intent_find_by_recipient(self, recipient_id: str, *,
                                       limit: int = 100) -> list[Intent]:
        """A recipient's intents, latest due first."""
        return await self._read_all(rows.INTENT, "intent_find_by_recipient",
                                    {"recipient_id": recipient_id, "limit": limit})

    # ---------------------------------------------------------------- provider webhooks

    async def provider_events_orphaned(self, *,
                                       limit: int = 100) -> list[base.StoredProviderEvent]:
        """Orphaned provider events, oldest received first."""
        return await self._read_all(rows.STORED_PROVIDER_EVENT, "provider_events_orphaned",
                                    {"limit": limit})

    async def provider_event_counts(self) -> list[base.ProviderEventCount]:
        """Provider events per (provider, type), ordered by both."""
        return await self._read_all(rows.PROVIDER_EVENT_COUNT, "provider_event_counts")

    async def campaign_report_counts(self) -> list[base.CampaignReports]:
        """Hard (and unclassified) bounces and complaints per (campaign, channel)."""
        found = await self._read_all(rows.CAMPAIGN_REPORTS, "campaign_report_counts")
        # The dialects place a NULL campaign apart (SQLite first, PostgreSQL last).
        return sorted(found, key=lambda r: (r.campaign is not None, r.campaign or "",
                                            r.channel))
