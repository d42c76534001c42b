"""What a channel worker holds: its settings, its counts, and the state its steps share.

The steps are layered on ``WorkerState``, each in a module of its own: ``settle``
(outcomes to changes, commits, acks), ``sending`` (pacing and the provider call) and
``claiming`` (receive, claim, compose, leases); ``worker.Worker`` runs them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tidings.core.clock import Clock
from tidings.core.fair import FairShare
from tidings.core.lanes import DEFAULT_LANES, DEFAULT_MIN_SHARE, LaneShare
from tidings.core.liveness import Fence
from tidings.core.model import Received, address_kind
from tidings.core.policy import RetryPolicy
from tidings.core.suppression import Suppression
from tidings.delivery.batching import DEFAULT_LINGER_S, Batcher
from tidings.delivery.compose import Composer
from tidings.delivery.group_commit import Coalescer, GroupCommitConfig
from tidings.delivery.hold_gate import HoldGate
from tidings.delivery.pacing.pacer import Pacer
from tidings.delivery.pacing.turns import Turns
from tidings.delivery.throttle_gate import ThrottleGate
from tidings.providers.base import BatchProvider, Provider, concurrent_sends
from tidings.stores.base import Change, Ledger, Suppressions, Throttles
from tidings.transports.base import Transport


class DeliveryStore(Ledger, Suppressions, Throttles, Protocol):
    """What a worker reaches: the ledger, the suppression list it adds a number to
    when the provider says the recipient replied STOP, and the throttle counts."""


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker takes work from its queue.

    ``max_held`` bounds the messages a worker holds at once (claimed, waiting for
    the pacer, in flight, or waiting for their commit).

    On a paced channel a worker also claims no further ahead than it can send: the
    claims it holds cover at most what its share of the pacer starts in
    ``claim_ahead_s`` (never more than the lease), so a crash expires only what was
    about to be sent. Its share is the pacer's rate over the channel's live workers
    (``Pacer.share_per_s``: those heard from by the shared pacer state within a lease;
    one that died a moment ago still counts, which errs on the small side), looked at
    again every ``claim_depth_every_s``. Beyond that depth it receives no more. An
    unpaced channel is bounded by ``max_held`` alone.

    ``max_receives`` is the poison limit: how many receives may fail on the message
    itself (``Received.failures``) before it is dead-lettered. Redeliveries after a
    receiver died, its visibility ran out or it released the message are the weather,
    not the message: they grow ``receive_count`` and never dead-letter on their own.
    """

    batch_size: int = 200
    max_held: int = 400
    commit_batch: int = 100
    commit_linger_s: float = 0.01
    visibility_s: float = 60.0
    lease_s: float = 30.0
    max_receives: int = 50
    recheck_after_s: float = 1.0
    idle_poll_s: float = 0.05
    max_idle_poll_s: float = 0.5
    max_idle_wait_s: float = 5.0
    """The longest idle wait on a transport that wakes consumers when a publish commits."""
    claim_ahead_s: float = 1.0
    """Seconds of this worker's pacer share its claims cover: enough to keep the pacer
    fed while the next batch is received and claimed, little enough that a crash
    expires only what was about to go."""
    claim_depth_every_s: float = 1.0
    send_deadline_s: float = 15.0
    """The longest one provider call may take, waiting for a connection included; a
    call still running then is cut off (uncertain). Together with the fence it bounds
    when a gone worker's last send can still reach the provider, which the reconciler
    waits out before it looks that send up (``liveness.sends_land_by``). Loop seconds,
    not the injected clock's: it bounds a socket."""
    batch_max_messages: int = 1
    """Messages per provider request where the provider has a batch endpoint
    (``channels.<name>.batch``; 1: one request per message). See ``delivery.batching``."""
    batch_linger_s: float = DEFAULT_LINGER_S
    """The longest a lone message waits for others to share its request."""
    lanes: int = len(DEFAULT_LANES)
    """The channel's lanes (``channels.<name>.lanes``): a receive takes the first
    lane's ready messages before the next's."""
    lane_min_share: float = DEFAULT_MIN_SHARE
    """What each lane after the first keeps of what is taken while it has work."""
    group_weights: dict[str, float] | None = None
    """Where the channel shares its lanes among groups (``channels.<name>.fair_share``),
    each group's weight (default 1); None: no sharing."""


