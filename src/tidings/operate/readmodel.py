"""What an operator reads, as frozen types: status, plan, timelines, uncertain sends
and dead letters.

``tidings.operate.operations`` computes these; the CLI, the dashboard, ``/metrics`` and the
JSON API read them by attribute (so a renamed field fails mypy, not a page at run
time), and ``to_json`` is the one place they become JSON. Field names are the JSON
keys and field order is their order: renaming a field renames a key of the API and
of ``tidings status --json``, which the API and CLI tests pin.

``to_json`` walks dataclasses field by field. Two field options shape the output:
``flatten`` (the value's own keys join its parent's, as a status row's ``counts`` and
a channel's uncertain-send policy do) and ``leave_out`` (keys of the value not
repeated, as a status row's ``drain`` leaves out the channel and campaign the row
already names). A ``State`` is its value; a mapping or sequence is walked element by
element.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from tidings.core.model import Event, Intent
from tidings.core.states import State
from tidings.delivery.uncertain import UncertainPolicy

#: Field metadata: the value's keys are its parent's (``to_json``).
FLATTEN = {"flatten": True}


def leave_out(*names: str) -> dict[str, tuple[str, ...]]:
    """Field metadata: these keys of the value are not repeated in the JSON."""
    return {"leave_out": names}


# ---------------------------------------------------------------- status


@dataclass(frozen=True, kw_only=True)
class Counts:
    """Intents of a channel, a campaign or a campaign's channel (``operations``'s
    module docstring defines backlog, send rate and the SLI)."""

    total: int
    backlog: int
    scheduled: int
    oldest_age_s: float
    in_flight: int
    retryable: int
    uncertain: int
    accepted: int
    accepted_in_time: int
    expired: int
    dead: int
    rejected: int
    cancelled: int
    overdue: int
    send_rate_per_s: float
    sli: float | None
    suppressed: int = 0
    """Ended unsent: the address is on the suppression list (no failure, not eligible)."""
    throttled: int = 0
    """Ended unsent by a per-recipient throttle (no failure, not eligible)."""


@dataclass(frozen=True, kw_only=True)
class PlanLine:
    """Drain time against the freshness deadline, for one channel (and one campaign, or
    every intent of the channel when ``campaign`` is None), with the numbers used."""

    channel: str
    campaign: str | None
    backlog: int
    channel_backlog: int
    observed_rate_per_s: float
    configured_rate_per_s: float | None
    rate_per_s: float | None
    rate_source: str
    drain_s: float | None
    deadline_in_s: float | None
    freshness_deadline_s: float | None
    expected_late: int
    verdict: str


@dataclass(frozen=True, kw_only=True)
class LaneStatus:
    """One lane of a channel's queue (``tidings.core.lanes``): its messages ready now,
    all its messages, and the age of its oldest."""

    name: str
    ready: int
    total: int
    oldest_age_s: float


@dataclass(frozen=True, kw_only=True)
class GroupStatus:
    """One group of a lane (``tidings.core.fair``): its messages ready now, and all."""

    lane: str
    group: str
    ready: int
    total: int


@dataclass(frozen=True, kw_only=True)
class QueueStatus:
    """A channel queue's depth and the age of its oldest message; each lane holding
    messages (none where the transport keeps no lanes); the groups holding the most
    (none where no message has a group)."""

    ready: int
    delayed: int
    in_flight: int
    dead_letters: int
    oldest_age_s: float
    lanes: list[LaneStatus] = field(default_factory=list)
    groups: list[GroupStatus] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class UncertainSends:
    """A channel's uncertain-send policy (as ``UncertainPolicy.describe`` shows it) and
    how many intents are uncertain, held, and held past ``hold_s``."""

    policy: UncertainPolicy = field(metadata=FLATTEN)
    uncertain: int
    held: int
    awaiting_operator: int


@dataclass(frozen=True, kw_only=True)
class ProviderState:
    """One provider of a channel with fallbacks, as a worker last said
    (``tidings.core.failover``): out (its circuit opened) or back (a probe answered)."""

    name: str
    out: bool
    since: str
    """When it went out or came back (ISO 8601, UTC)."""
    worker: str
    """The worker process that said so (``host:pid``)."""
    reason: str


@dataclass(frozen=True, kw_only=True)
class CampaignChannelStatus:
    """One channel of a campaign; ``drain`` when status was given the pace limits."""

    counts: Counts = field(metadata=FLATTEN)
    drain: PlanLine | None = field(default=None, metadata=leave_out("channel", "campaign"))


@dataclass(frozen=True, kw_only=True)
class ChannelStatus:
    """One channel: its intents, admission switch, queue and event counts."""

    counts: Counts = field(metadata=FLATTEN)
    paused: bool
    paused_reason: str | None
    queue: QueueStatus | None
    attempts: int
    rate_limited: int
    retries: int
    duplicates_suppressed: int
    dead_letters: int
    drain: PlanLine | None = field(default=None, metadata=leave_out("channel", "campaign"))
    uncertain_sends: UncertainSends | None = None
    providers: list[ProviderState] = field(default_factory=list)
    """With fallbacks: each provider a worker has said is out or back (none yet: all in)."""


@dataclass(frozen=True, kw_only=True)
class OccurrenceStatus:
    """A campaign's latest occurrence, as status shows it."""

    logical_date: str
    kind: str
    status: str
    members: int
    admitted: int
    skipped: int
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class CampaignStatus:
    """One campaign: its intents over every channel, then per channel."""

    counts: Counts = field(metadata=FLATTEN)
    declared: bool
    paused: bool
    paused_reason: str | None
    latest_occurrence: OccurrenceStatus | None
    channels: Mapping[str, CampaignChannelStatus]


