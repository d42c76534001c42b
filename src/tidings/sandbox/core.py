"""The sandbox provider's engine: decides one request at a time and counts what happened.

No I/O: the HTTP server (``sandbox.server``) and the in-process twin
(``providers.sandbox.SandboxTwinProvider``) both wrap a ``SandboxCore`` and act out
its ``SandboxAnswer`` (wait the latency, reply, hang, or drop the connection).

A request is decided in this order:

1. it is counted in its channel's 1-second window (``int(now)``), refused or not;
2. over the channel's quota in this window → 429, Retry-After to the next window;
3. one random draw picks an injected fault: ``rate_limit`` (429), ``server_error``
   (503), ``timeout`` (never accepted, never answered), or arms ``lost_response``;
4. a request without an idempotency key, a ``to``, or a well-formed body → 400;
5. a malformed or ``reject_addresses`` address → 422, a ``stopped_addresses`` one → 422
   marked ``stopped`` (the recipient replied STOP: Twilio's dialect answers 400 with
   error 21610); a ``fail_addresses`` one → 503;
6. a key already accepted on the channel (with ``dedupe``) → 200 with the same
   receipt; otherwise accepted → 202 with a new receipt;
7. an armed ``lost_response`` drops the reply of that acceptance.

The counts are the sandbox's own truth, which demos and fault tests compare with
tidings' ledger.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from enum import StrEnum
from typing import Any, TypeGuard

from tidings.core.errors import ConfigurationError
from tidings.core.moved import moved_attribute
from tidings.sandbox.counts import COUNTERS, ChannelCounts, Series

# z-score of the 99th percentile of a standard normal: p99 = median * exp(sigma * Z99).
_Z99 = 2.3263478740408408
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True, kw_only=True)
class LatencySpec:
    """A lognormal latency given by its median and 99th percentile, in milliseconds.

    ``median_ms == 0`` means no latency; ``p99_ms <= median_ms`` means a constant.
    """

    median_ms: float = 0.0
    p99_ms: float = 0.0

    def __post_init__(self) -> None:
        _non_negative("latency.median_ms", self.median_ms)
        _non_negative("latency.p99_ms", self.p99_ms)

    def sample_s(self, rng: random.Random) -> float:
        if self.median_ms <= 0:
            return 0.0
        if self.p99_ms <= self.median_ms:
            return self.median_ms / 1000.0
        sigma = (math.log(self.p99_ms) - math.log(self.median_ms)) / _Z99
        return rng.lognormvariate(math.log(self.median_ms), sigma) / 1000.0


def _default_quotas() -> dict[str, int]:
    return {"email": 1000, "sms": 100}


_FAULTS = ("rate_limit", "server_error", "timeout", "lost_response")


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """How the sandbox behaves. Build it directly, or with ``from_dict``/``from_json``.

    Probabilities are per request and mutually exclusive (their sum is at most 1).
    Address patterns match case-insensitively: an entry starting with ``@`` or ``.``
    is a suffix (``"@invalid.example"``), one ending with ``*`` a prefix
    (``"+1555000*"``), anything else an exact address.
    """

    quotas: Mapping[str, int] = field(default_factory=_default_quotas)
    """Requests per 1-second window per channel, refused ones included."""
    latency: Mapping[str, LatencySpec] = field(default_factory=dict)
    """Per channel; a channel not listed answers at once."""
    rate_limit: float = 0.0
    server_error: float = 0.0
    timeout: float = 0.0
    lost_response: float = 0.0
    retry_after_s: float = 1.0
    """The Retry-After an injected 429 announces."""
    retry_after_date_share: float = 0.0
    """Share of injected 429s whose Retry-After is an HTTP-date instead of seconds."""
    retry_after_missing_share: float = 0.0
    """Share of injected 429s with no Retry-After header at all."""
    reject_addresses: tuple[str, ...] = ()
    """Addresses answered 422 (permanent), besides malformed ones."""
    fail_addresses: tuple[str, ...] = ()
    """Addresses always answered 503, to spend a retry budget."""
    stopped_addresses: tuple[str, ...] = ()
    """Numbers whose recipient replied STOP: refused (422; Twilio's dialect answers 400
    with error 21610, "Attempt to send to unsubscribed recipient")."""
    dedupe: bool = True
    hang_s: float = 30.0
    """How long the HTTP server holds a timed-out request before dropping it."""

    def __post_init__(self) -> None:
        for channel, quota in self.quotas.items():
            if not isinstance(channel, str) or not channel:
                raise ConfigurationError("quotas", f"channel name {channel!r} must be a string")
            if isinstance(quota, bool) or not isinstance(quota, int) or quota < 1:
                raise ConfigurationError(
                    f"quotas.{channel}", f"must be a positive integer, got {quota!r}"
                )
        for channel, spec in self.latency.items():
            if not isinstance(spec, LatencySpec):
                raise ConfigurationError(f"latency.{channel}", "must be a LatencySpec")
        for name in (*_FAULTS, "retry_after_date_share", "retry_after_missing_share"):
            _probability(name, getattr(self, name))
        if sum(getattr(self, name) for name in _FAULTS) > 1.0 + 1e-9:
            raise ConfigurationError(
                "rate_limit", "rate_limit + server_error + timeout + lost_response exceeds 1"
            )
        if self.retry_after_date_share + self.retry_after_missing_share > 1.0 + 1e-9:
            raise ConfigurationError(
                "retry_after_date_share",
                "retry_after_date_share + retry_after_missing_share exceeds 1",
            )
        _non_negative("retry_after_s", self.retry_after_s)
        if not _number(self.hang_s) or self.hang_s <= 0:
            raise ConfigurationError("hang_s", f"must be a positive number, got {self.hang_s!r}")
        for name in ("reject_addresses", "fail_addresses", "stopped_addresses"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(
                isinstance(a, str) and a.strip("*") for a in value
            ):
                raise ConfigurationError(name, "must be a list of non-empty strings")
        if not isinstance(self.dedupe, bool):
            raise ConfigurationError("dedupe", f"must be true or false, got {self.dedupe!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SandboxConfig:
        """Build from plain data (parsed JSON or TOML); errors name the offending field."""
        if not isinstance(data, Mapping):
            raise ConfigurationError("config", "must be an object")
        known = {f for f in cls.__dataclass_fields__}
        for name in data:
            if name not in known:
                raise ConfigurationError(str(name), "unknown field")
        kwargs: dict[str, Any] = {}
        for name, value in data.items():
            if name == "quotas":
                if not isinstance(value, Mapping):
                    raise ConfigurationError("quotas", "must be an object of channel: count")
                kwargs[name] = dict(value)
            elif name == "latency":
                kwargs[name] = _latency_from(value)
            elif name in ("reject_addresses", "fail_addresses", "stopped_addresses"):
                if isinstance(value, str) or not isinstance(value, list | tuple):
                    raise ConfigurationError(name, "must be a list of strings")
                kwargs[name] = tuple(value)
            elif name == "dedupe":
                kwargs[name] = value
            else:
                if not _number(value):
                    raise ConfigurationError(name, f"must be a number, got {value!r}")
                kwargs[name] = float(value)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str | bytes) -> SandboxConfig:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError("config", f"is not JSON: {exc}") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form that ``from_dict`` reads back."""
        return {
            "quotas": dict(self.quotas),
            "latency": {
                c: {"median_ms": s.median_ms, "p99_ms": s.p99_ms} for c, s in self.latency.items()
            },
            "rate_limit": self.rate_limit,
            "server_error": self.server_error,
            "timeout": self.timeout,
            "lost_response": self.lost_response,
            "retry_after_s": self.retry_after_s,
            "retry_after_date_share": self.retry_after_date_share,
            "retry_after_missing_share": self.retry_after_missing_share,
            "reject_addresses": list(self.reject_addresses),
            "fail_addresses": list(self.fail_addresses),
            "stopped_addresses": list(self.stopped_addresses),
            "dedupe": self.dedupe,
            "hang_s": self.hang_s,
        }


