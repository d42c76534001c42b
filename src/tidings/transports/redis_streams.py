"""The Transport port on Redis Streams (``transport = "redis://host:6379/0"``).

Each channel queue is a stream per lane (``tidings.core.lanes``), each read through
one consumer group; the keys of a queue share a hash tag (``<prefix>:{<queue>}:…``)
and every operation is one Lua script (``streams_lua/``), so a crash never leaves a
message half moved:

- **lanes**: lane 0 keeps the keys a queue had before lanes (``…:stream``, ``…:vis``,
  ``…:delayed``, ``…:ages``), so what a deployment held then is received as lane 0's;
  lanes 1 to 3 have the same four with the lane's number after them (``…:stream:1``),
  made on a lane's first message. A message keeps its lane through nacks, delays, dead
  letters (a field of the dead entry) and redrives. A receive walks the lanes it is
  asked in their order, in one script call, until it has ``max_messages``; every
  lane's expired visibility timeouts and due delayed messages are its to take back.
- **groups** (``tidings.core.fair``): a message naming a group is kept in a stream of
  its lane and group (``…:gstream:<lane>:<group>``, its timeouts in ``…:gvis:…``); one
  naming none stays in its lane's stream. Each lane has a sorted set of the groups
  whose stream holds entries (``…:groups``, ``…:groups:<n>``), which a group joins with
  its stream's first entry and leaves (its keys deleted) with its last, in the script
  that adds or removes it: never missing while it holds a message. A fair receive
  lists a lane's groups and takes each one's share (``Passes``), a script call a
  pass; without ``fair`` a lane's own stream comes first, then its groups in turn.
  Receipts name the group (``<entry id>@<lane>#<group>``); dead letters keep it.

- **ready and in flight**: entries of the stream. A receive reads new entries for the
  group (``XREADGROUP``) and takes back, with ``XCLAIM``, pending entries whose
  visibility timeout passed. The timeout is a score in a sorted set beside the pending
  entries list, in the caller's clock: the port takes ``now`` from the caller (a
  simulated clock, the tests' fixed times), which Redis's own idle times cannot follow.
- **receive count and fencing**: the group's delivery counter of the entry plus the
  receives of earlier entries of the same message (a nack puts a new entry back and
  carries its count). A receipt is ``"<entry ref>/<delivery count>/<message uid>"``,
  the ref being the entry id in lane 0 and ``<entry id>@<lane>`` in the others: it
  holds no connection state, so ack, extend and nack work from any connection after a
  reconnect; a receipt whose entry was claimed again since is stale for nack, extend
  and dead-letter (ignored), while ack removes the message by its uid wherever it is
  (as the embedded queue's ack deletes by row id: whoever acks recorded the outcome).
- **delayed** (a delayed publish, a nack with a delay): a sorted set of message uids
  by due time and a hash of the parked messages; a receive moves the due ones into
  the stream.
- **order**: a receive hands out messages whose visibility timeout passed first
  (oldest enqueued first), then the stream's new entries in the order they joined it.
  A nacked message joins the tail when it falls due (as a broker's requeue does),
  where the embedded queue keeps its first place: fresh publishes come oldest first
  on both.
- **failures**: a hash by message uid, bumped by ``nack(failed=True)``, dropped when
  the message is acked or dead-lettered; a redriven message starts afresh.
- **dead letters**: a stream of their own, each with its reason. An entry tidings did
  not write (a foreign ``XADD`` into the stream: a field missing, a count or time that
  is no number) is dead-lettered by the receive that meets it, with what is wrong, and
  never handed out: it has no message to settle, and would fail every receive after.
- **contains**: a hash of message id -> copies on the queue; **oldest age**: a sorted
  set of message uids by enqueued time.

``wait`` blocks on the lanes' streams (``XREAD BLOCK`` from their last entries) and on
``…:bell``, which a publish into a group's stream adds to, so a publish, a redrive or an
immediate nack from any process on any machine wakes it: ``notifies``.
A dropped connection (a Redis restart) is retried for ``reconnect_s`` before it
becomes a ``TransportError``; a script lost with the server's memory is loaded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.commands.core import AsyncScript

from tidings.config.transport_urls import redact_url, split_prefix
from tidings.core.errors import TransportError
from tidings.core.fair import FairShare, Passes
from tidings.core.lanes import EVERY_LANE, MAX_LANES
from tidings.core.model import (
    MAX_GROUPS_SHOWN,
    DeadLetter,
    GroupDepth,
    LaneDepth,
    OutgoingMessage,
    QueueDepth,
    Received,
)

log = logging.getLogger("tidings.transports.redis")

T = TypeVar("T")

#: Messages per publish script call (a relay page is split into calls this size).
PUBLISH_CHUNK = 1000
#: Delayed messages a receive moves into the stream at most.
MOVES_PER_RECEIVE = 1000
#: How long a dropped connection is retried before an operation fails.
RECONNECT_S = 30.0
#: How often a broker that stays unreachable is said so in the log.
SAY_EVERY_S = 10.0
#: How long one reply may take before the connection counts as lost (and is retried).
SOCKET_TIMEOUT_S = 20.0
#: The longest single block of ``wait``: well inside the socket timeout.
MAX_BLOCK_S = 5.0

#: A queue's keys, in the order ``streams_lua/common.lua`` names them: the ten a queue
#: had before lanes (lane 0's among them), then each of lanes 1 to 3's stream, vis,
#: delayed and ages, in that order, then each lane's set of groups (lane 0's
#: ``…:groups``, the others' ``…:groups:<n>``) and the bell.
_PARTS = ("stream", "vis", "delayed", "parked", "failures", "ids", "ages", "dead", "seq",
          "where")
_LANE_PARTS = ("stream", "vis", "delayed", "ages")
#: A lane's number as a publish argument (written once, not per message).
_LANE_ARG = tuple(b"$1\r\n%d\r\n" % lane for lane in range(MAX_LANES))
#: A lane's number as ``receive.lua`` answers it.
_LANE_READ = {b"%d" % lane: lane for lane in range(MAX_LANES)}
#: No group, as a publish argument.
_NO_GROUP_ARG = b"$0\r\n\r\n"

_SCRIPTS = ("publish", "receive", "take", "groups", "ack", "nack", "extend", "dead_letter",
            "redrive", "depth")
_RETRIED = (redis_errors.ConnectionError, redis_errors.TimeoutError,
            redis_errors.BusyLoadingError, OSError)


def _load_scripts() -> dict[str, str]:
    """Each script with the shared prelude (``common.lua``) before it."""
    folder = resources.files("tidings.transports").joinpath("streams_lua")
    common = folder.joinpath("common.lua").read_text(encoding="utf-8")
    return {name: common + "\n" + folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
            for name in _SCRIPTS}


def _text(value: bytes | str) -> str:
    """A field as text; a foreign publisher's bytes that are not UTF-8 read replaced (a
    message id, a reason) rather than fail every receive or listing after them."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _body(value: bytes) -> str | bytes:
    """Text, or the raw bytes of a body that is not UTF-8 (the worker dead-letters it)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _num(value: float) -> str:
    """A float as Redis and Lua read it back exactly."""
    return repr(float(value))


def _read_float(value: Any, default: float) -> float:
    """A stored number as a finite float, else ``default``: what a foreign writer put
    in a field (``0x10``, ``nan``) must not fail every receive, listing or status."""
    try:
        number = float(_text(value))
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _read_int(value: Any, default: int) -> int:
    """A stored count as an int (``1e+20`` as Lua prints a large one), else ``default``."""
    number = _read_float(value, float(default))
    return int(min(number, 2.0**31 - 1))


def _bulk(value: bytes) -> bytes:
    """One argument of a command, as RESP writes it."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