@dataclass(frozen=True, kw_only=True)
class GuardrailTrip:
    """Admission a guardrail paused, and why."""

    scope: str
    name: str
    since: float
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class ActiveHold:
    """A delivery hold in place and how many intents it keeps parked."""

    scope: str
    name: str
    since: float
    by: str
    reason: str | None
    parked: int


@dataclass(frozen=True, kw_only=True)
class HoldsReport:
    """The holds in place, and how many intents expired while held."""

    active: tuple[ActiveHold, ...] = ()
    expired_while_held: int = 0


@dataclass(frozen=True, kw_only=True)
class LedgerStatus:
    """The ledger's age span (oldest and newest intent) and its next prune."""

    oldest_intent_at: float | None
    newest_intent_at: float | None
    age_s: float | None
    retention_days: float | None
    next_prune_at: float | None


@dataclass(frozen=True, kw_only=True)
class DigestStatus:
    """Digest windows not yet admitted (open or sealed), the items they hold, and the
    age of the oldest."""

    windows: int = 0
    items: int = 0
    oldest_age_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Status:
    """``tidings status`` and ``GET /v1/status``: per channel, per campaign, one-off
    intents per channel, guardrail trips, holds and the ledger."""

    now: float
    window_s: float
    channels: Mapping[str, ChannelStatus]
    campaigns: Mapping[str, CampaignStatus]
    one_off: Mapping[str, Counts]
    guardrails_tripped: tuple[GuardrailTrip, ...]
    holds: HoldsReport
    ledger: LedgerStatus
    digests: DigestStatus = DigestStatus()


@dataclass(frozen=True, kw_only=True)
class Plan:
    """``tidings plan`` and ``GET /v1/plan``: the plan's lines and each channel's
    uncertain sends."""

    now: float
    window_s: float
    lines: tuple[PlanLine, ...]
    uncertain: Mapping[str, UncertainSends]


# ---------------------------------------------------------------- timelines


@dataclass(frozen=True, kw_only=True)
class Answers:
    """The three questions about one delivery, and where it stands."""

    selected: bool
    selected_at: float | None
    enqueued: bool
    enqueued_at: float | None
    accepted: bool
    accepted_at: float | None
    state: State
    disposition: str | None
    reason: str | None
    attempts: int


@dataclass(frozen=True, kw_only=True)
class IntentView:
    """An intent for an operator: every field of ``Intent`` but the address (never
    shown), then the recipient's surrogate (``tidings.core.surrogate``)."""

    key: str
    channel: str
    recipient_id: str
    template: str
    data: str
    campaign: str | None
    occurrence: str | None
    state: State
    due_at: float
    expires_at: float | None
    created_at: float
    updated_at: float
    selected_at: float | None
    enqueued_at: float | None
    accepted_at: float | None
    finished_at: float | None
    attempts: int
    failures: int
    lease_owner: str | None
    lease_token: int
    lease_expires_at: float | None
    next_attempt_at: float | None
    receipt: str | None
    provider_request_id: str | None
    disposition: str | None
    reason: str | None
    cancel_requested: bool
    lane: int
    group_key: str
    recipient_surrogate: str


#: ``Intent``'s fields an operator never sees.
HIDDEN_INTENT_FIELDS = frozenset({"address"})


def intent_view(intent: Intent, recipient_surrogate: str) -> IntentView:
    """``intent`` without its address, with its recipient's surrogate."""
    shown = {f.name: getattr(intent, f.name) for f in fields(intent)
             if f.name not in HIDDEN_INTENT_FIELDS}
    return IntentView(**shown, recipient_surrogate=recipient_surrogate)


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """One delivery's timeline: its answers, its ledger row and its audit events."""

    key: str
    answers: Answers
    intent: IntentView
    events: tuple[Event, ...]


# ---------------------------------------------------------------- uncertain sends


@dataclass(frozen=True, kw_only=True)
class UncertainRow:
    """An unsettled intent for an operator: where it stands and since when, its
    channel's policy, and whether it awaits an operator's decision."""

    key: str
    channel: str
    state: State
    since: float
    age_s: float
    attempts: int
    reason: str | None
    policy: str
    awaiting_operator: bool
    recipient_surrogate: str


# ---------------------------------------------------------------- dead letters


@dataclass(frozen=True, kw_only=True)
class DeadLetterRow:
    """A channel's dead letter, with the key its message names (None: not a tidings
    message) and that intent's state now (None: no such intent)."""

    id: str
    channel: str
    message_id: str
    key: str | None
    reason: str
    receive_count: int
    dead_at: float
    intent_state: str | None


# ---------------------------------------------------------------- JSON


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, None): the one
    serialisation of the read model (see the module docstring)."""
    if isinstance(value, UncertainPolicy):
        return value.describe()
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in fields(value):
            item = to_json(getattr(value, f.name))
            if f.metadata.get("flatten"):
                out.update(item)
                continue
            dropped = f.metadata.get("leave_out", ())
            if dropped and isinstance(item, dict):
                item = {k: v for k, v in item.items() if k not in dropped}
            out[f.name] = item
        return out
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def as_dict(value: Any) -> dict[str, Any]:
    """A read-model object as a JSON object (``to_json`` of a dataclass)."""
    out = to_json(value)
    assert isinstance(out, dict)
    return out