@dataclass(kw_only=True)
class WorkerStats:
    """What one worker process did (its own view; the provider's counts are the witness)."""

    received: int = 0
    sent: int = 0
    accepted: int = 0
    rate_limited: int = 0
    transient: int = 0
    rejected: int = 0
    dead: int = 0
    uncertain: int = 0
    duplicates: int = 0
    skipped: int = 0
    suppressed: int = 0
    """Sends ended unsent because their address is on the suppression list."""
    throttled: int = 0
    """Sends a per-recipient throttle ended (``throttled``) or deferred to its next window."""
    poison: int = 0
    lease_lost: int = 0
    released: int = 0
    raised: int = 0
    """Sends that raised instead of answering (also counted by their outcome)."""
    commits: int = 0
    unrecorded: int = 0
    """Outcomes the store refused even alone and plain: left to the reconciler."""
    by_kind: dict[str, int] = field(default_factory=dict)


#: Event-loop turns a start mark waits for the other sends of its burst (a batch's sends
#: reach their marks within a few turns of each other): one write for the burst.
START_SETTLE_TURNS = 8


class WorkerState:
    """One worker's collaborators and in-hand work, shared by its steps."""

    def __init__(
        self,
        *,
        channel: str,
        store: DeliveryStore,
        transport: Transport,
        provider: Provider,
        pacer: Pacer,
        clock: Clock,
        policy: RetryPolicy,
        worker_id: str,
        config: WorkerConfig | None = None,
        rng: random.Random | None = None,
        composer: Composer | None = None,
        holds: HoldGate | None = None,
        throttle: ThrottleGate | None = None,
    ) -> None:
        self.channel = channel
        self.store = store
        self.transport = transport
        self.provider = provider
        self.pacer = pacer
        self.clock = clock
        self.policy = policy
        self.worker_id = worker_id
        self.config = config or WorkerConfig()
        self.rng = rng or random.Random()
        # Which lanes a receive asks, and for how many (``core.lanes``); on a paced
        # channel, the order in which held sends ask for their slots (``pacing.turns``).
        self.lane_share = LaneShare(self.config.lanes, self.config.lane_min_share)
        # How each lane's receive is shared among groups (``core.fair``), if it is.
        self.fair = (FairShare(self.config.group_weights)
                     if self.config.group_weights is not None else None)
        self.turns = (Turns() if self.config.lanes > 1 and pacer.limits.interval_s > 0
                      else None)
        # The send-time gate: preferences, address checks, rendering. Without one, the
        # provider gets the identifiers alone (the sandbox renders nothing).
        self.composer = composer
        # Where the provider has a batch endpoint and the channel asks for it, the sends
        # started together share provider requests (their own outcomes each).
        self.batcher = (Batcher(provider, max_messages=self.config.batch_max_messages,
                                linger_s=self.config.batch_linger_s,
                                deadline_s=max(0.1, self.config.send_deadline_s
                                               - self.config.batch_linger_s))
                        if self.config.batch_max_messages > 1
                        and isinstance(provider, BatchProvider) else None)
        # A provider with a pool of so many connections carries that many sends at once:
        # the rest wait here, before their pacer slot and their start mark, so that a
        # crash holds only the sends on the wire (a batch is one request: no bound).
        wire = concurrent_sends(provider) if self.batcher is None else None
        self._wire = asyncio.Semaphore(wire) if wire is not None else None
        self._wire_limit = wire
        # Delivery holds: what a hold covers is parked right after its claim, unsent.
        self.holds = holds
        # Per-recipient throttles: a send is reserved after the gate, before pacing;
        # ``_reserved`` are the keys holding a reservation until their outcome commits.
        self.throttle = throttle
        self._reserved: set[str] = set()
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        # One future for every in-flight send to race its pacer wait against, instead of
        # a new waiter task per send on the hot path.
        self._stopped: asyncio.Future[None] | None = None
        # Outcomes waiting for their commit, and message operations waiting for theirs.
        self._outcomes: list[tuple[Change, Received]] = []
        # Suppressions an outcome makes (a STOP reply), added once it is committed.
        self._suppress: dict[str, Suppression] = {}
        self._acks: list[str] = []
        self._nacks: list[tuple[str, float]] = []
        self._dead: list[tuple[str, str]] = []
        # Nacks that count a failure on the message itself (see ``_fault_of_message``),
        # and the receipts whose outcome, once committed, is such a nack.
        self._failed: list[tuple[str, float]] = []
        self._faulted: set[str] = set()
        # key -> (lease token, its message, lease good until, the liveness registration
        # it was claimed under).
        self._held: dict[str, tuple[int, Received, float, int]] = {}
        self._sends: set[asyncio.Task[None]] = set()
        # Sends waiting for a pacer slot, and those of them ``stop()`` cancelled.
        self._acquiring: set[asyncio.Task[object]] = set()
        self._stop_cancelled: set[asyncio.Task[object]] = set()
        # One commit of outcomes at a time; one round of message operations at a time,
        # running beside the next commit.
        self._flush_lock = asyncio.Lock()
        self._ack_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        # Claims this worker may hold on a paced channel (None: unpaced, or not yet
        # known), and when that was last worked out.
        self._claim_depth: int | None = None
        self._depth_at = float("-inf")
        # The process's liveness fence (``tidings.core.liveness.Marker``): no send starts
        # while it is closed, so a peer that declares this worker gone finds it stopped;
        # nor under a claim made before the worker registered again (``Fence.epoch``):
        # such a lease was ended when the worker was declared gone.
        self.liveness: Fence | None = None
        # Lost leases are told once per run of them (none lost for a lease_s ends a run),
        # not once per intent: a worker back from a partition loses all it held.
        self._lease_lost_at: float | None = None
        # Sends about to leave are marked started in the ledger first, the starts that
        # come together in one write (``Ledger.intent_mark_started``): a lease that ends
        # with no send started is released for another claim, not made uncertain.
        self._starts: Coalescer[tuple[str, int], bool] = Coalescer(
            self._mark_started, clock=clock,
            config=GroupCommitConfig(max_drafts=1000, settle_turns=START_SETTLE_TURNS))

    async def _mark_started(self, leases: Sequence[tuple[str, int]],
                            now: float) -> list[bool]:
        marked = await self.store.intent_mark_started(leases, owner=self.worker_id, now=now)
        return [key in marked for key, _ in leases]

    @property
    def marks_at_claim(self) -> bool:
        """Whether a claim marks its send started at once, instead of a write right
        before the request leaves: on a channel with no rate (no quota, no interval)
        whose in-flight budget covers every claim a worker holds (``max_in_flight`` >=
        ``max_held``), nothing but the composer stands between a claim and its send, so
        the separate write per burst of starts would buy nothing. A crash during a 429
        pause then holds this worker's claims (at most ``max_held``); where a channel's
        budget, or the provider's connections (``max_concurrent_sends``), are fewer than
        what a worker holds, the marks wait for the pacer and a connection."""
        limits = self.pacer.limits
        wire_covers = self._wire_limit is None or self._wire_limit >= self.config.max_held
        return (limits.interval_s <= 0 and limits.max_in_flight >= self.config.max_held
                and wire_covers)

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def address_kind(self) -> str:
        """Which addresses this worker's channel sends to (email or sms)."""
        if self.composer is not None:
            return self.composer.address_kind_of(self.channel)
        return address_kind(self.channel, None)
