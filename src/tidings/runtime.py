"""The composition root: settings -> store, transport, providers, pacers, campaigns.

The CLI, the demo, the benchmarks and the tests all build their runtime here; there
are no module-level singletons. One module because it is the one composition root: what
each face calls on the runtime is wired in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import socket
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from tidings.admission import intake
from tidings.admission.audience import SqlAudience, audience_from_spec
from tidings.admission.campaign import Campaign
from tidings.admission.digests import (
    ClosedDigests,
    Digested,
    add_item,
    close_due,
    close_page,
    item_draft,
)
from tidings.admission.intake import (
    NotifyRequest,
    admit_drafts,
    asked_of,
    cancel,
    check_caller_connection,
    notify_many,
)
from tidings.admission.relay import RelayConfig
from tidings.admission.rollout import declare_paused
from tidings.admission.scheduler import Scheduler, SchedulerConfig, admission_shape
from tidings.config.settings import (
    ChannelProvider,
    ChannelSettings,
    GuardrailLimits,
    ProviderSettings,
    Settings,
)
from tidings.core.clock import Clock, ReferenceClock
from tidings.core.cron import Schedule
from tidings.core.digest import Digest
from tidings.core.errors import ConfigurationError, InvalidInput, unknown_name
from tidings.core.failover import provider_said, providers_key, route_names
from tidings.core.keys import check_text, template_ref
from tidings.core.lanes import DEFAULT_LANES, DEFAULT_MIN_SHARE, ChannelLanes
from tidings.core.liveness import LivenessConfig, Marker, Registry
from tidings.core.model import IntentDraft, Recipient, address_kind
from tidings.core.pacing import PaceLimits, parse_quota
from tidings.core.policy import RetryPolicy
from tidings.core.preferences import Preference
from tidings.core.repeats import Asked, Notified, conflicting, guard_for, notified
from tidings.core.states import State
from tidings.core.suppression import SuppressionRules
from tidings.core.throttle import Mode, Rule, campaign_rule_name, channel_rule_name
from tidings.core.throttle import Rules as ThrottleRules
from tidings.delivery.batching import DEFAULT_LINGER_S
from tidings.delivery.compose import Composer
from tidings.delivery.group_commit import Coalescer, GroupCommitConfig
from tidings.delivery.hold_gate import HoldGate
from tidings.delivery.pacing.pacer import Pacer
from tidings.delivery.throttle_gate import ThrottleGate
from tidings.delivery.uncertain import UncertainPolicy, policy_for
from tidings.delivery.unsubscribe import UnsubscribeLinks, links_from
from tidings.delivery.worker import Worker, WorkerConfig
from tidings.operate.guardrails import GuardrailConfig, Thresholds
from tidings.providers.base import Provider, batch_limit
from tidings.recovery.reconciler import Reconciler, ReconcilerConfig
from tidings.recovery.retention import RetentionConfig, retention_config
from tidings.stores.base import JoinTarget, Store
from tidings.transports.base import Transport
from tidings.transports.open import is_store_queue, open_transport

if TYPE_CHECKING:
    # The caller's own connection type: psycopg is the optional extra "postgres".
    from psycopg import AsyncConnection

    # Imported where a channel has fallbacks (the type of what it reports).
    from tidings.delivery.failover import Hear, Report

    # Imported where a channel has templates: jinja2 is no import of the others.
    from tidings.delivery.templates import TemplateSet
    from tidings.operate.readmodel import Delivery

log = logging.getLogger("tidings.runtime")


def check_settings(settings: Settings) -> None:
    """The checks of settings that need another part of tidings (each model checks its
    own fields when read): retention long enough for every redelivery and replay
    window (``tidings.recovery.retention.minimum_retention``), and the secret of the
    unsubscribe links ``[unsubscribe]`` asks for. A ConfigurationError names the
    field."""
    from tidings.recovery.retention import check_retention

    check_retention(settings)
    links_from(settings.unsubscribe, os.environ)  # links asked for need their secret


#: Why a channel declared without a provider is refused (``check_providers``).
NO_PROVIDER = (
    "is not set: name the provider this channel sends through, e.g. provider = {kind = "
    "\"smtp\", host = \"smtp.example.com\"} (docs/settings.md lists the kinds). For tests "
    "and trials, provider = {kind = \"sandbox-twin\"} is the in-process sandbox: it marks "
    "every send accepted and delivers nothing")


def check_providers(settings: Settings, given: Collection[str] = ()) -> None:
    """Every channel names its provider, unless the application built one for it
    (``given``, the channels of ``build_runtime(providers=...)``): a channel is never
    sent through a stand-in that reports sends accepted while nothing is delivered. A
    ConfigurationError names ``channels.<name>.provider``.

    What can be checked without building a provider is checked here, in every process
    (a plug-in's factory imports, the sandbox has a URL); building it, which reads its
    secrets, waits for the process that sends through it (``Runtime.provider``)."""
    from tidings.providers.build import check_provider_settings

    for name, spec in settings.channels.items():
        if name in given:
            continue
        if spec.provider is None:
            raise ConfigurationError(f"channels.{name}.provider", NO_PROVIDER)
        named = [(f"channels.{name}.provider", spec.provider)] + [
            (f"channels.{name}.fallbacks.{i}", f) for i, f in enumerate(spec.fallbacks)]
        for prefix, provider in named:
            if not isinstance(provider, ProviderSettings):
                check_provider_settings(provider, channel=name, prefix=prefix)
            elif provider.kind == "sandbox" and not provider.url:
                raise ConfigurationError(f"{prefix}.url",
                                         "is required for the sandbox provider")


def provider_timeout_s(spec: ChannelSettings | None) -> float:
    """How long one request of a channel's provider may take, as its settings say (the
    provider settings' default where the application built the provider itself)."""
    if spec is None or spec.provider is None:
        return float(ProviderSettings.model_fields["timeout_s"].default)
    # A send may be refused by each provider in turn before the last one answers.
    return spec.provider.timeout_s + sum(f.timeout_s for f in spec.fallbacks)


def default_worker_id(channel: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{channel}:{random.getrandbits(24):06x}"


async def open_store(url: str) -> tuple[Store, Transport]:
    """Open the store and its embedded transport named by a URL."""
    if url.startswith("sqlite:"):
        from tidings.stores.sqlite import SqliteStore
        from tidings.stores.sqlite_db import SqliteDatabase
        from tidings.transports.sqlite import SqliteTransport

        db = SqliteDatabase.from_url(url)
        return SqliteStore(db), SqliteTransport(db)
    if url.startswith(("postgresql:", "postgres:")):
        # Imported here: psycopg is the optional extra "postgres".
        try:
            from tidings.stores.postgres import PostgresStore
            from tidings.stores.postgres_db import PostgresDatabase
            from tidings.transports.postgres import PostgresTransport
        except ImportError as exc:
            raise ConfigurationError("store", "PostgreSQL needs the extra: "
                                     "pip install 'tidings[postgres]'") from exc

        pg = PostgresDatabase.from_url(url)  # ConfigurationError naming the URL sans password
        await pg.open()  # StoreError at once if the server cannot be reached
        return PostgresStore(pg), PostgresTransport(pg)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise ConfigurationError("store", f"unsupported store URL scheme {scheme!r}; "
                             "use sqlite:///path/to/tidings.db or postgresql://user@host/db")


def open_registry(store: Store) -> Registry | None:
    """The worker-marker registry on a store's own database (None for any other store)."""
    from tidings.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from tidings.stores.sqlite_liveness import SqliteRegistry

        return SqliteRegistry(store.db)
    try:
        from tidings.stores.postgres import PostgresStore
        from tidings.stores.postgres_liveness import PostgresRegistry
    except ImportError:  # no psycopg: no PostgreSQL store either
        return None
    if isinstance(store, PostgresStore):
        return PostgresRegistry(store.db)
    return None


def build_provider(channel: str, spec: ChannelSettings, clock: Clock, *,
                   pacer_for: Callable[[str, PaceLimits], Pacer] | None = None,
                   report: Report | None = None, hear: Hear | None = None) -> Provider:
    """Make the provider a channel's settings name; with ``fallbacks``, the providers in
    order behind one (``tidings.delivery.failover``), a provider named in
    ``failover.quotas`` paced by the pacer ``pacer_for(name, limits)`` makes, a provider
    going out or coming back told to ``report``, and what the other processes told read
    by ``hear``."""
    if spec.provider is None:
        raise ConfigurationError(f"channels.{channel}.provider", NO_PROVIDER)
    first = _one_provider(channel, spec.provider, clock, f"channels.{channel}.provider")
    if not spec.fallbacks:
        return first
    from tidings.delivery.failover import FailoverProvider

    # Adapters open no connection when built: one that fails to build leaves nothing
    # of the others to close.
    made = [first] + [_one_provider(channel, fallback, clock, f"channels.{channel}.fallbacks.{i}")
                      for i, fallback in enumerate(spec.fallbacks)]
    names = route_names([str(p.kind) for p in (spec.provider, *spec.fallbacks)])
    pacers = {} if pacer_for is None else {
        name: pacer_for(name, PaceLimits(
            max_in_flight=spec.max_in_flight,
            quota_per_s=parse_quota(quota, f"channels.{channel}.failover.quotas.{name}"),
            safety=spec.quota_safety))
        for name, quota in spec.failover.quotas.items()}
    return FailoverProvider(list(zip(names, made, strict=True)), rule=spec.failover.rule(),
                            clock=clock, pacers=pacers, report=report, hear=hear)


def _one_provider(channel: str, provider: ChannelProvider, clock: Clock,
                  prefix: str) -> Provider:
    from tidings.providers.sandbox import SandboxHttpProvider, SandboxTwinProvider
    from tidings.sandbox.core import SandboxConfig, SandboxCore

    if not isinstance(provider, ProviderSettings):
        from tidings.providers.build import build_provider_from

        return build_provider_from(provider, channel=channel, clock=clock,
                                   field_prefix=prefix)
    if provider.kind == "sandbox":
        if not provider.url:
            raise ConfigurationError(f"{prefix}.url", "is required for the sandbox provider")
        return SandboxHttpProvider(base_url=provider.url, channel=channel, clock=clock,
                                   timeout_s=provider.timeout_s)
    config = (SandboxConfig(quotas={channel: provider.twin_quota}) if provider.twin_quota
              else SandboxConfig())
    core = SandboxCore(config, now=clock.now, seed=0)
    return SandboxTwinProvider(core=core, channel=channel, clock=clock)


def load_templates(settings: Settings) -> dict[str, TemplateSet]:
    """Each channel's template folder, every template compiled now: a broken one is a
    settings error at start-up, not a rejection per recipient later."""
    loaded: dict[str, TemplateSet] = {}
    for name, spec in settings.channels.items():
        if spec.templates is None:
            continue
        from tidings.delivery.templates import TemplateSet

        field_name = f"channels.{name}.templates"
        if not Path(spec.templates).is_dir():
            raise ConfigurationError(field_name, f"{spec.templates} is not a folder")
        templates = TemplateSet.from_directory(spec.templates,
                                               max_sms_segments=spec.max_sms_segments)
        problems = templates.compile_all()
        if problems:
            raise ConfigurationError(field_name, "; ".join(p.reason for p in problems[:3]))
        loaded[name] = templates
    return loaded


def check_campaign_templates(settings: Settings, campaigns: Sequence[Campaign],
                             templates: Mapping[str, TemplateSet]) -> None:
    """Each campaign's template version exists on every channel of it that renders (a
    kind and a templates folder): a typo in ``template`` or a ``version`` with no folder
    behind it is a settings error at start-up, not an occurrence whose every intent is
    rejected at its send."""
    for campaign in campaigns:
        wanted = template_ref(campaign.template, campaign.version)
        for channel in campaign.channels:
            spec = settings.channels.get(channel)
            found = templates.get(channel)
            if spec is None or spec.kind is None or found is None:
                continue
            missing = found.missing(wanted, spec.kind)
            if missing is not None:
                field = "version" if found.missing(template_ref(campaign.template, 1)) is None \
                    else "template"
                raise ConfigurationError(f"campaigns.{campaign.name}.{field}",
                                         f"{missing} in channels.{channel}.templates "
                                         f"({spec.templates})")


async def check_campaign_data(settings: Settings, campaigns: Sequence[Campaign],
                              templates: Mapping[str, TemplateSet]) -> None:
    """Each campaign whose audience says what data its recipients carry (a SQL query's
    columns, ``SqlAudience.data_columns``) carries every variable its template uses in
    every message on each channel of it that renders (``TemplateSet.unprovided``): a
    column missing from the query is a settings error when the scheduler starts, not
    an occurrence whose every intent is rejected at its send."""
    for campaign in campaigns:
        if not isinstance(campaign.audience, SqlAudience):
            continue  # a user's generator is not called before its occurrence
        names = set(await campaign.audience.data_columns())
        wanted = template_ref(campaign.template, campaign.version)
        for channel in campaign.channels:
            spec = settings.channels.get(channel)
            found = templates.get(channel)
            if spec is None or spec.kind is None or found is None:
                continue
            lacking = found.unprovided(wanted, spec.kind, names)
            if lacking is not None:
                variable, file = lacking
                raise ConfigurationError(
                    f"campaigns.{campaign.name}.audience",
                    f"its query returns no column {variable!r}, which template {wanted!r} "
                    f"{file} uses in every message (channel {channel!r}); add the column, "
                    "or guard it in the template with `is defined` or `| default(...)`")


def pace_limits(spec: ChannelSettings, channel: str) -> PaceLimits:
    quota = parse_quota(spec.quota, f"channels.{channel}.quota") if spec.quota else None
    return PaceLimits(max_in_flight=spec.max_in_flight, min_interval_s=spec.min_interval_s,
                      quota_per_s=quota, safety=spec.quota_safety)


def throttle_rules(settings: Settings) -> ThrottleRules:
    """The per-recipient throttles of ``settings``: each channel's ``throttle``, and each
    campaign's ``throttle`` on every channel of the campaign (in place of the channel's)."""
    channels = {name: Rule(name=channel_rule_name(name), limit=spec.throttle.limit,
                           window_s=spec.throttle.window_s, mode=Mode(spec.throttle.mode))
                for name, spec in settings.channels.items() if spec.throttle is not None}
    campaigns = {(name, channel): Rule(name=campaign_rule_name(name, channel),
                                       limit=c.throttle.limit, window_s=c.throttle.window_s,
                                       mode=Mode(c.throttle.mode))
                 for name, c in settings.campaigns.items() if c.throttle is not None
                 for channel in c.channels}
    return ThrottleRules(channels, campaigns)


def campaigns_from(settings: Settings) -> list[Campaign]:
    """Build the declared campaigns; errors name the campaign's field."""
    campaigns = []
    for name, c in settings.campaigns.items():
        try:
            campaigns.append(Campaign(
                name=name, schedule=Schedule(c.cron, c.timezone), channels=tuple(c.channels),
                template=c.template, version=c.version,
                audience=audience_from_spec(c.audience, field=f"campaigns.{name}.audience"),
                expires_after_s=c.expires_after_s, grace_s=c.grace_s,
                start_paused=c.start_paused, lane=c.lane, group=c.group))
        except ConfigurationError as exc:
            if exc.field.startswith("campaigns."):
                raise
            raise ConfigurationError(f"campaigns.{name}.{exc.field}", exc.message) from None
    return campaigns


@dataclass(kw_only=True)
class Runtime:
    """Everything wired; builds workers, schedulers and reconcilers on demand."""

    settings: Settings
    clock: Clock
    store: Store
    transport: Transport
    providers: dict[str, Provider]
    limits: dict[str, PaceLimits]
    campaigns: list[Campaign]
    policy: RetryPolicy
    templates: dict[str, TemplateSet] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)
    group_commit: GroupCommitConfig | None = field(default_factory=GroupCommitConfig)
    """How concurrent ``notify`` calls share a transaction; None: one each."""
    _group: Coalescer[Asked, Notified] | None = field(default=None, init=False, repr=False)
    _gate: Composer | None = field(default=None, init=False, repr=False)
    _registry: Registry | None = field(default=None, init=False, repr=False)
    _clock_keeper: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    #: Each provider's policy for uncertain sends, checked once per provider object.
    _policies: dict[str, tuple[Provider, UncertainPolicy]] = field(
        default_factory=dict, init=False, repr=False)

    @property
    def enqueue_in_store(self) -> bool:
        """The transport is the store's own queue table: admit and enqueue in one
        transaction."""
        return is_store_queue(self.settings.transport)

    @property
    def channels(self) -> list[str]:
        return sorted(self.limits)

    @cached_property
    def channel_kinds(self) -> dict[str, str]:
        """Each channel's address kind (``model.address_kind``): sms or email."""
        return {name: address_kind(name, spec.kind)
                for name, spec in self.settings.channels.items()}

    @cached_property
    def channel_lanes(self) -> ChannelLanes:
        """Each channel's lane names, first first (``tidings.core.lanes``), and the
        channels that share their lanes among groups (``tidings.core.fair``)."""
        channels = self.settings.channels
        return ChannelLanes({name: spec.lanes for name, spec in channels.items()},
                            fair=[name for name, spec in channels.items() if spec.fair_share])

    def provider(self, channel: str) -> Provider:
        """The channel's provider, built from its settings on first use: only a process
        that sends (a worker, the reconciler, an operator's look-up) builds one and reads
        its secrets; admission (``notify``, a campaign's pass) needs the store alone. A
        provider that cannot be built, or cannot honour the channel's policy for
        uncertain sends, is a ConfigurationError naming the field."""
        made = self.providers.get(channel)
        if made is None:
            spec = self.settings.channels.get(channel)
            if spec is None:
                raise ConfigurationError(
                    "channel", unknown_name("channel", channel, self.channels))
            # Kept before its policy is checked, so close() closes it either way.
            made = self.providers[channel] = build_provider(
                channel, spec, self.clock,
                pacer_for=lambda name, limits: self.route_pacer(channel, name, limits),
                report=partial(self.provider_said, channel),
                hear=partial(self.store.pacer_read, providers_key(channel)))
        checked = self._policies.get(channel)
        if checked is None or checked[0] is not made:
            spec = self.settings.channels.get(channel) or ChannelSettings()
            self._policies[channel] = (made, policy_for(
                channel, made, mode=spec.uncertain, hold_s=spec.hold_s,
                dedupe_window_s=spec.dedupe_window_s, lookup_settle_s=spec.lookup_settle_s))
        return made

    def all_providers(self) -> dict[str, Provider]:
        """Every channel's provider (``provider``), built where not yet: the
        reconciler's, and what an operator's view of uncertain sends reads."""
        for channel in sorted(set(self.settings.channels) | set(self.providers)):
            self.provider(channel)
        return self.providers

    async def provider_said(self, channel: str, name: str, out: bool, at: float,
                            reason: str) -> None:
        """Keep in the store that a provider of ``channel`` went out or came back, as
        this process saw it (``tidings status`` and ``/metrics`` show it)."""
        worker = f"{socket.gethostname()}:{os.getpid()}"
        await self.store.pacer_transact(providers_key(channel), lambda state: (
            provider_said(state, name=name, out=out, at=at, worker=worker,
                          reason=reason), None))

    def route_pacer(self, channel: str, route: str, limits: PaceLimits) -> Pacer:
        """The pacer of one provider of a channel with fallbacks (its own quota, shared by
        every process through the store as the channel's is)."""
        key = f"{channel}@{route}"
        return self._pacer(channel, key, limits, default_worker_id(key))

    def pacer(self, channel: str, worker_id: str) -> Pacer:
        return self._pacer(channel, channel, self.limits[channel], worker_id)

    def _pacer(self, channel: str, key: str, limits: PaceLimits, worker_id: str) -> Pacer:
        # Every Store is a pacer backend: processes that share the store share the budget.
        # A process silent for three provider timeouts is dead: its slots go back.
        timeout = provider_timeout_s(self.settings.channels.get(channel))
        return Pacer(channel=key, limits=limits, backend=self.store, clock=self.clock,
                     worker=worker_id, stale_s=max(10.0, 3 * timeout))

    def composer(self) -> Composer:
        """The send-time gate (preferences, address checks, templates) of every channel."""
        specs = self.settings.channels
        return Composer(store=self.store, clock=self.clock,
                        kinds={name: spec.kind for name, spec in specs.items()
                               if spec.kind is not None},
                        templates=self.templates,
                        test_domains=any(spec.accept_test_domains for spec in specs.values()),
                        unsubscribe=self.unsubscribe_links)

    @cached_property
    def unsubscribe_links(self) -> UnsubscribeLinks | None:
        """The one-click unsubscribe links of ``[unsubscribe]``, their secret read from
        the environment (None: no headers)."""
        return links_from(self.settings.unsubscribe, os.environ)

    def worker(self, channel: str, worker_id: str | None = None) -> Worker:
        provider = self.provider(channel)
        wid = worker_id or default_worker_id(channel)
        w = self.settings.worker
        batch_max, linger_s = self._batching(channel, provider)
        return Worker(
            channel=channel, store=self.store, transport=self.transport, provider=provider,
            pacer=self.pacer(channel, wid), clock=self.clock, policy=self.policy,
            worker_id=wid, rng=random.Random(self.rng.getrandbits(64)),
            config=WorkerConfig(batch_size=w.batch_size, max_held=w.max_held,
                                commit_batch=w.commit_batch, lease_s=w.lease_s,
                                visibility_s=w.visibility_s, max_receives=w.max_receives,
                                send_deadline_s=self.send_deadline_s(channel),
                                batch_max_messages=batch_max, batch_linger_s=linger_s,
                                lanes=len(self._lanes_of(channel)),
                                lane_min_share=self._lane_min_share(channel),
                                group_weights=self._group_weights(channel)),
            composer=self.composer(), holds=HoldGate(self.store, self.clock),
            throttle=self.throttle_gate(channel),
        )

    def _lanes_of(self, channel: str) -> Sequence[str]:
        return self.channel_lanes.get(channel, DEFAULT_LANES)

    def _lane_min_share(self, channel: str) -> float:
        spec = self.settings.channels.get(channel)
        return spec.lane_min_share if spec is not None else DEFAULT_MIN_SHARE

    def _group_weights(self, channel: str) -> dict[str, float] | None:
        """The channel's group weights where it shares its lanes among groups, else None."""
        spec = self.settings.channels.get(channel)
        return dict(spec.group_weights) if spec is not None and spec.fair_share else None

    def _batching(self, channel: str, provider: Provider) -> tuple[int, float]:
        """Messages per request and the linger of ``channels.<name>.batch`` (1 and the
        default: off); refused where the provider has no batch endpoint."""
        spec = self.settings.channels.get(channel)
        batch = spec.batch if spec is not None else None
        if batch is None:
            return 1, DEFAULT_LINGER_S
        limit = batch_limit(provider)
        if limit <= 1:
            raise ConfigurationError(
                f"channels.{channel}.batch",
                f"the {getattr(provider, 'name', type(provider).__name__)} provider sends "
                "one message per request (it has no batch endpoint); remove the batch "
                "table or choose a provider with one (postmark, resend)")
        if spec is not None and spec.uncertain == "resend" and not getattr(
                provider, "batch_deduplicates", True):
            # Its single sends carry their key for the provider to deduplicate on, its
            # batches do not: a batch member sent again alone could be sent twice.
            raise ConfigurationError(
                f"channels.{channel}.uncertain",
                f"'resend' relies on the provider deduplicating on our key, and the "
                f"{getattr(provider, 'name', type(provider).__name__)} provider's batch "
                "requests carry no key per message: with a batch table, use 'hold' (the "
                "default)")
        return min(batch.max_messages, limit), batch.linger_s

    def throttle_rules(self) -> ThrottleRules:
        """Every per-recipient throttle of the settings (``tidings.core.throttle``)."""
        return throttle_rules(self.settings)

    def throttle_gate(self, channel: str) -> ThrottleGate | None:
        """The throttles a worker of ``channel`` applies (None: none count its sends)."""
        rules = self.throttle_rules().for_channel(channel)
        return ThrottleGate(self.store, rules) if rules else None

    def send_deadline_s(self, channel: str) -> float:
        """The longest one send on ``channel`` may take before the worker cuts it off:
        three of its provider's timeouts (a pooled connection, connecting, the answer),
        plus the SMTP DATA timeout where there is one. A provider object given to
        ``build_runtime`` may say its own (a ``send_deadline_s`` attribute)."""
        own = getattr(self.providers.get(channel), "send_deadline_s", None)
        if isinstance(own, int | float) and not isinstance(own, bool) and 0 < own < math.inf:
            return float(own)
        spec = self.settings.channels.get(channel)
        if spec is None:
            return WorkerConfig.send_deadline_s
        return 3 * provider_timeout_s(spec) + float(getattr(spec.provider, "data_timeout_s",
                                                             0.0))

    def relay_config(self) -> RelayConfig:
        s = self.settings.scheduler
        return RelayConfig(horizon_s=s.relay_horizon_s, lease_s=s.relay_lease_s,
                           pages_in_flight=2 if self.store.concurrent_writers else 1)

    @property
    def relay_beside_admission(self) -> bool:
        """With a broker, the scheduler service runs the relay as a loop of its own
        beside admission (``relay.relay_loop``): a pass writes the outbox and returns."""
        return not self.enqueue_in_store

    def scheduler(self, *, relay_in_pass: bool = True) -> Scheduler:
        s = self.settings.scheduler
        shape = admission_shape(self.store.concurrent_writers)
        return Scheduler(store=self.store, transport=self.transport, campaigns=self.campaigns,
                         kinds=self.channel_kinds, lanes=self.channel_lanes,
                         config=SchedulerConfig(
                             page_size=s.page_size or shape.page_size,
                             max_pages=s.max_pages or shape.max_pages,
                             pages_in_flight=s.pages_in_flight or shape.pages_in_flight,
                             enqueue_in_store=self.enqueue_in_store,
                             relay_in_pass=relay_in_pass,
                             relay=self.relay_config()), clock=self.clock)

    def guardrails(self) -> GuardrailConfig:
        """The thresholds of every declared channel and campaign (overrides applied)."""
        g = self.settings.guardrails
        fields = GuardrailLimits.model_fields

        def limits(override: GuardrailLimits | None, *, channel: bool) -> Thresholds:
            values = {f: getattr(g, f) for f in fields}
            if override is not None:
                values.update({f: getattr(override, f) for f in override.model_fields_set})
            if not channel:
                values["oldest_message_age_s"] = None
            return Thresholds(**values)

        return GuardrailConfig(
            window_s=g.window_s, min_sends=g.min_sends,
            channels={c: limits(g.channels.get(c), channel=True) for c in self.channels},
            campaigns={c.name: limits(g.campaigns.get(c.name), channel=False)
                       for c in self.campaigns})

    def uncertain_policies(self) -> dict[str, UncertainPolicy]:
        """Each channel's policy for uncertain sends (``tidings.delivery.uncertain``), from its
        settings and its provider; a choice the provider cannot honour is a
        ConfigurationError naming the field."""
        self.all_providers()
        return {name: self._policies[name][1] for name in sorted(self.providers)}

    def retention(self) -> RetentionConfig:
        """``[retention]`` as the pruner takes it."""
        return retention_config(self.settings)

    def reconciler(self) -> Reconciler:
        r = self.settings.reconciler
        return Reconciler(store=self.store, transport=self.transport,
                          providers=self.all_providers(),
                          config=ReconcilerConfig(lost_after_s=r.lost_after_s,
                                                  uncertain_after_s=r.uncertain_after_s,
                                                  lease_s=self.settings.worker.lease_s,
                                                  send_deadlines={
                                                      c: self.send_deadline_s(c)
                                                      for c in self.channels},
                                                  relay=self.relay_config(),
                                                  suppression=self.suppression_rules()),
                          policies=self.uncertain_policies(), registry=self.registry(),
                          liveness=self.liveness(), clock=self.clock, retry=self.policy,
                          rng=self.rng)

    def suppression_rules(self) -> SuppressionRules:
        """What provider reports suppress (``tidings.core.suppression``): each channel's
        address kind and the ``[suppression]`` soft-bounce threshold."""
        s = self.settings.suppression
        return SuppressionRules(kinds=self.channel_kinds, soft_bounce_limit=s.soft_bounce_limit,
                                soft_bounce_window_s=s.soft_bounce_window_s)

    def liveness(self) -> LivenessConfig:
        """``[worker]`` heartbeat settings as ``tidings.core.liveness`` takes them."""
        w = self.settings.worker
        return LivenessConfig(beat_s=w.heartbeat_s, stale_after_s=w.gone_after_s)

    def registry(self) -> Registry | None:
        """The store's worker markers (``tidings.core.liveness``), made once."""
        if self._registry is None:
            self._registry = open_registry(self.store)
        return self._registry

    def marker(self, worker_id: str) -> Marker | None:
        """A worker process's liveness marker (None: the store keeps none)."""
        registry = self.registry()
        if registry is None:
            return None
        return Marker(registry, worker_id, clock=self.clock, config=self.liveness())

    @overload
    async def notify(self, *, key: str, recipient: Recipient | Mapping[str, Any],
                     channels: Sequence[str], template: str,
                     data: Mapping[str, Any] | None = None, due_at: float | None = None,
                     expires_at: float | None = None,
                     connection: AsyncConnection[Any] | None = None,
                     digest: None = None, lane: str | None = None,
                     group: str | None = None) -> Notified: ...

    @overload
    async def notify(self, *, key: str, recipient: Recipient | Mapping[str, Any],
                     channels: Sequence[str], template: str,
                     data: Mapping[str, Any] | None = None, due_at: None = None,
                     expires_at: None = None, connection: None = None,
                     digest: Digest | Mapping[str, Any], lane: None = None,
                     group: None = None) -> Digested: ...

    async def notify(self, *, key: str, recipient: Recipient | Mapping[str, Any],
                     channels: Sequence[str], template: str,
                     data: Mapping[str, Any] | None = None, due_at: float | None = None,
                     expires_at: float | None = None,
                     connection: AsyncConnection[Any] | None = None,
                     digest: Digest | Mapping[str, Any] | None = None,
                     lane: str | None = None, group: str | None = None
                     ) -> Notified | Digested:
        """Create a one-off or future-dated intent per channel; returns their keys, a
        ``Notified`` (a list, in the order of ``channels``) that says which were
        ``created`` now and which were ``existing``: the same request made before,
        which writes nothing. Another request under a key already used (another
        template, data, recipient, due time, expiry or set of channels) raises
        ``KeyConflict`` naming the field, and writes nothing.

        Concurrent calls in this process share one store transaction (``group_commit``);
        each returns once its own intents are written, and a bad request fails its own
        call alone.

        ``connection``: the caller's ``psycopg.AsyncConnection`` to the store's
        PostgreSQL database; the intents are then written in the caller's transaction
        and exist if and only if it commits. Anything else is refused naming it.

        ``digest``: instead of an intent, add this call as an item to the open window of
        the digest's key (``Digest``; see ``tidings.core.digest``), and answer
        ``Digested``. The window becomes one intent per channel when it closes; its
        template gets ``items`` (each item's ``data``, in order), ``count`` and
        ``digest_key``. ``key`` names the item: the same key again is the same item.

        ``lane``: the lane of each channel's queue the intents go to (``channels.<name>
        .lanes``; ``tidings.core.lanes``); default ``transactional`` (or the channel's
        first lane), ahead of campaigns and digests. A digest goes to the ``bulk`` lane.
        ``group``: on channels that share their lanes among groups (``fair_share``), the
        group the intents belong to (a tenant: ``tidings.core.fair``).
        """
        request = NotifyRequest(key=key, recipient=recipient, channels=channels,
                                template=template, data=data, due_at=due_at,
                                expires_at=expires_at, lane=lane, group=group)
        if digest is not None:
            if connection is not None:
                raise InvalidInput("connection", "a digest item is not written in the "
                                                 "caller's transaction; leave one out")
            if lane is not None:
                raise InvalidInput("lane", "a digest is sent in its channels' bulk lane "
                                           "when its window closes; leave the lane out")
            if group is not None:
                raise InvalidInput("group", "a digest item takes no group; leave it out")
            return await self._add_digest_item(request, digest)
        if connection is not None or self.group_commit is None:
            return (await self.notify_many([request], connection=connection))[0]
        asked = asked_of(request, known_channels=self.channel_kinds, now=self.clock.now(),
                         sendable=self._sendable, lanes=self.channel_lanes)
        return await self._grouped().submit(asked)

    async def _add_digest_item(self, request: NotifyRequest,
                               digest: Digest | Mapping[str, Any]) -> Digested:
        now = self.clock.now()
        draft = item_draft(request, digest, known_channels=self.channel_kinds, now=now,
                           sendable=self._sendable)
        added = await add_item(self.store, draft, now=now)
        if added.sealed and added.created:
            # At its item cap: admitted now, not at the next close pass; the other due
            # windows are the close passes' (a caller never waits for them).
            await self.close_digest_windows([added.window_id])
        return added

    async def cancel_digest_item(self, digest_key: str, item_key: str) -> bool:
        """Take an item (the ``key`` it was notified under) out of its digest before the
        digest's window closes: True if it was taken out now, False when its window has
        closed (the digest is sent with it). An unknown item is refused naming ``key``."""
        state = await self.store.digest_cancel_item(digest_key, item_key,
                                                    now=self.clock.now())
        if state is None:
            raise InvalidInput("key", f"digest {digest_key!r} has no item {item_key!r}")
        return state == "open"

    async def close_digests(self) -> ClosedDigests:
        """Admit the digest of every window whose time is up (run by the scheduler's
        passes and every worker's reconcile loop; safe to run anywhere, at once: closers
        at once close disjoint pages of windows)."""
        return await close_due(self.store, known_channels=self.channel_kinds,
                               clock=self.clock, enqueue_in_store=self.enqueue_in_store,
                               lanes=self.channel_lanes)

    async def close_digest_windows(self, window_ids: Sequence[str]) -> ClosedDigests:
        """Admit the digests of these windows now, each if it is due (at its item cap,
        or its time is up) and no closer has it (that closer admits it): what the call
        that filled a window does, leaving every other due window to the close passes."""
        windows = admitted = empty = 0
        for window_id in dict.fromkeys(window_ids):
            one = await close_page(self.store, known_channels=self.channel_kinds,
                                   now=self.clock.now(), window_id=window_id,
                                   enqueue_in_store=self.enqueue_in_store,
                                   lanes=self.channel_lanes)
            windows, admitted, empty = (windows + one.windows, admitted + one.admitted,
                                        empty + one.empty)
        return ClosedDigests(windows=windows, admitted=admitted, empty=empty)

    @property
    def notify_groups(self) -> int:
        """Group transactions ``notify`` has written so far (see ``group_commit``)."""
        return 0 if self._group is None else self._group.groups

    def _grouped(self) -> Coalescer[Asked, Notified]:
        if self._group is None:
            s = self.settings.scheduler

            async def write(calls: Sequence[Asked], now: float) -> list[Notified]:
                # One transaction for the group, checked for repeats before it commits:
                # a conflict fails the group; the call it names is set aside (written
                # alone, after the others are written together again).
                drafts = [d for asked in calls for d in asked.drafts]
                created = await admit_drafts(
                    self.store, self.transport, drafts, now=now, horizon_s=s.relay_horizon_s,
                    lease_s=s.relay_lease_s, enqueue_in_store=self.enqueue_in_store,
                    guard=guard_for(calls, now=now))
                return notified(calls, created)

            self._group = Coalescer(write, clock=self.clock, config=self.group_commit,
                                    size=lambda asked: len(asked.drafts),
                                    culprit=conflicting)
        return self._group

    async def notify_many(self, requests: Iterable[NotifyRequest], *,
                          connection: AsyncConnection[Any] | None = None) -> list[Notified]:
        """Many ``notify`` calls in one batch: all validated first, then written together
        in one transaction; each request's keys, as ``notify`` answers them. A request
        that conflicts with an intent under its key, or with an earlier request of the
        batch, raises ``KeyConflict`` (naming ``requests[i].<field>``) and the batch
        writes nothing."""
        if connection is not None:
            # A store that joins no transaction is refused first, whatever the connection.
            intake.joinable(self.store)
            check_caller_connection(connection)
        s = self.settings.scheduler
        return await notify_many(
            self.store, self.transport, requests, known_channels=self.channel_kinds,
            now=self.clock.now(), horizon_s=s.relay_horizon_s, lease_s=s.relay_lease_s,
            enqueue_in_store=self.enqueue_in_store, connection=connection,
            sendable=self._sendable, lanes=self.channel_lanes)

    def notify_many_joined(self, requests: Iterable[NotifyRequest], *, connection: object,
                           target: JoinTarget) -> list[Notified]:
        """Sync: ``notify_many`` on the caller's sync psycopg ``connection``, in the calling
        thread (``Client.notify(connection=…)``; ``target``: the store's ``join_target``)."""
        return intake.notify_many_joined(
            self.store, requests, connection=connection, target=target, now=self.clock.now(),
            known_channels=self.channel_kinds, horizon_s=self.settings.scheduler.relay_horizon_s,
            enqueue_in_store=self.enqueue_in_store, sendable=self._sendable,
            lanes=self.channel_lanes)

    def _sendable(self, draft: IntentDraft) -> tuple[str, str] | None:
        """What the worker would reject a draft for at send time (no such template, an
        address no send can use, a variable every message of its template needs that
        its data lacks), as ``(field, message)``: refused now, not later."""
        gate = self._gate
        if gate is None:
            gate = self._gate = self.composer()
        found = gate.draft_problem(draft)
        if found is None:
            return None
        what, problem = found
        sms = self.channel_kinds.get(draft.channel) == "sms"
        field = (what if what == "template" or what.startswith("data.")
                 else "recipient.phone" if sms else "recipient.email")
        return field, f"{problem} (channel {draft.channel!r})"

    async def cancel(self, key: str, reason: str = "cancelled by caller"
                     ) -> dict[str, State | None]:
        """Cancel an intent (or every channel of a notify key) before its send starts."""
        return await cancel(self.store, key, channels=self.limits, now=self.clock.now(),
                            reason=reason)

    async def set_preference(self, recipient_id: str, channel: str, *, opted_out: bool = False,
                             quiet_start: str | None = None, quiet_end: str | None = None,
                             timezone: str = "UTC") -> Preference:
        """Store a recipient's wishes for a channel, checked at every later send: opted out
        cancels with reason ``opted_out``; quiet hours (``"22:00"``-``"07:00"`` in the
        recipient's ``timezone``) defer to their end."""
        self._known_channel(channel)
        check_text(recipient_id, "recipient_id")
        preference = Preference(recipient_id=recipient_id, channel=channel,
                                opted_out=opted_out, quiet_start=quiet_start,
                                quiet_end=quiet_end, timezone=timezone)
        await self.store.preference_set(preference, now=self.clock.now())
        return preference

    async def delete_preference(self, recipient_id: str, channel: str) -> bool:
        """Forget a recipient's wishes for a channel; False if there were none."""
        self._known_channel(channel)
        check_text(recipient_id, "recipient_id")
        return await self.store.preference_delete(recipient_id, channel)

    async def preferences(self, recipient_id: str) -> list[Preference]:
        """A recipient's stored wishes, one per channel that has any."""
        check_text(recipient_id, "recipient_id")
        found = await self.store.preferences_for([(recipient_id, c) for c in self.channels])
        return [found[(recipient_id, c)] for c in self.channels if (recipient_id, c) in found]

    async def inspect(self, key: str | None = None, *, recipient: str | None = None
                      ) -> list[Delivery]:
        """Was it selected, enqueued, accepted: the deliveries of an intent key, a notify
        key (every channel of it) or a recipient (id, or its surrogate as logged), with
        their answers and timelines; empty when nothing matches."""
        from tidings.operate.operations import timeline

        return await timeline(self.store, key=key, recipient=recipient, channels=self.channels)

    def _known_channel(self, channel: str) -> None:
        if channel not in self.limits:
            raise InvalidInput("channel", unknown_name("channel", channel, self.channels))

    def keep_time(self, every_s: float) -> None:
        """Read the store's clock again every ``every_s`` seconds while the runtime is
        open (``ReferenceClock.keep``), when the runtime keeps the store's time."""
        if isinstance(self.clock, ReferenceClock) and every_s > 0 and self._clock_keeper is None:
            self._clock_keeper = asyncio.create_task(self.clock.keep(every_s),
                                                     name="tidings-clock")

    async def close(self) -> None:
        if self._clock_keeper is not None:
            self._clock_keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._clock_keeper
            self._clock_keeper = None
        if self._group is not None:
            await self._group.drain()  # every notify in hand is answered first
        for channel, provider in self.providers.items():
            try:
                await provider.close()
            except Exception:  # a plug-in's close must not leave the store open
                log.warning("provider close failed", exc_info=True,
                            extra={"channel": channel})
        if self._registry is not None:
            await self._registry.close()
        await self.transport.close()
        await self.store.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def build_runtime(
    settings: Settings,
    *,
    clock: Clock | None = None,
    providers: Mapping[str, Provider] | None = None,
    campaigns: Sequence[Campaign] | None = None,
    migrate: bool | Literal["new"] = True,
    rng: random.Random | None = None,
    patience_s: float | None = None,
) -> Runtime:
    """Build a runtime from settings; ``providers``/``campaigns`` override the declared ones
    (tests pass a twin sandbox; Python users pass their own audience generators).

    ``migrate``: True applies pending migrations; ``"new"`` creates the schema of a new
    database but refuses (SchemaOutOfDate) one that is older; False only checks.
    ``patience_s``: how long a broker transport that cannot be reached is tried again
    (None: the adapter's default, for services riding out a broker restart)."""
    # Everything that can refuse the settings runs before the store is opened.
    check_settings(settings)
    check_providers(settings, given=providers or {})
    chosen_campaigns = list(campaigns) if campaigns is not None else campaigns_from(settings)
    limits = {name: pace_limits(spec, name) for name, spec in settings.channels.items()}
    templates = load_templates(settings)
    check_campaign_templates(settings, chosen_campaigns, templates)
    if not migrate:
        from tidings.stores.sqlite_db import refuse_absent_file

        refuse_absent_file(settings.store)
    store, store_queue = await open_store(settings.store)
    try:
        transport = await open_transport(settings.transport, store_queue=store_queue,
                                         patience_s=patience_s)
    except BaseException:
        await store_queue.close()
        await store.close()
        raise
    if transport is not store_queue:
        await store_queue.close()  # the store keeps its database; its queue table is idle
    try:
        # Every process keeps the store's time, not its host's (core.clock.ReferenceClock).
        the_clock = clock or await _store_clock(store, settings)
        if migrate == "new":
            # Decided under the migration lock, and the schema created in one
            # transaction: a process starting beside another that is creating it
            # waits for the whole schema instead of refusing half of one.
            await store.migrate(now=the_clock.now(), new_only=True)
            await store.check_schema()
        elif migrate:
            await store.migrate(now=the_clock.now())
        else:
            await store.check_schema()
        await declare_paused(store, chosen_campaigns, now=the_clock.now())
    except BaseException:
        await transport.close()
        await store.close()
        raise
    r = settings.retry
    runtime = Runtime(
        settings=settings, clock=the_clock, store=store, transport=transport,
        providers=dict(providers or {}),  # the others are built where they send
        limits=limits, campaigns=chosen_campaigns, templates=templates,
        policy=RetryPolicy(max_failures=r.max_failures, base_s=r.base_s, cap_s=r.cap_s,
                           rate_limit_floor_s=r.rate_limit_floor_s,
                           rate_limit_cap_s=r.rate_limit_cap_s),
        rng=rng or random.Random(),
    )
    try:
        for name in sorted(providers or {}):
            runtime.provider(name)  # an impossible policy refuses the settings now
    except BaseException:
        await runtime.close()
        raise
    runtime.keep_time(settings.clock_sync_s)
    return runtime


async def _store_clock(store: Store, settings: Settings) -> ReferenceClock:
    clock = ReferenceClock(store.reference_time, offset=settings.clock_offset_s)
    await clock.calibrate()
    return clock