def parse_receipt(receipt: str) -> tuple[str, str, str] | None:
    """``(entry ref, delivery count, message uid)``, or None for a receipt this
    transport never made (the ref: ``<entry id>`` in lane 0, ``<entry id>@<lane>``, and
    ``<entry id>@<lane>#<group>`` in a group's stream, the group verbatim: it may hold a
    ``/``, so the count and uid are read from the right)."""
    parts = receipt.rsplit("/", 2)
    if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    eid, at, rest = parts[0].partition("@")
    lane, hashed, group = rest.partition("#")
    if not eid.replace("-", "").isdigit() or eid.count("-") != 1:
        return None
    if at and not (lane.isdigit() and 0 <= int(lane) < MAX_LANES
                   and (int(lane) > 0 or (hashed and group))):
        return None
    if hashed and not group:
        return None
    return parts[0], parts[1], parts[2]


def group_of(ref: str) -> str:
    """The group an entry ref names (``''``: the lane's own stream)."""
    return ref.partition("@")[2].partition("#")[2]


def _lane_rows(state: list[Any]) -> list[list[Any]]:
    """The per-lane part of ``depth.lua``'s answer: ``[last entry, ready, total,
    oldest]`` for each lane from 0."""
    return [state[6 + 4 * lane:10 + 4 * lane] for lane in range(MAX_LANES)]


