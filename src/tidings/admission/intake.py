"""One-off intents: ``notify`` and ``cancel``.

A notify repeated under its key is answered with the keys it made (``Notified``: which
were created now, which existed), and another request under a key already used is
refused (``KeyConflict``), in the transaction that writes the batch
(``tidings.core.repeats``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tidings.core.cron import check_instant
from tidings.core.errors import ConfigurationError, InvalidInput, unknown_name
from tidings.core.keys import (
    MAX_KEY_LENGTH,
    check_json_text,
    check_text,
    is_key_part,
    notify_key,
    validate_key,
)
from tidings.core.lanes import DEFAULT_LANES, NO_LANES, ChannelLanes, lane_number
from tidings.core.model import IntentDraft, Recipient, encode_data
from tidings.core.repeats import AdmitGuard, Asked, Notified, guard_for, notified
from tidings.core.states import State
from tidings.stores.base import JoinTarget, Ledger
from tidings.transports.base import Transport

#: What a join of a caller's transaction writes, in order: drafts, and whether they are
#: born enqueued (``join_groups``).
JoinGroups = Sequence[tuple[Sequence[IntentDraft], bool]]


@runtime_checkable
class JoinableStore(Protocol):
    """A store that can admit intents inside a transaction its caller owns, on the
    caller's async connection, or on its sync one in the caller's thread (checked
    against the store's own database, ``join_target``, read beforehand)."""

    async def intent_admit_in(self, connection: object, groups: JoinGroups, *,
                              now: float, guard: AdmitGuard | None = None) -> list[str]: ...

    def intent_admit_in_sync(self, connection: object, groups: JoinGroups, *, now: float,
                             target: JoinTarget, guard: AdmitGuard | None = None
                             ) -> list[str]: ...

    async def join_target(self) -> JoinTarget: ...


def joinable(store: object) -> JoinableStore:
    """``store``, if it can join a caller's transaction; else a ConfigurationError
    naming ``connection``."""
    if not isinstance(store, JoinableStore):
        raise ConfigurationError(
            "connection", "joining the caller's transaction needs the PostgreSQL store "
            "(store = \"postgresql://…\")")
    return store


def check_caller_connection(connection: object) -> None:
    """Refuse, naming ``connection``, what is no ``psycopg.AsyncConnection``: the async
    door joins a caller's transaction on nothing else (a sync ``psycopg.Connection``
    joins through ``tidings.Client``)."""
    try:
        import psycopg
    except ImportError:
        raise InvalidInput("connection", "joining a caller's transaction needs psycopg 3: "
                           "pip install 'tidings[postgres]'") from None
    if isinstance(connection, psycopg.AsyncConnection):
        return
    hint = (" (a sync psycopg.Connection joins through tidings.Client.notify)"
            if isinstance(connection, psycopg.Connection) else "")
    raise InvalidInput("connection", "must be a psycopg.AsyncConnection (psycopg 3) to the "
                       f"store's database, not {type(connection).__name__}{hint}")


def recipient_of(value: Recipient | Mapping[str, Any]) -> Recipient:
    """Accept a Recipient or a mapping with ``id`` and ``email``/``phone``."""
    if isinstance(value, Recipient):
        return value
    if not isinstance(value, Mapping):
        raise InvalidInput("recipient", "must be a Recipient or a mapping with an 'id'")
    rid = value.get("id")
    if rid is None or rid == "":
        raise InvalidInput("recipient.id", "is missing")
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        raise InvalidInput("recipient.id", f"must be a string or an integer, not "
                                           f"{type(rid).__name__}")
    extra = {k: v for k, v in value.items() if k not in {"id", "email", "phone", "active"}}
    active = value.get("active", True)
    if not isinstance(active, bool):
        raise InvalidInput("recipient.active", f"must be true or false, not "
                                               f"{type(active).__name__}")
    return Recipient(id=str(rid), email=value.get("email"), phone=value.get("phone"),
                     active=active, data=extra)


#: Said after "declared: none": a store URL alone declares no channel.
NO_CHANNELS = (" (channels are declared in the settings, [channels.<name>] in tidings.toml; "
               "a store URL alone declares none)")


@dataclass(frozen=True, kw_only=True)
class NotifyRequest:
    """One ``notify``: an intent per channel, keyed ``KEY:CHANNEL``."""

    key: str
    recipient: Recipient | Mapping[str, Any]
    channels: Sequence[str]
    template: str
    data: Mapping[str, Any] | None = None
    due_at: float | None = None
    expires_at: float | None = None
    lane: str | None = None
    """The lane of each channel's queue the intents go to (``tidings.core.lanes``);
    default: ``transactional``, or the channel's first lane."""
    group: str | None = None
    """The group the intents belong to on channels that share their lanes among groups
    (``tidings.core.fair``): a tenant, a sender domain."""


#: Why no worker could send a draft, as ``(field, message)``, or None: the send-time
#: checks (template, address) a caller is refused by at once.
Sendable = Callable[[IntentDraft], "tuple[str, str] | None"]


def drafts_for(request: NotifyRequest, *, known_channels: Mapping[str, str], now: float,
               where: str = "", sendable: Sendable | None = None,
               lanes: ChannelLanes = NO_LANES) -> list[IntentDraft]:
    """Validate a request and turn it into drafts; errors name the field (with ``where``).
    ``lanes``: each channel's lane names where they are not ``DEFAULT_LANES``."""
    def bad(field: str, message: str) -> InvalidInput:
        return InvalidInput(f"{where}{field}", message)

    try:
        validate_key(request.key)
        who = recipient_of(request.recipient)
        if not who.active:
            # Said, not skipped in silence: a campaign's audience skips inactive members,
            # but a notify names its one recipient, and its caller expects a send.
            raise InvalidInput("recipient.active", "is false: an inactive recipient is sent "
                                                   "nothing; leave it out of notify")
        # What a store holds (PostgreSQL refuses NUL, no store a lone surrogate).
        check_text(who.id, "recipient.id")
        for name, address in (("email", who.email), ("phone", who.phone)):
            if address is not None:
                check_text(address, f"recipient.{name}")
        check_text(request.template, "template")
        due = now if request.due_at is None else check_instant(request.due_at, "due_at")
        expires = (None if request.expires_at is None
                   else check_instant(request.expires_at, "expires_at"))
        if request.data is not None and not isinstance(request.data, Mapping):
            raise InvalidInput("data", "must be a mapping of names to values (a JSON "
                                       f"object), not {type(request.data).__name__}")
        check_json_text(request.data, "data")
        if not isinstance(who.data, Mapping):
            raise InvalidInput("recipient.data", "must be a mapping of names to values, "
                                                 f"not {type(who.data).__name__}")
        check_json_text(who.data, "recipient")
    except InvalidInput as exc:
        raise bad(exc.field, exc.message) from None
    if isinstance(request.channels, str) or not isinstance(request.channels, Sequence):
        raise bad("channels", "must be a list of channel names")
    if not request.channels:
        raise bad("channels", "must name at least one channel")
    for index, channel in enumerate(request.channels):
        if not isinstance(channel, str):
            raise bad(f"channels[{index}]", f"must be a channel name, not "
                                            f"{type(channel).__name__}")
        if channel not in known_channels:
            raise bad(f"channels[{index}]",
                      unknown_name("channel", channel, sorted(known_channels))
                      + ("" if known_channels else NO_CHANNELS))
        if channel in request.channels[:index]:
            # One intent per channel: a repeat would be the same key twice in the answer.
            first = list(request.channels).index(channel)
            raise bad(f"channels[{index}]", f"repeats channel {channel!r} "
                                            f"(channels[{first}]); name each channel once")
        limit = MAX_KEY_LENGTH - len(notify_key("", channel))
        if isinstance(request.key, str) and len(request.key) > limit:
            raise bad("key", f"is {len(request.key)} characters; with ':{channel}' appended "
                             f"the limit is {limit}")
    if not request.template:
        raise bad("template", "must not be empty")
    if request.group is not None and not is_key_part(request.group):
        raise bad("group", "must be a non-empty name without '/', whitespace or control "
                           "characters")
    if expires is not None and expires <= due:
        raise bad("expires_at", "must be after due_at")
    if expires is not None and expires <= now:
        raise bad("expires_at", "has passed already: every intent would expire unsent")
    try:
        # The recipient's own fields (a Recipient's data, a mapping's other keys) are
        # template data too, as an audience's columns are; the request's data wins.
        body = encode_data({**who.data, **(request.data or {})})
    except InvalidInput as exc:
        raise bad(exc.field, exc.message) from None
    drafts = []
    for channel in request.channels:
        kind = known_channels[channel]
        address = who.address(kind)
        if not address:
            field = "recipient.phone" if kind == "sms" else "recipient.email"
            raise bad(field, f"is missing; channel {channel!r} needs it")
        try:
            lane = lane_number(lanes.get(channel, DEFAULT_LANES), request.lane, bulk=False)
        except ValueError as exc:
            raise bad("lane", f"{exc} (channel {channel!r})") from None
        draft = IntentDraft(
            key=validate_key(notify_key(request.key, channel)), channel=channel,
            recipient_id=who.id, address=address, template=request.template, data=body,
            due_at=due, expires_at=expires, lane=lane, group=lanes.group(channel, request.group))
        problem = None if sendable is None else sendable(draft)
        if problem is not None:
            raise bad(*problem)
        drafts.append(draft)
    return drafts


def asked_of(request: NotifyRequest, *, known_channels: Mapping[str, str], now: float,
             where: str = "", sendable: Sendable | None = None,
             lanes: ChannelLanes = NO_LANES) -> Asked:
    """A request validated and drafted (``drafts_for``), with what a repeat of it is
    compared on (``repeats.Asked``)."""
    drafts = drafts_for(request, known_channels=known_channels, now=now, where=where,
                        sendable=sendable, lanes=lanes)
    return Asked(key=request.key, drafts=tuple(drafts), due_given=request.due_at is not None,
                 channel_keys={ch: notify_key(request.key, ch) for ch in known_channels},
                 address_fields={ch: "recipient.phone" if kind == "sms" else "recipient.email"
                                 for ch, kind in known_channels.items()},
                 where=where)


def asked_of_many(requests: Iterable[NotifyRequest], *, known_channels: Mapping[str, str],
                  now: float, sendable: Sendable | None = None,
                  lanes: ChannelLanes = NO_LANES) -> list[Asked]:
    """Every request validated and drafted (``asked_of``), before anything is written:
    one bad request admits none. Errors name ``requests[i].field`` (one: ``field``)."""
    if isinstance(requests, Mapping | str | bytes) or not isinstance(requests, Iterable):
        raise InvalidInput("requests", "must be a list of NotifyRequest, not "
                                       f"{type(requests).__name__}")
    requests = list(requests)  # a generator is read once
    many = len(requests) > 1
    for i, r in enumerate(requests):
        if not isinstance(r, NotifyRequest):
            raise InvalidInput(f"requests[{i}]" if many else "request",
                               f"must be a NotifyRequest, not {type(r).__name__}")
    return [asked_of(r, known_channels=known_channels, now=now,
                     where=f"requests[{i}]." if many else "", sendable=sendable, lanes=lanes)
            for i, r in enumerate(requests)]


async def notify_many(
    store: Ledger,
    transport: Transport,
    requests: Iterable[NotifyRequest],
    *,
    known_channels: Mapping[str, str],
    now: float,
    horizon_s: float = 60.0,
    lease_s: float = 30.0,
    enqueue_in_store: bool = False,
    connection: object | None = None,
    sendable: Sendable | None = None,
    lanes: ChannelLanes = NO_LANES,
) -> list[Notified]:
    """Create the intents of many requests at once; a repeated request is a no-op.

    Every request is validated before anything is written, so one bad request
    admits none. Intents due within ``horizon_s`` are published now; later ones stay
    in the store until the relay's window reaches them. Returns each request's keys
    (``Notified``: created now, or existing from the same request before). A request
    under a key already used for another one raises ``KeyConflict`` and nothing of the
    batch is written.

    With ``connection`` (the caller's database connection; PostgreSQL store only) the
    intents are written inside the caller's transaction: they exist if and only if it
    commits. Nothing is published outside it: with the store's own queue the messages
    are written in the same transaction; with another transport the relay publishes
    them once the caller has committed.

    ``sendable``: the send-time checks (``Sendable``), run on every draft first.
    ``lanes``: each channel's lane names where they are not ``DEFAULT_LANES``.
    """
    asked = asked_of_many(requests, known_channels=known_channels, now=now,
                          sendable=sendable, lanes=lanes)
    drafts = [d for one in asked for d in one.drafts]
    created = await admit_drafts(store, transport, drafts, now=now, horizon_s=horizon_s,
                                 lease_s=lease_s, enqueue_in_store=enqueue_in_store,
                                 connection=connection, guard=guard_for(asked, now=now))
    return notified(asked, created)


async def admit_drafts(
    store: Ledger,
    transport: Transport,
    drafts: Sequence[IntentDraft],
    *,
    now: float,
    horizon_s: float = 60.0,
    lease_s: float = 30.0,
    enqueue_in_store: bool = False,
    connection: object | None = None,
    guard: AdmitGuard | None = None,
) -> list[str]:
    """Write validated drafts (see ``notify_many``); a key already there is left as it is.
    Returns the keys created now. With ``guard``, every draft is written in one
    transaction, which the guard checks (``repeats.AdmitGuard``) before it commits."""
    if connection is not None:
        return await joinable(store).intent_admit_in(
            connection, join_groups(drafts, now=now, horizon_s=horizon_s,
                                    enqueue_in_store=enqueue_in_store), now=now, guard=guard)
    if guard is not None:
        return await store.intent_admit_groups(
            join_groups(drafts, now=now, horizon_s=horizon_s,
                        enqueue_in_store=enqueue_in_store), now=now, guard=guard)
    soon = [d for d in drafts if d.due_at <= now + horizon_s]
    later = [d for d in drafts if d.due_at > now + horizon_s]
    created: list[str] = []
    if later:
        created += await store.intent_admit(later, now=now)
    if soon and enqueue_in_store:
        created += await store.intent_admit(soon, now=now, enqueue=True)
    elif soon:
        # The outbox: written selected, published by the relay; never waits for a broker.
        created += await store.intent_admit(soon, now=now)
    return created


def join_groups(drafts: Sequence[IntentDraft], *, now: float, horizon_s: float,
                enqueue_in_store: bool) -> JoinGroups:
    """What a join writes, as ``admit_drafts`` does without one: drafts due after
    ``horizon_s`` selected (the relay's window reaches them); those due sooner enqueued
    on the store's own queue, else selected for the outbox relay to publish once the
    caller has committed."""
    later = [d for d in drafts if d.due_at > now + horizon_s]
    soon = [d for d in drafts if d.due_at <= now + horizon_s]
    return [(later, False), (soon, enqueue_in_store)]


def notify_many_joined(store: object, requests: Iterable[NotifyRequest], *, connection: object,
                       target: JoinTarget, known_channels: Mapping[str, str], now: float,
                       horizon_s: float = 60.0, enqueue_in_store: bool = False,
                       sendable: Sendable | None = None,
                       lanes: ChannelLanes = NO_LANES) -> list[Notified]:
    """``notify_many`` inside the caller's transaction on its sync ``connection``, all in
    the calling thread: the same validation, drafts and repeat check, then the store's
    sync join (``target``: the store's ``join_target``). Returns each request's keys."""
    joined = joinable(store)
    asked = asked_of_many(requests, known_channels=known_channels, now=now,
                          sendable=sendable, lanes=lanes)
    drafts = [d for one in asked for d in one.drafts]
    created = joined.intent_admit_in_sync(
        connection, join_groups(drafts, now=now, horizon_s=horizon_s,
                                enqueue_in_store=enqueue_in_store), now=now, target=target,
        guard=guard_for(asked, now=now))
    return notified(asked, created)


async def cancel(store: Ledger, key: str, *, channels: Collection[str], now: float,
                 reason: str = "cancelled by caller") -> dict[str, State | None]:
    """Cancel an intent by its full key, or every channel of a ``notify`` key."""
    validate_key(key)
    state = await store.intent_request_cancel(key, now=now, reason=reason)
    if state is not None:
        return {key: state}
    found: dict[str, State | None] = {}
    for channel in sorted(channels):
        full = notify_key(key, channel)
        result = await store.intent_request_cancel(full, now=now, reason=reason)
        if result is not None:
            found[full] = result
    if not found:
        raise InvalidInput("key", f"no intent has key {key!r}")
    return found
