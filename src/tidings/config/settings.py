"""Settings: frozen, validated, loaded from a TOML file and the environment.

Every error names the field it is about (``channels.email.quota: ...``). Durations are
``tidings.core.durations.Seconds`` (finite, above zero) or ``SecondsOrZero`` where 0 means
none; URLs are ``providers.config.HttpUrl`` (http or https, with a host).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tidings.config.batching import BatchSettings
from tidings.config.failover import FailoverSettings, check_fallbacks
from tidings.config.providers import (
    HttpProviderSettings,
    HttpUrlStr,
    PluginProviderSettings,
    PostmarkProviderSettings,
    ResendProviderSettings,
    SendGridProviderSettings,
    SmtpProviderSettings,
    TwilioProviderSettings,
)

# Re-exported: QueueSettings and the webhook settings were defined here, and settings
# code imports them from here.
from tidings.config.queues import QueueDigestSettings as QueueDigestSettings
from tidings.config.queues import QueueSettings as QueueSettings
from tidings.config.queues import check_queue_digest
from tidings.config.throttles import ThrottleSettings as ThrottleSettings
from tidings.config.transport_urls import transport_kind
from tidings.config.unsubscribe import UnsubscribeSettings
from tidings.config.webhooks import GenericWebhookSettings as GenericWebhookSettings
from tidings.config.webhooks import PostmarkWebhookSettings as PostmarkWebhookSettings
from tidings.config.webhooks import SendGridWebhookSettings as SendGridWebhookSettings
from tidings.config.webhooks import TwilioWebhookSettings as TwilioWebhookSettings
from tidings.config.webhooks import WebhookSettings as WebhookSettings
from tidings.core.cron import Schedule
from tidings.core.durations import LeaseSeconds, Seconds, SecondsOrZero
from tidings.core.errors import ConfigurationError, unknown_name
from tidings.core.keys import is_key_part
from tidings.core.lanes import DEFAULT_LANES, DEFAULT_MIN_SHARE, check_lane_names
from tidings.core.pacing import parse_quota


def _valid_quota(value: str | None) -> str | None:
    """A quota such as ``100/s`` (or None); the error says what a quota looks like."""
    if value is not None:
        try:
            parse_quota(value)
        except ConfigurationError as exc:
            raise ValueError(exc.message) from None
    return value


#: Why a group name is refused (a campaign's, a publish queue's).
BAD_GROUP = "must be a non-empty name without '/', whitespace or control characters"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class ProviderSettings(_Model):
    """Which provider a channel sends through.

    ``sandbox`` talks HTTP to a sandbox server at ``url``; ``sandbox-twin`` is the
    in-process sandbox (one process only), which marks sends accepted and delivers
    nothing: chosen by name, never a default.
    """

    kind: Literal["sandbox", "sandbox-twin"] = "sandbox"
    url: HttpUrlStr | None = None
    timeout_s: Seconds = 5.0
    twin_quota: int | None = Field(default=None, ge=1)
    """Requests per second the in-process twin accepts on this channel (default: the
    sandbox's own quotas); e.g. a very large one to measure tidings alone."""


PROVIDER_TAGS = frozenset({"sandbox", "smtp", "http", "twilio", "sendgrid", "postmark",
                           "plugin"})


def _provider_tag(value: Any) -> str:
    """A provider table's tag; no ``kind`` still means the sandbox."""
    kind = value.get("kind", "sandbox") if isinstance(value, dict) else getattr(value, "kind", "")
    return "sandbox" if kind in ("sandbox", "sandbox-twin") else str(kind)


ChannelProvider = Annotated[
    Annotated[ProviderSettings, Tag("sandbox")]
    | Annotated[SmtpProviderSettings, Tag("smtp")]
    | Annotated[HttpProviderSettings, Tag("http")]
    | Annotated[TwilioProviderSettings, Tag("twilio")]
    | Annotated[SendGridProviderSettings, Tag("sendgrid")]
    | Annotated[PostmarkProviderSettings, Tag("postmark")]
    | Annotated[ResendProviderSettings, Tag("resend")]
    | Annotated[PluginProviderSettings, Tag("plugin")],
    Discriminator(_provider_tag),
]


class ChannelSettings(_Model):
    # None only where an application hands build_runtime a provider object for the
    # channel; anywhere else a channel without one is refused at start-up
    # (runtime.check_providers), never sent through a stand-in.
    provider: ChannelProvider | None = None
    quota: str | None = None
    quota_safety: float = Field(default=0.98, gt=0, le=1)
    """Share of the quota the pacer aims at (and at least 2 requests/s below it), leaving
    room for timing noise."""
    max_in_flight: int = Field(default=64, ge=1)
    min_interval_s: SecondsOrZero = 0.0
    kind: Literal["email", "sms"] | None = None
    """What the channel carries. With a kind, addresses are checked before any send
    (a bad one is rejected with its reason); without one, the provider works from the
    identifiers alone (as the sandbox does)."""
    templates: str | None = None
    """A folder of versioned templates (``<name>/v<N>/subject.txt, body.txt, body.html``
    or ``sms.txt``) rendered at send time; relative to the settings file. Needs ``kind``."""
    max_sms_segments: int = Field(default=4, ge=1, le=20)
    accept_test_domains: bool = False
    """Accept ``*.test`` and single-label email domains (test set-ups only)."""
    uncertain: Literal["lookup", "hold", "resend"] | None = None
    """What settles a send whose answer was lost (``tidings.delivery.uncertain``): ``lookup`` asks
    the provider by key (the default where the adapter has a lookup), ``hold`` waits
    for webhook evidence, then an operator (the default otherwise), ``resend`` sends
    again under the same key: at-least-once, an explicit choice only."""
    hold_s: Seconds = 3600.0
    """How long an unsettled send waits for evidence before it is an operator's to
    decide (it is never resent on its own)."""
    dedupe_window_s: Seconds | None = None
    """With ``uncertain = "resend"``: how long the provider deduplicates on our key
    (default: the adapter's own figure); past it a resend is held instead."""
    lookup_settle_s: SecondsOrZero | None = None
    """With ``lookup``: how old a send must be before the provider's "not found" is
    believed (its read API lags its send API); default: the adapter's own figure."""

    throttle: ThrottleSettings | None = None
    """A per-recipient throttle on every send of the channel (none by default)."""
    batch: BatchSettings | None = None
    """Send through the provider's batch endpoint, many messages per request (off by
    default; a provider with no batch endpoint refuses it at start-up)."""
    lanes: list[str] = Field(default_factory=lambda: list(DEFAULT_LANES))
    """The queue's lanes, first first (``tidings.core.lanes``, docs/lanes.md): ``notify``
    goes to ``transactional``, campaigns and digests to ``bulk``; one lane is plain FIFO."""
    lane_min_share: float = Field(default=DEFAULT_MIN_SHARE, ge=0, lt=1)
    """What each lane after the first keeps of what is taken while it has work (0:
    strict order)."""
    fair_share: bool = False
    """Share each lane among the groups its intents name (``notify(group=)``, a campaign's
    or a publish queue's ``group``; ``tidings.core.fair``, docs/lanes.md): one tenant's
    campaign never takes the whole pace. Off: groups are not written. On the store's
    own queue and Redis Streams; RabbitMQ keeps one group a lane."""
    group_weights: dict[str, Annotated[float, Field(gt=0, le=1000)]] = Field(
        default_factory=dict)
    """A group's weight in the share (default 1 each): ``{ premium = 2 }``."""

    fallbacks: list[ChannelProvider] = Field(default_factory=list, max_length=4)
    """Providers tried after ``provider``, in order, for a send it proves it did not
    accept (refused connection, 5xx, credentials refused); never after a timeout
    (``tidings.core.failover``, docs/failover.md)."""
    failover: FailoverSettings = Field(default_factory=FailoverSettings)
    """When a provider of ``fallbacks`` is taken out, and for how long."""

    _quota = field_validator("quota")(_valid_quota)
    _lanes = field_validator("lanes")(check_lane_names)


class CampaignSettings(_Model):
    cron: str
    timezone: str = "UTC"
    channels: list[str]
    template: str
    version: int = Field(default=1, ge=1)
    expires_after_s: Seconds | None = 24 * 3600.0
    grace_s: SecondsOrZero = 3600.0
    audience: dict[str, Any]
    start_paused: bool = False
    """Start with admission paused: the first time a process sees the campaign its
    admission switch is created paused, and an operator resumes it (``tidings admission
    resume --campaign``) once the rollout checks pass. A switch that exists is never
    touched."""
    throttle: ThrottleSettings | None = None
    """A per-recipient throttle on this campaign's sends, on each of its channels, in
    place of the channel's own: they are counted apart from the channel's other sends."""
    lane: str | None = None
    """The lane of its channels' queues (``channels.<name>.lanes``) its intents go to;
    default: ``bulk``, or each channel's last lane."""
    group: str | None = None
    """The group its intents belong to on channels with ``fair_share`` (a tenant)."""


class RetrySettings(_Model):
    max_failures: int = Field(default=5, ge=1)
    base_s: Seconds = 1.0
    cap_s: Seconds = 300.0
    rate_limit_floor_s: Seconds = 0.25
    rate_limit_cap_s: Seconds = 60.0

    @model_validator(mode="after")
    def _floors_under_caps(self) -> RetrySettings:
        for low, high in (("base_s", "cap_s"), ("rate_limit_floor_s", "rate_limit_cap_s")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{low} ({getattr(self, low):g}) must not exceed {high} "
                                 f"({getattr(self, high):g})")
        return self


class WorkerSettings(_Model):
    batch_size: int = Field(default=200, ge=1, le=5000)
    """Messages a worker receives and claims at once."""
    max_held: int = Field(default=400, ge=1, le=100_000)
    """Messages a worker holds at once: claimed, waiting for the pacer, in flight, or
    waiting for their commit (on a paced channel its claims are bounded by its share of
    the pacer too). More drains faster where a transaction costs round trips
    (PostgreSQL: 1,000 with ``batch_size`` 400 and ``commit_batch`` 200 drained 12 %
    more a second), and leaves more for the reconciler to settle when a worker dies."""
    commit_batch: int = Field(default=100, ge=1, le=5000)
    """Outcomes a worker commits in one transaction at most."""
    lease_s: LeaseSeconds = 30.0
    visibility_s: LeaseSeconds = 60.0
    max_receives: int = Field(default=50, ge=1)
    reconcile_every_s: Seconds = 5.0
    heartbeat_s: Seconds = 1.0
    """Seconds between a worker's liveness heartbeats; as often, it looks for peers that
    are gone (``tidings.core.liveness``)."""
    gone_after_s: Seconds = 6.0
    """Seconds without a heartbeat after which a worker is gone: its leases end and its
    messages go to others at once. It starts no send once its own last heartbeat is half
    this old, so clocks across hosts must agree to better than that half. At least
    three heartbeats."""

    @model_validator(mode="after")
    def _beats_fit(self) -> WorkerSettings:
        if self.gone_after_s < 3 * self.heartbeat_s:
            raise ValueError(f"gone_after_s ({self.gone_after_s:g}) must be at least three "
                             f"heartbeats (heartbeat_s = {self.heartbeat_s:g})")
        return self


class SchedulerSettings(_Model):
    # Left out, each takes its store's default (scheduler.admission_shape):
    page_size: int | None = Field(default=None, ge=1, le=50_000)
    """Audience members per page: 2,500 on PostgreSQL, 5,000 on SQLite."""
    max_pages: int | None = Field(default=None, ge=1)
    """Pages per pass: 40 on PostgreSQL, 20 on SQLite (100,000 members either way)."""
    pages_in_flight: int | None = Field(default=None, ge=1, le=8)
    """Pages written side by side: 3 on PostgreSQL, 1 on SQLite (one writer)."""
    interval_s: Seconds = 1.0
    relay_horizon_s: SecondsOrZero = 60.0
    relay_lease_s: Seconds = 30.0


class ReconcilerSettings(_Model):
    lost_after_s: Seconds = 60.0
    uncertain_after_s: SecondsOrZero = 1.0


class RetentionSettings(_Model):
    """How long the ledger keeps what is finished (see ``tidings.recovery.retention``). Each span
    must cover the redelivery window plus the replay window the other settings allow
    (``tidings.recovery.retention.minimum_retention``): a shorter one is refused at start-up."""

    intents_s: Seconds = 30 * 86400.0
    """How long a terminal intent (accepted, rejected, dead, cancelled, expired, …) and
    its events are kept after it finished: 30 days."""
    occurrences_s: Seconds = 30 * 86400.0
    """How long a finished campaign occurrence (done or skipped) is kept: 30 days."""
    every_s: Seconds = 3600.0
    """How often the reconciler prunes (and, on PostgreSQL, creates partitions ahead)."""
    batch_size: int = Field(default=2000, ge=1, le=50_000)
    """Intents (and occurrences) deleted per statement: a prune never holds one huge
    DELETE."""
    max_batches: int = Field(default=50, ge=1)
    """Batches per prune; what is left waits for the next prune."""
    enabled: bool = True
    """False: the reconciler never prunes (``tidings retention run`` still does)."""


class GuardrailLimits(_Model):
    """Thresholds over the guardrail window; a measure left out is not watched."""

    duplicate_rate: float | None = Field(default=None, gt=0, le=1)
    """Redeliveries of finished intents per send."""
    rejection_rate: float | None = Field(default=None, gt=0, le=1)
    """Permanent rejections (an invalid address, a 4xx) per send."""
    rate_limited_rate: float | None = Field(default=None, gt=0, le=1)
    """429 answers per send."""
    dead_rate: float | None = Field(default=None, gt=0, le=1)
    """Retry budgets spent per send."""
    bounce_rate: float | None = Field(default=None, gt=0, le=1)
    """Hard bounces the providers report per accepted send (reports recorded in the
    window, over the sends accepted in it)."""
    complaint_rate: float | None = Field(default=None, gt=0, le=1)
    """Spam complaints the providers report per accepted send; the big mailbox providers
    ask bulk senders to stay under 0.003."""
    oldest_message_age_s: Seconds | None = None
    """Channels only: the oldest message on the channel's queue."""


class GuardrailSettings(GuardrailLimits):
    """Crossing a threshold pauses admission of that campaign or channel (see
    ``tidings.operate.guardrails``). The thresholds here apply to every channel and every
    campaign; ``channels.<name>`` and ``campaigns.<name>`` override them one by one."""

    window_s: Seconds = 300.0
    """The sliding window every rate is measured over."""
    min_sends: int = Field(default=20, ge=1)
    """Sends in the window below which no rate is judged."""
    channels: dict[str, GuardrailLimits] = Field(default_factory=dict)
    """Per channel, thresholds that replace the ones above (``[guardrails.channels.sms]``)."""
    campaigns: dict[str, GuardrailLimits] = Field(default_factory=dict)
    """Per campaign, thresholds that replace the ones above (no ``oldest_message_age_s``)."""


class ApiSettings(_Model):
    """The HTTP API (``tidings api``). Secrets are never in the file: each ``*_env``
    names an environment variable that holds them."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    trigger_secrets_env: str = "TIDINGS_TRIGGER_SECRETS"
    """Comma-separated HMAC secrets; two during a rotation (either verifies)."""
    trigger_tolerance_s: Seconds = 300.0
    trigger_early_s: SecondsOrZero = 60.0
    """A trigger this many seconds before an occurrence counts as that occurrence (cron jitter)."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    publish_rate: str | None = None
    """Intake limit for publishes across every API process, e.g. ``"200/s"``; none by default."""
    publish_burst: int = Field(default=0, ge=0)
    """Publishes allowed at once above the rate; 0 means one second's worth."""
    paused_retry_after_s: Seconds = 5.0
    """The ``Retry-After`` a publisher gets while admission is paused for its campaign or
    channel: a few seconds, so common retrying clients keep waiting through a short pause."""
    idempotency_ttl_s: Seconds = 7 * 86400.0
    metrics_cache_s: SecondsOrZero = 5.0
    rate_window_s: Seconds = 300.0
    """The window over which the send rate (for status and drain time) is measured."""
    queues: dict[str, QueueSettings] = Field(default_factory=dict)
    insecure_cookies: bool = False
    """Send the dashboard's cookies without ``Secure``, so a browser keeps them over
    plain http (local use only). By default they are ``Secure``, whatever the scheme
    the API sees: behind a proxy that terminates TLS, it sees http."""

    _rate = field_validator("publish_rate")(_valid_quota)


class SuppressionSettings(_Model):
    """The suppression list (``tidings.core.suppression``, docs/suppression.md): hard
    bounces, complaints and STOP replies suppress an address at once; soft bounces
    only once they add up, as set here."""

    soft_bounce_limit: int = Field(default=3, ge=0, le=1000)
    """Soft bounces of one address (a full mailbox, a greylisting server, a handset out
    of reach) within ``soft_bounce_window_s`` that suppress it: 3. 0: soft bounces never
    suppress."""
    soft_bounce_window_s: Seconds = 7 * 86400.0
    """The window soft bounces are counted over: 7 days. An older one no longer
    counts."""


class Settings(_Model):
    """Everything the composition root needs to build a runtime."""

    store: str = "sqlite:///tidings.db"
    """The ledger's database: ``sqlite:///path.db`` (relative to the settings file's
    folder; the default is ``tidings.db`` beside it) or ``postgresql://user@host/db``.
    ``TIDINGS_STORE`` and ``--store`` override it."""
    transport: str = "sql"
    """Where the channel queues live. ``"sql"``: the store's own queue table (intents and
    their messages are written in one transaction). A broker URL puts them on a broker
    beside the store, and admission writes intents to the store's outbox for the relay to
    publish: ``redis://host:6379/0`` (Redis Streams) or ``amqp://user:pass@host/vhost``
    (RabbitMQ); ``?prefix=name`` names the keys or queues on a shared server (default
    ``tidings``). See docs/transports.md, "Choose a transport"."""
    # Bounded so that "now" stays inside the dates the scheduler supports (1970 to 9998).
    clock_offset_s: float = Field(default=0.0, allow_inf_nan=False, ge=-1.5e9, le=2e11)
    clock_sync_s: SecondsOrZero = 60.0
    """How often a long-running process reads the store's clock again (0: only at start).
    Every tidings process keeps the store's time (PostgreSQL's, or for SQLite the kernel's
    of the host holding the file), not its own host's: see docs/production.md, "Which
    clock tidings trusts"."""
    channels: dict[str, ChannelSettings] = Field(default_factory=dict)
    campaigns: dict[str, CampaignSettings] = Field(default_factory=dict)
    retry: RetrySettings = RetrySettings()
    worker: WorkerSettings = WorkerSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    reconciler: ReconcilerSettings = ReconcilerSettings()
    guardrails: GuardrailSettings = GuardrailSettings()
    """Thresholds that pause a campaign's or channel's admission when its sends go wrong
    (all off until set)."""
    api: ApiSettings = ApiSettings()
    webhooks: WebhookSettings = WebhookSettings()
    suppression: SuppressionSettings = SuppressionSettings()
    """When soft bounces suppress an address (hard bounces, complaints and STOP replies
    always do)."""
    unsubscribe: UnsubscribeSettings = UnsubscribeSettings()
    """One-click unsubscribe headers in campaign email (off until ``base_url`` is set)."""
    retention: RetentionSettings = RetentionSettings()
    """How long finished intents, their events and finished occurrences are kept."""

    @field_validator("channels", "campaigns", mode="before")
    @classmethod
    def _names_fit_in_keys(cls, tables: Any, info: ValidationInfo) -> Any:
        # A name is part of every delivery key it makes: refused here, before the
        # scheduler opens an occurrence it could not admit.
        for name in tables if isinstance(tables, dict) else ():
            if not isinstance(name, str) or not is_key_part(name):
                what = (info.field_name or "")[:-1]
                raise ValueError(f"{name!r} cannot name a {what}: it must be non-empty, "
                                 "with no '/', whitespace or control characters")
        return tables

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        transport_kind(value)  # ValueError naming what is wrong, never the password
        return value

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Settings:
        """Validate a mapping; the first error becomes a ConfigurationError naming its field."""
        try:
            settings = cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = first["loc"]
            # A tagged union puts its tag in the path (provider.sendgrid.api_key_env): drop it.
            loc = tuple(p for i, p in enumerate(loc)
                        if not (i and p in PROVIDER_TAGS and (
                            loc[i - 1] == "provider"
                            or (i > 1 and loc[i - 2] == "fallbacks"))))
            field = ".".join(str(p) for p in loc) or "settings"
            message = str(first["msg"]).removeprefix("Value error, ")
            if first["type"] == "union_tag_invalid":  # pydantic's words name our function
                field += ".kind"
                message = (f"unknown provider kind {first['ctx']['tag']!r}; use one of "
                           f"{', '.join(sorted(PROVIDER_TAGS))}")
            raise ConfigurationError(field, message) from None
        for name, spec in settings.channels.items():
            if spec.templates is not None and spec.kind is None:
                raise ConfigurationError(f"channels.{name}.kind",
                                         "a channel with templates needs a kind (email or sms)")
            kinds = [str(p.kind) for p in (spec.provider, *spec.fallbacks) if p is not None]
            check_fallbacks(name, kinds, spec.failover, batch=spec.batch is not None,
                            uncertain=spec.uncertain)
        for scope, declared in (("channels", settings.channels),
                                ("campaigns", settings.campaigns)):
            for name in getattr(settings.guardrails, scope):
                if name not in declared:
                    raise ConfigurationError(f"guardrails.{scope}.{name}", unknown_name(
                        scope.removesuffix("s"), name, sorted(declared)))
        if settings.guardrails.campaigns and any(
                v.oldest_message_age_s is not None
                for v in settings.guardrails.campaigns.values()):
            raise ConfigurationError("guardrails.campaigns", "oldest_message_age_s is a "
                                     "channel's measure (its queue); set it on channels")
        for name, campaign in settings.campaigns.items():
            try:
                # Parsing the schedule here makes a bad cron or zone a settings error.
                Schedule(campaign.cron, campaign.timezone)
            except ConfigurationError as exc:
                raise ConfigurationError(f"campaigns.{name}.{exc.field}", exc.message) from None
            for index, channel in enumerate(campaign.channels):
                if channel not in settings.channels:
                    raise ConfigurationError(
                        f"campaigns.{name}.channels[{index}]",
                        unknown_name("channel", channel, sorted(settings.channels)))
                if channel in campaign.channels[:index]:
                    raise ConfigurationError(
                        f"campaigns.{name}.channels[{index}]",
                        f"repeats channel {channel!r} "
                        f"(channels[{campaign.channels.index(channel)}]); name each once")
                if campaign.group is not None and not is_key_part(campaign.group):
                    raise ConfigurationError(f"campaigns.{name}.group", BAD_GROUP)
                lanes = settings.channels[channel].lanes
                if campaign.lane is not None and campaign.lane not in lanes:
                    raise ConfigurationError(
                        f"campaigns.{name}.lane",
                        f"{campaign.lane!r} is not a lane of channel {channel!r}: its lanes "
                        f"are {lanes} (channels.{channel}.lanes)")
        for name, queue in settings.api.queues.items():
            check_queue_digest(name, queue)
            if queue.group is not None and not is_key_part(queue.group):
                raise ConfigurationError(f"api.queues.{name}.group", BAD_GROUP)
            targets = ([queue.channel] if queue.channel is not None else
                       settings.campaigns[queue.campaign].channels
                       if queue.campaign in settings.campaigns else [])
            for channel in targets:
                lanes = settings.channels[channel].lanes if channel in settings.channels else []
                if queue.lane is not None and lanes and queue.lane not in lanes:
                    raise ConfigurationError(
                        f"api.queues.{name}.lane", f"{queue.lane!r} is not a lane of channel "
                        f"{channel!r}: its lanes are {lanes} (channels.{channel}.lanes)")
        return settings

    @classmethod
    def load(cls, path: str | Path | None = None, *, env: Mapping[str, str] | None = None
             ) -> Settings:
        """Read ``path`` (TOML) if given, then apply ``TIDINGS_STORE`` from the environment.

        Relative paths in the file (a SQLite store or audience database, template
        folders) are relative to the file's folder, not the working directory.
        """
        data: dict[str, Any] = {}
        if path is not None:
            try:
                data = tomllib.loads(Path(path).read_text())
            except FileNotFoundError:
                raise ConfigurationError("config", f"{path} does not exist") from None
            except IsADirectoryError:
                raise ConfigurationError("config", f"{path} is a folder, not a settings "
                                                   "file") from None
            except UnicodeDecodeError:
                raise ConfigurationError("config", f"{path} is not UTF-8 text") from None
            except OSError as exc:
                raise ConfigurationError("config", f"cannot read {path}: "
                                                   f"{exc.strerror or exc}") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigurationError("config", f"{path} is not valid TOML: {exc}") from None
            resolve_relative_paths(data, Path(path).resolve().parent)
        environ = os.environ if env is None else env
        if environ.get("TIDINGS_STORE"):
            data["store"] = environ["TIDINGS_STORE"]
        return cls.parse(data)


CONFIG_ENV = "TIDINGS_CONFIG"
DEFAULT_CONFIG = "tidings.toml"
SQLITE_PREFIX = "sqlite:///"


def find_settings_file(explicit: str | Path | None = None, *,
                       env: Mapping[str, str] | None = None,
                       cwd: Path | None = None) -> Path | None:
    """The settings file to read: ``explicit`` (``--config``), else ``TIDINGS_CONFIG``,
    else ``tidings.toml`` in the working directory if there is one, else None (defaults)."""
    if explicit is not None:
        return Path(explicit)
    environ = os.environ if env is None else env
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    candidate = (Path.cwd() if cwd is None else cwd) / DEFAULT_CONFIG
    return candidate if candidate.is_file() else None


def _relative_sqlite(url: Any, base: Path) -> Any:
    """``sqlite:///x.db`` relative to ``base``; absolute and in-memory ones unchanged."""
    if not isinstance(url, str) or not url.startswith(SQLITE_PREFIX):
        return url
    path = url[len(SQLITE_PREFIX):]
    if not path or path == ":memory:" or Path(path).is_absolute():
        return url
    return SQLITE_PREFIX + str(base / path)


def resolve_relative_paths(data: dict[str, Any], base: Path) -> None:
    """Make the file's relative paths (store, the default one too, audience databases,
    templates, an SMTP CA bundle) absolute against ``base``, the settings file's folder,
    in place."""
    # A file that names no store means the default one beside it, like every other
    # relative path in it, not one in whatever folder the command runs from.
    data_store = data.get("store", Settings.model_fields["store"].default)
    if data_store is not None:
        data["store"] = _relative_sqlite(data_store, base)
    # Not a table: left as it is, for validation to refuse with the field's name.
    channels, campaigns = data.get("channels"), data.get("campaigns")
    for channel in channels.values() if isinstance(channels, dict) else ():
        folder = channel.get("templates") if isinstance(channel, dict) else None
        if isinstance(folder, str) and not Path(folder).is_absolute():
            channel["templates"] = str(base / folder)
        provider = channel.get("provider") if isinstance(channel, dict) else None
        if isinstance(provider, dict):
            bundle = provider.get("ca_file")
            if isinstance(bundle, str) and bundle and not Path(bundle).is_absolute():
                provider["ca_file"] = str(base / bundle)
    for campaign in campaigns.values() if isinstance(campaigns, dict) else ():
        audience = campaign.get("audience") if isinstance(campaign, dict) else None
        sql = audience.get("sql") if isinstance(audience, dict) else None
        if isinstance(sql, dict) and "url" in sql:
            sql["url"] = _relative_sqlite(sql["url"], base)