class RedisStreamsTransport:
    """The ``Transport`` port on Redis Streams (see the module docstring)."""

    name = "redis"
    notifies = True

    def __init__(self, client: aioredis.Redis, *, prefix: str, safe_url: str,
                 reconnect_s: float = RECONNECT_S) -> None:
        self.client = client
        self.prefix = prefix
        self.safe_url = safe_url
        self.reconnect_s = reconnect_s
        self._run_id: str | None = None  # the server's, to tell a restart after an outage
        self._keys: dict[str, list[str]] = {}
        # Where a receive without fair share last took grouped messages (see receive).
        self._leftover = FairShare()
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(source) for name, source in _load_scripts().items()}

    @classmethod
    async def open(cls, url: str, *, reconnect_s: float = RECONNECT_S) -> RedisStreamsTransport:
        """A transport on ``redis://…`` (``?prefix=`` names its keys), its server
        answering (a TransportError naming the URL without its password otherwise)."""
        plain, prefix = split_prefix(url)
        safe = redact_url(url)
        try:
            client = aioredis.Redis.from_url(plain, socket_connect_timeout=5,
                                             socket_timeout=SOCKET_TIMEOUT_S,
                                             health_check_interval=15)
        except ValueError as exc:
            raise TransportError(f"{safe}: {exc}") from None
        transport = cls(client, prefix=prefix, safe_url=safe, reconnect_s=reconnect_s)
        try:
            # A server not there at start is more likely a wrong URL than an outage: the
            # first contact is given RECONNECT_S at most, however patient the service.
            await transport._call(lambda: client.ping(),
                                  patience_s=min(reconnect_s, RECONNECT_S))
            with contextlib.suppress(redis_errors.RedisError):  # a server may refuse INFO
                transport._run_id = str((await client.info("server")).get("run_id"))
        except BaseException:
            await client.aclose()
            raise
        return transport

    # ------------------------------------------------------------------ keys and calls

    def keys(self, queue: str) -> list[str]:
        """The keys of ``queue``, in the order ``streams_lua/common.lua`` names them
        (``_PARTS``, then lanes 1 to 3's); remembered, as every call names them all."""
        found = self._keys.get(queue)
        if found is None:
            base = f"{self.prefix}:{{{queue}}}"
            found = [f"{base}:{part}" for part in _PARTS] + [
                f"{base}:{part}:{lane}" for part in _LANE_PARTS for lane in range(1, MAX_LANES)
            ] + [f"{base}:groups", *(f"{base}:groups:{lane}" for lane in range(1, MAX_LANES)),
                 f"{base}:bell"]
            self._keys[queue] = found
        return found

    def streams(self, queue: str) -> list[str]:
        """The stream of each lane of ``queue``, lane 0's first."""
        keys = self.keys(queue)
        return [keys[0], *keys[len(_PARTS):len(_PARTS) + MAX_LANES - 1]]

    async def _call(self, fn: Callable[[], Awaitable[T]], *,
                    patience_s: float | None = None) -> T:
        """``fn()``, retried while the server cannot be reached (for ``reconnect_s``, or
        ``patience_s``); a refused password is no outage and is not retried."""
        patience = self.reconnect_s if patience_s is None else patience_s
        started = time.monotonic()
        deadline = started + patience
        pause, say_at, failed = 0.05, started, False
        while True:
            try:
                result = await fn()
            except (redis_errors.AuthenticationError, redis_errors.AuthorizationError) as exc:
                raise TransportError(f"{self.safe_url}: {exc}") from exc
            except _RETRIED as exc:
                failed = True
                now = time.monotonic()
                if now + pause > deadline:
                    raise TransportError(f"{self.safe_url}: not reachable, tried for "
                                         f"{patience:g} s: {exc}") from exc
                if now >= say_at:  # at once, then every SAY_EVERY_S while it lasts
                    say_at = now + SAY_EVERY_S
                    log.warning("broker not reachable; trying again", extra={
                        "broker": self.safe_url, "error": str(exc),
                        "for_s": round(now - started, 1)})
            except redis_errors.RedisError as exc:
                raise TransportError(f"{self.safe_url}: {exc}") from exc
            else:
                if failed:
                    await self._after_outage(time.monotonic() - started)
                return result
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)

    async def _after_outage(self, lasted_s: float) -> None:
        """Say the server answers again, and whether it restarted meanwhile (a new run
        id): one without persistence lost the messages it held, and until the
        reconciler republishes them (``reconciler.lost_after_s``) workers see none."""
        try:
            run_id = str((await self.client.info("server")).get("run_id"))
        except (redis_errors.RedisError, OSError):
            return
        restarted = self._run_id is not None and run_id != self._run_id
        self._run_id = run_id
        log.warning("broker reachable again" + (
            "; it restarted: if it kept no data, the reconciler republishes what it held "
            "within reconciler.lost_after_s" if restarted else ""),
            extra={"broker": self.safe_url, "lasted_s": round(lasted_s, 1),
                   "restarted": restarted})

    async def _script(self, name: str, queue: str, args: Sequence[str | float | int]) -> Any:
        script = self._scripts[name]
        keys = self.keys(queue)
        return await self._call(lambda: script(keys=keys, args=list(args)))

    async def _script_packed(self, name: str, queue: str, argc: int, argv: bytes) -> Any:
        """The script ``name`` with its ``argc`` arguments already written as RESP
        (``argv``): a relay page is thousands of arguments, which redis-py's command
        packer encodes one by one in Python (2.7 us of CPU a published message, against
        0.4 us written here). Sent and answered on a connection of the client's pool; a
        script the server lost (a restart) is loaded again, and a lost connection is
        retried as every call is (``_call``)."""
        script = self._scripts[name]
        keys = [k.encode() for k in self.keys(queue)]
        tail = _bulk(str(len(keys)).encode()) + b"".join(map(_bulk, keys)) + argv

        async def send(sha: str) -> Any:
            packed = (b"*%d\r\n" % (3 + len(keys) + argc) + _bulk(b"EVALSHA")
                      + _bulk(sha.encode()) + tail)
            pool = self.client.connection_pool
            conn = await pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await conn.send_packed_command(packed)
                return await conn.read_response()
            except redis_errors.ResponseError:
                raise  # the server answered: the connection is in step
            except BaseException:
                # Cut off between sending and reading the answer (cancelled, timed out,
                # lost): the connection's stream is out of step, so it is not reused.
                await conn.disconnect()
                raise
            finally:
                await pool.release(conn)

        async def call() -> Any:
            try:
                return await send(script.sha)
            except redis_errors.NoScriptError:
                script.sha = await self.client.script_load(script.script)
                return await send(script.sha)

        return await self._call(call)

    @staticmethod
    def _parsed(receipts: Sequence[str]) -> list[tuple[str, str, str]]:
        return [p for p in map(parse_receipt, receipts) if p is not None]

    # ------------------------------------------------------------------ the port

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *, now: float) -> None:
        """Publish messages, each visible after its ``delay_s``, in its lane (and its
        group's stream there, for one that names a group)."""
        now_arg = _bulk(_num(now).encode())
        last = MAX_LANES - 1
        for start in range(0, len(messages), PUBLISH_CHUNK):
            chunk = messages[start:start + PUBLISH_CHUNK]
            argv = now_arg + b"".join(
                _bulk(m.message_id.encode()) + _bulk(m.body.encode())
                + (now_arg if m.delay_s <= 0 else _bulk(_num(now + m.delay_s).encode()))
                + _LANE_ARG[min(max(m.lane, 0), last)]
                + (_bulk(m.group.encode()) if m.group else _NO_GROUP_ARG)
                for m in chunk)
            await self._script_packed("publish", queue, 1 + 5 * len(chunk), argv)

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, now: float,
        lanes: Sequence[int] = EVERY_LANE, fair: FairShare | None = None,
    ) -> list[Received]:
        """Take up to ``max_messages`` visible messages, hiding them: lane by lane in
        the order of ``lanes``, in each the expired first (oldest first), then the new in
        the order they joined their stream. With ``fair``, each lane's room is shared
        among its groups (``tidings.core.fair``: the lane's own stream is the group
        ``''``); without, a lane's messages that name no group come first, then its
        groups' in turn (never stranded when a channel stops sharing its lanes)."""
        asked = [lane for lane in dict.fromkeys(lanes) if 0 <= lane < MAX_LANES]
        if max_messages <= 0 or not asked:
            return []
        out: list[Received] = []
        if fair is not None:
            for lane in asked:
                if len(out) >= max_messages:
                    break
                out += await self._shared(queue, lane, max_messages - len(out),
                                          visibility_s, now, fair)
            return out
        while asked and len(out) < max_messages:
            flat = await self._script("receive", queue, [
                _num(now), _num(now + visibility_s), max_messages - len(out),
                MOVES_PER_RECEIVE, *asked])
            out += self._read_rows(queue, flat, now)
            stopped = int(flat[0])
            if not stopped:
                break
            # The lane at ``stopped`` has room left and groups with messages.
            out += await self._shared(queue, asked[stopped - 1], max_messages - len(out),
                                      visibility_s, now, self._leftover, named_only=True)
            asked = asked[stopped:]
        return out

    async def _shared(self, queue: str, lane: int, room: int, visibility_s: float,
                      now: float, share: FairShare, *, named_only: bool = False
                      ) -> list[Received]:
        """Up to ``room`` messages of ``lane`` shared among its groups with messages
        (the next after where ``share`` stopped last), pass by pass as
        ``tidings.core.fair.Passes`` asks; one script call a pass."""
        found = await self._script("groups", queue, [
            _num(now), MOVES_PER_RECEIVE, lane, share.after(lane), room,
            "1" if named_only else "0"])
        groups = [_text(g) for g in found]
        if groups:
            share.visited(lane, groups[-1])
        passes: Passes[Received] = Passes(groups, room, share.weights)
        while asks := passes.asks():
            flat = await self._script("take", queue, [
                _num(now), _num(now + visibility_s), lane,
                *(part for group, most in asks for part in (group, most))])
            given: dict[str, list[Received]] = defaultdict(list)
            for message in self._read_rows(queue, flat, now):
                given[group_of(message.receipt.rsplit("/", 2)[0])].append(message)
            passes.took(given)
        return passes.rows()

    @staticmethod
    def _read_rows(queue: str, flat: list[Any], now: float) -> list[Received]:
        """The messages of a ``hand_out`` answer (``streams_lua/common.lua``), after
        its first item."""
        out = []
        for i in range(1, len(flat), 9):
            entry, message_id, body, enqueued, count, failures, token, uid, lane = \
                flat[i:i + 9]
            out.append(Received(
                queue=queue, message_id=_text(message_id), body=_body(body),
                receipt=f"{_text(entry)}/{_text(token)}/{_text(uid)}",
                receive_count=_read_int(count, 1), enqueued_at=_read_float(enqueued, now),
                failures=_read_int(failures, 0), lane=_LANE_READ.get(lane, 0)))
        return out

    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        """Remove messages for good, by the message (wherever a nack put it since);
        unknown or already acked receipts are a no-op."""
        args = [part for entry, _, uid in sorted(set(self._parsed(receipts)))
                for part in (entry, uid)]
        if args:
            await self._script("ack", queue, args)

    async def nack(self, queue: str, receipts: Sequence[tuple[str, float]], *, now: float,
                   failed: bool = False) -> None:
        """Make messages visible again after the paired delay, counting a failure on each
        with ``failed``; stale receipts are ignored."""
        args: list[str] = [_num(now), "1" if failed else "0"]
        for receipt, delay in receipts:
            parsed = parse_receipt(receipt)
            if parsed is not None:
                args += [*parsed, _num(now + max(0.0, delay))]
        if len(args) > 2:
            await self._script("nack", queue, args)

    async def extend(
        self, queue: str, receipts: Sequence[str], *, visibility_s: float, now: float
    ) -> None:
        """Hide in-flight messages until ``now + visibility_s``; stale receipts are ignored."""
        args: list[str] = [_num(now + visibility_s)]
        for parsed in self._parsed(receipts):
            args += parsed
        if len(args) > 1:
            await self._script("extend", queue, args)

    async def dead_letter(
        self, queue: str, receipts: Sequence[tuple[str, str]], *, now: float
    ) -> None:
        """Move messages to the dead-letter stream with the paired reason; stale
        receipts are ignored."""
        args: list[str] = [_num(now)]
        for receipt, reason in receipts:
            parsed = parse_receipt(receipt)
            if parsed is not None:
                args += [*parsed, reason]
        if len(args) > 1:
            await self._script("dead_letter", queue, args)

    async def dead_letters(self, queue: str, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest dead letters of ``queue``."""
        dead = self.keys(queue)[7]
        rows: Any = await self._call(lambda: self.client.xrange(dead, count=limit))
        out = []
        for entry, raw in rows or []:
            fields = {_text(k): v for k, v in (raw or {}).items()}
            # A foreign XADD into the dead stream is listed with what it has.
            body = fields.get("body", b"")
            out.append(DeadLetter(
                queue=queue, id=_text(entry), message_id=_text(fields.get("id", entry)),
                body=(body if isinstance(body, bytes) else str(body).encode()
                      ).decode("utf-8", "replace"),
                reason=_text(fields.get("reason", "not a tidings dead letter")),
                receive_count=_read_int(fields.get("rc"), 0),
                dead_at=_read_float(fields.get("dead_at"), 0.0)))
        return out

    async def redrive(self, queue: str, ids: Sequence[str], *, now: float) -> int:
        """Put dead letters back on their queue as fresh messages visible now."""
        wanted = sorted({i for i in ids if "-" in i and i.replace("-", "").isdigit()})
        if not wanted:
            return 0
        return int(await self._script("redrive", queue, [_num(now), *wanted]))

    async def _state(self, queue: str, now: float) -> list[Any]:
        state: list[Any] = await self._script("depth", queue, [_num(now)])
        return state

    async def depth(self, queue: str, *, now: float) -> QueueDepth:
        """Ready, delayed, in-flight and dead counts, and the age of the oldest message;
        the same lane by lane for each lane holding messages."""
        state = await self._state(queue, now)
        ready, delayed, in_flight, dead, oldest = state[:5]

        def age(first: Any) -> float:
            return 0.0 if not first else max(0.0, now - _read_float(first, now))

        lanes = tuple(
            LaneDepth(lane=lane, ready=int(lane_ready), total=int(total), oldest_age_s=age(first))
            for lane, (_, lane_ready, total, first) in enumerate(_lane_rows(state))
            if int(total) > 0)
        rows = state[7 + 4 * MAX_LANES:]
        groups = sorted((GroupDepth(lane=int(rows[i]), group=_text(rows[i + 1]),
                                    ready=int(rows[i + 2]), total=int(rows[i + 3]))
                         for i in range(0, len(rows) - 3, 4)),
                        key=lambda g: (-g.total, g.lane, g.group))
        return QueueDepth(ready=int(ready), delayed=int(delayed), in_flight=int(in_flight),
                          dead=int(dead), oldest_age_s=age(oldest), lanes=lanes,
                          groups=tuple(g for g in groups if g.total > 0)[:MAX_GROUPS_SHOWN])

    async def contains(self, queue: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` still have a message on the queue (any visibility)."""
        unique = list(dict.fromkeys(message_ids))
        if not unique:
            return set()
        index = self.keys(queue)[5]
        found = await self._call(lambda: self.client.hmget(index, unique))
        return {mid for mid, copies in zip(unique, found, strict=True)
                if copies is not None and int(copies) > 0}

    async def wait(self, queue: str, *, timeout_s: float, now: float) -> None:
        """Return at once if a message is ready; else block on the stream until an entry
        is added (from anywhere), the next hidden or delayed message is due, or
        ``timeout_s``."""
        state = await self._state(queue, now)
        ready, next_at = state[0], state[5]
        if int(ready) > 0:
            return
        if next_at:
            timeout_s = min(timeout_s, float(next_at) - now)
        if timeout_s <= 0:
            return
        block_ms = max(1, int(min(timeout_s, MAX_BLOCK_S) * 1000))
        # Every lane's stream from its last entry (one not made yet wakes with its
        # first), and the bell a publish into a group's stream rings.
        streams: dict[Any, Any] = {
            stream: _text(row[0])
            for stream, row in zip(self.streams(queue), _lane_rows(state), strict=True)}
        streams[self.keys(queue)[-1]] = _text(state[6 + 4 * MAX_LANES])
        await self._call(lambda: self.client.xread(streams, count=1, block=block_ms))

    async def drop_all(self) -> int:
        """Delete every key under this transport's prefix (SCAN + UNLINK, never a whole
        database: the server may be shared); for throw-away prefixes such as the demo's.
        Returns how many keys were deleted."""
        async def drop() -> int:
            found = [key async for key in self.client.scan_iter(match=f"{self.prefix}:*",
                                                                count=1000)]
            for start in range(0, len(found), 500):
                await self.client.unlink(*found[start:start + 500])
            return len(found)

        return await self._call(drop)

    async def close(self) -> None:
        await self.client.aclose()