def _number(value: object) -> TypeGuard[float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _non_negative(name: str, value: object) -> None:
    if not _number(value) or value < 0:
        raise ConfigurationError(name, f"must be a non-negative number, got {value!r}")


def _probability(name: str, value: object) -> None:
    if not _number(value) or not 0.0 <= value <= 1.0:
        raise ConfigurationError(name, f"must be a probability between 0 and 1, got {value!r}")


def _latency_from(value: object) -> dict[str, LatencySpec]:
    if not isinstance(value, Mapping):
        raise ConfigurationError("latency", "must be an object of channel: {median_ms, p99_ms}")
    specs: dict[str, LatencySpec] = {}
    for channel, spec in value.items():
        where = f"latency.{channel}"
        if _number(spec):
            # A bare number is a constant latency in milliseconds (0: none).
            _non_negative(where, spec)
            specs[channel] = LatencySpec(median_ms=float(spec), p99_ms=float(spec))
            continue
        if not isinstance(spec, Mapping):
            raise ConfigurationError(where, "must be a number or {median_ms, p99_ms}")
        for key in spec:
            if key not in ("median_ms", "p99_ms"):
                raise ConfigurationError(f"{where}.{key}", "unknown field")
        median = spec.get("median_ms", 0.0)
        p99 = spec.get("p99_ms", median)
        _non_negative(f"{where}.median_ms", median)
        _non_negative(f"{where}.p99_ms", p99)
        specs[channel] = LatencySpec(median_ms=float(median), p99_ms=float(p99))
    return specs


class _AddressMatcher:
    """Exact addresses, ``@domain``/``.tld`` suffixes and ``prefix*`` patterns."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.exact = frozenset(p.lower() for p in patterns if not _is_suffix(p) and "*" not in p)
        self.suffixes = tuple(p.lower() for p in patterns if _is_suffix(p))
        self.prefixes = tuple(p.lower().rstrip("*") for p in patterns if p.endswith("*"))

    def __call__(self, address: str) -> bool:
        lowered = address.lower()
        return (
            lowered in self.exact
            or (bool(self.suffixes) and lowered.endswith(self.suffixes))
            or (bool(self.prefixes) and lowered.startswith(self.prefixes))
        )


def _is_suffix(pattern: str) -> bool:
    return pattern.startswith(("@", "."))


def address_problem(channel: str, address: str) -> str | None:
    """Why ``address`` is malformed for the channel's kind (sms or email), or None."""
    if channel.startswith("sms"):
        if not _E164.match(address):
            return "malformed address: expected an E.164 phone number like +15551234567"
    elif not _EMAIL.match(address):
        return "malformed address: expected an email address like name@example.com"
    return None


# ---------------------------------------------------------------- answers


class AnswerKind(StrEnum):
    """What the sandbox decided about one request; each has a count in ``stats()``."""

    ACCEPTED = "accepted"
    DEDUPLICATED = "deduplicated"
    REFUSED_QUOTA = "refused_quota"
    REFUSED_INJECTED = "refused_injected"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    LOST_RESPONSE = "lost_response"
    REJECTED = "rejected"
    BAD_REQUEST = "bad_request"
    UNKNOWN_CHANNEL = "unknown_channel"


@dataclass(frozen=True, kw_only=True)
class SandboxAnswer:
    """The decision on one request, for the HTTP layer or the twin to act out.

    ``status`` is None when no reply is sent (timeout, lost response). A lost
    response still carries the receipt the message was accepted under.
    """

    kind: AnswerKind
    status: int | None
    request_id: str
    latency_s: float = 0.0
    receipt: str | None = None
    retry_after: str | None = None
    """The Retry-After header value exactly as sent (seconds or an HTTP-date)."""
    error: str | None = None
    stopped: bool = False
    """Refused because the recipient replied STOP (``stopped_addresses``)."""

    @property
    def accepted(self) -> bool:
        """Whether the channel holds the message after this request."""
        return self.receipt is not None


# ---------------------------------------------------------------- counts


_KIND_COUNTER = {
    AnswerKind.REFUSED_QUOTA: "refused_quota",
    AnswerKind.REFUSED_INJECTED: "refused_injected",
    AnswerKind.SERVER_ERROR: "server_errors",
    AnswerKind.TIMEOUT: "timeouts",
    AnswerKind.REJECTED: "rejected",
    AnswerKind.BAD_REQUEST: "bad_requests",
}


# ---------------------------------------------------------------- the engine


@dataclass(frozen=True, kw_only=True)
class _Gate:
    """A request that passed the quota and the injected faults (``SandboxCore._gate``)."""

    state: ChannelCounts
    request_id: str
    latency_s: float
    window: int
    lost: bool
    """The reply to this request is lost (its messages are decided all the same)."""


class SandboxCore:
    """The sandbox provider's state machine: quota, faults, dedupe and counts.

    ``now`` gives epoch seconds (inject a fake in tests); ``seed`` makes the fault
    draws, latencies and receipts reproducible.
    """

    def __init__(
        self, config: SandboxConfig | None = None, *, now: Callable[[], float], seed: int = 0
    ) -> None:
        self._now = now
        self._seed = seed
        self.configure(config or SandboxConfig())
        self.reset()

    @property
    def config(self) -> SandboxConfig:
        return self._config

    def configure(self, config: SandboxConfig) -> None:
        """Replace the behaviour; counts and accepted keys are kept."""
        self._config = config
        self._reject = _AddressMatcher(config.reject_addresses)
        self._fail = _AddressMatcher(config.fail_addresses)
        self._stopped = _AddressMatcher(config.stopped_addresses)

    def reset(self) -> None:
        """Forget every count and accepted key, and restart the random streams."""
        self._faults = random.Random(self._seed)
        self._latency_rng = random.Random(self._seed + 1)
        self._receipt_rng = random.Random(self._seed + 2)
        self._seq = 0
        self._channels: dict[str, ChannelCounts] = {}
        self._total = Series()
        self._total_accepted = Series()
        self._unknown_channel = 0

    def _channel(self, name: str) -> ChannelCounts:
        state = self._channels.get(name)
        if state is None:
            state = self._channels[name] = ChannelCounts()
        return state

    def handle(self, channel: str, key: str | None, to: str | None, *,
               problem: str | None = None) -> SandboxAnswer:
        """Decide one send request; ``problem`` is a body error the caller already found."""
        gate = self._gate(channel)
        if isinstance(gate, SandboxAnswer):
            return gate
        return self._decide(gate, channel, key, to, problem)

    def handle_request(self, channel: str,
                       messages: Sequence[tuple[str | None, str | None, str | None]]
                       ) -> list[SandboxAnswer]:
        """Decide one request that carries many messages, each ``(key, to, problem)``, as
        a provider whose quota counts requests does (Resend's batch): the quota, an
        injected 429, 5xx or timeout are the whole request's (the same answer for each
        message, none accepted), a lost answer loses the whole reply (every message
        decided, the accepted ones staying accepted); each message is then refused or
        accepted on its own."""
        gate = self._gate(channel)
        if isinstance(gate, SandboxAnswer):
            return [gate] * len(messages)
        return [self._decide(gate, channel, key, to, problem) for key, to, problem in messages]

    def _gate(self, channel: str) -> SandboxAnswer | _Gate:
        """What is about a whole request: an unknown channel, the quota, the injected
        faults; the request's gate when it passes them."""
        now = self._now()
        self._seq += 1
        request_id = f"req_{self._seq:09d}"
        config = self._config
        quota = config.quotas.get(channel)
        if quota is None:
            self._unknown_channel += 1
            return SandboxAnswer(kind=AnswerKind.UNKNOWN_CHANNEL, status=404,
                                 request_id=request_id, error=f"unknown channel {channel!r}")
        state = self._channel(channel)
        window = int(now)
        state.counts["requests"] += 1
        count = state.windows.add(window, quota)
        self._total.add(window)
        spec = config.latency.get(channel)
        latency = spec.sample_s(self._latency_rng) if spec is not None else 0.0

        if count > quota:
            return self._refuse(state, AnswerKind.REFUSED_QUOTA, 429, request_id, latency,
                                retry_after=str(math.ceil(window + 1 - now)),
                                error=f"quota of {quota} requests per second exceeded")
        draw = self._faults.random()
        edge = config.rate_limit
        if draw < edge:
            return self._refuse(state, AnswerKind.REFUSED_INJECTED, 429, request_id, latency,
                                retry_after=self._injected_retry_after(now),
                                error="rate limited")
        edge += config.server_error
        if draw < edge:
            return self._refuse(state, AnswerKind.SERVER_ERROR, 503, request_id, latency,
                                error="service unavailable")
        edge += config.timeout
        if draw < edge:
            return self._refuse(state, AnswerKind.TIMEOUT, None, request_id, 0.0)
        return _Gate(state=state, request_id=request_id, latency_s=latency, window=window,
                     lost=draw < edge + config.lost_response)

    def _decide(self, gate: _Gate, channel: str, key: str | None, to: str | None,
                problem: str | None) -> SandboxAnswer:
        """One message of a request that passed its gate: refused or accepted."""
        state, request_id, latency = gate.state, gate.request_id, gate.latency_s
        if not key:
            problem = "Idempotency-Key header is required"
        elif problem is None and to is None:
            problem = "to: required"
        if problem is not None or not key or to is None:
            return self._refuse(state, AnswerKind.BAD_REQUEST, 400, request_id, latency,
                                error=problem)
        reason = address_problem(channel, to)
        if reason is None and self._reject(to):
            reason = "address rejected: recipient does not accept messages"
        if reason is not None:
            return self._refuse(state, AnswerKind.REJECTED, 422, request_id, latency,
                                error=reason)
        if self._stopped(to):
            return self._refuse(state, AnswerKind.REJECTED, 422, request_id, latency,
                                error="recipient unsubscribed: replied STOP", stopped=True)
        if self._fail(to):
            return self._refuse(state, AnswerKind.SERVER_ERROR, 503, request_id, latency,
                                error="service unavailable for this recipient")

        receipt = state.receipts.get(key) if self._config.dedupe else None
        if receipt is not None:
            state.counts["deduplicated"] += 1
            kind, status = AnswerKind.DEDUPLICATED, 200
        else:
            receipt = self._accept(state, key, gate.window)
            kind, status = AnswerKind.ACCEPTED, 202
        if gate.lost:
            state.counts["lost_responses"] += 1
            return SandboxAnswer(kind=AnswerKind.LOST_RESPONSE, status=None,
                                 request_id=request_id, latency_s=latency, receipt=receipt)
        return SandboxAnswer(kind=kind, status=status, request_id=request_id,
                             latency_s=latency, receipt=receipt)

    def _refuse(self, state: ChannelCounts, kind: AnswerKind, status: int | None,
                request_id: str,
                latency: float, *, retry_after: str | None = None,
                error: str | None = None, stopped: bool = False) -> SandboxAnswer:
        state.counts[_KIND_COUNTER[kind]] += 1
        return SandboxAnswer(kind=kind, status=status, request_id=request_id, latency_s=latency,
                             retry_after=retry_after, error=error, stopped=stopped)

    def _accept(self, state: ChannelCounts, key: str, window: int) -> str:
        receipt = f"sbx_{self._receipt_rng.getrandbits(64):016x}"
        state.counts["accepted"] += 1
        state.accepted_series.add(window)
        self._total_accepted.add(window)
        if key in state.receipts:
            # Only reachable with dedupe off: the provider sent this message again.
            # Lookups keep answering with the first receipt.
            state.counts["accepted_twice"] += 1
            state.times_accepted[key] = state.times_accepted.get(key, 1) + 1
        else:
            state.receipts[key] = receipt
        return receipt

    def _injected_retry_after(self, now: float) -> str | None:
        config = self._config
        pick = self._faults.random()
        if pick < config.retry_after_missing_share:
            return None
        if pick < config.retry_after_missing_share + config.retry_after_date_share:
            # An HTTP-date has whole seconds: round up so the client never comes back early.
            return formatdate(math.ceil(now + config.retry_after_s), usegmt=True)
        return str(math.ceil(config.retry_after_s))

    def lookup(self, key: str, channel: str | None = None) -> tuple[str, str] | None:
        """``(channel, receipt)`` under which ``key`` was first accepted, or None."""
        names = [channel] if channel is not None else list(self._channels)
        for name in names:
            state = self._channels.get(name)
            receipt = state.receipts.get(key) if state is not None else None
            if receipt is not None:
                return name, receipt
        return None

    def stats(self) -> dict[str, Any]:
        """Every count, per channel and in total, as JSON-able data.

        Window keys are epoch seconds (``int``; strings once through JSON).
        """
        quotas = self._config.quotas
        names = list(dict.fromkeys([*quotas, *self._channels]))
        channels = {
            name: self._channel(name).stats(quotas.get(name)) for name in names
        }
        total: dict[str, Any] = {c: sum(ch[c] for ch in channels.values()) for c in COUNTERS}
        total.update(
            accepted_keys=sum(ch["accepted_keys"] for ch in channels.values()),
            keys_accepted_twice=sum(ch["keys_accepted_twice"] for ch in channels.values()),
            quota_violations=sum(ch["quota_violations"] for ch in channels.values()),
            max_rate_1s=self._total.max_rate,
            requests_per_window=dict(self._total.counts),
            accepted_per_window=dict(self._total_accepted.counts),
            unknown_channel=self._unknown_channel,
        )
        return {"now": self._now(), "config": self._config.to_dict(),
                "channels": channels, "total": total}


#: Names that moved to ``tidings.sandbox.counts`` (2026-12-07), still read from here with
#: a DeprecationWarning.
_MOVED = {"SERIES_WINDOWS": "tidings.sandbox.counts", "TWICE_SAMPLE": "tidings.sandbox.counts"}


def __getattr__(name: str) -> object:
    return moved_attribute(__name__, name, _MOVED)
