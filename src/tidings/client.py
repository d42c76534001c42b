"""``Client``: the runtime's door for code with no event loop (Django and Flask views,
scripts, Celery-style tasks).

Every call runs the async runtime's own method on one background event loop per
process, in a thread of its own, and waits for its answer: the same validation, the
same errors (``InvalidInput`` naming the field, ``ConfigurationError``), the same
intents. A client is safe to share between threads; concurrent ``notify`` calls from
many threads are written together by the runtime's group commit.

Fork-safe: a process forked from one that used a client (a gunicorn or uWSGI worker)
gets a loop and a runtime of its own on its first call; what it inherited is left to
its parent, never closed from the child (closing a PostgreSQL connection from the
child would end the parent's session). A fork may land while another thread of the
parent is in the client's first call: no lock is held while a runtime is built (the
callers wait on the build's future, each within ``timeout_s``), and every client's lock
and pending start-up are replaced in the child (``os.register_at_fork``), so the child's
first call starts its own runtime instead of waiting for a thread it does not have.

A client still open when the interpreter exits is closed then (``atexit``), its
runtime's connections and tasks ended in order, so a script that never calls
``close`` exits quietly.

Misuse says so: a call from inside a running event loop (async code holds the async
``Runtime`` instead, and awaits it), or after ``close``, raises ``ClientError``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from tidings.config.settings import Settings, find_settings_file
from tidings.core.errors import TidingsError

if TYPE_CHECKING:
    import psycopg

    from tidings.admission.digests import ClosedDigests, Digested
    from tidings.admission.intake import NotifyRequest
    from tidings.core.clock import Clock
    from tidings.core.digest import Digest
    from tidings.core.model import Recipient
    from tidings.core.preferences import Preference
    from tidings.core.repeats import Notified
    from tidings.core.states import State
    from tidings.operate.readmodel import Delivery
    from tidings.providers.base import Provider
    from tidings.runtime import Runtime
    from tidings.stores.base import JoinTarget

T = TypeVar("T")


class ClientError(TidingsError):
    """The client was used where it cannot work (inside an event loop, after close)."""


class _ProcessLoop:
    """The one background event loop of this process, started when first needed."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="tidings-client-loop", daemon=True)
        self.thread.start()

    def submit(self, work: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)


_loop_lock = threading.Lock()
_process_loop: _ProcessLoop | None = None


#: Every client of this process, for the fork hook below.
_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _forget_after_fork() -> None:
    # The child has the parent's loop object but not its thread: start afresh. A lock
    # held by a thread of the parent at the fork would stay held for ever in the child.
    global _process_loop, _loop_lock
    _process_loop = None
    _loop_lock = threading.Lock()
    for client in list(_clients):
        client._after_fork()


os.register_at_fork(after_in_child=_forget_after_fork)


#: The clients with a runtime of this process: closed at interpreter exit.
_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _close_at_exit() -> None:
    # atexit runs while the loop's daemon thread still does: each runtime is closed on
    # it (its pool's tasks ended, not destroyed pending at finalization), then the loop
    # stops.
    loop = _process_loop
    if loop is None or loop.pid != os.getpid():
        return
    for client in list(_open_clients):
        # Exiting: one client's failure must not keep the others open.
        with contextlib.suppress(Exception):
            client.close()
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.thread.join(timeout=5)


atexit.register(_close_at_exit)


def _the_loop() -> _ProcessLoop:
    global _process_loop
    with _loop_lock:
        if _process_loop is None or _process_loop.pid != os.getpid():
            _process_loop = _ProcessLoop()
        return _process_loop


def _settings_from(settings: Settings | str | Path | None) -> Settings:
    if isinstance(settings, Settings):
        return settings
    if isinstance(settings, str) and "://" in settings:
        return Settings.parse({**Settings.load(find_settings_file(None)).model_dump(),
                               "store": settings})
    return Settings.load(find_settings_file(settings))


class Client:
    """A synchronous client of one runtime (see the module).

    ``settings``: a ``Settings``, a store URL (``sqlite:///tidings.db``,
    ``postgresql://…``, with the rest from ``tidings.toml`` if there is one), a path to
    a settings file, or None (``TIDINGS_CONFIG``, else ``./tidings.toml``, as the CLI).
    The runtime is built on the first call; ``timeout_s`` bounds each call.
    """

    def __init__(self, settings: Settings | str | Path | None = None, *,
                 providers: Mapping[str, Provider] | None = None, clock: Clock | None = None,
                 migrate: bool = True, timeout_s: float = 60.0) -> None:
        self.settings = _settings_from(settings)
        self.timeout_s = timeout_s
        self._providers = providers
        self._clock = clock
        self._migrate = migrate
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._starting: Future[Runtime] | None = None
        self._join: tuple[Runtime, JoinTarget] | None = None
        self._pid = os.getpid()
        self._closed = False
        _clients.add(self)

    # ------------------------------------------------------------ the runtime's calls

    @overload
    def notify(self, *, key: str, recipient: Recipient | Mapping[str, Any],
               channels: Sequence[str], template: str, data: Mapping[str, Any] | None = None,
               due_at: float | None = None, expires_at: float | None = None,
               connection: psycopg.Connection[Any] | None = None,
               digest: None = None, lane: str | None = None,
               group: str | None = None) -> Notified: ...

    @overload
    def notify(self, *, key: str, recipient: Recipient | Mapping[str, Any],
               channels: Sequence[str], template: str, data: Mapping[str, Any] | None = None,
               due_at: None = None, expires_at: None = None, connection: None = None,
               digest: Digest | Mapping[str, Any], lane: None = None,
               group: None = None) -> Digested: ...

    def notify(self, *, key: str, recipient: Recipient | Mapping[str, Any],
               channels: Sequence[str], template: str, data: Mapping[str, Any] | None = None,
               due_at: float | None = None, expires_at: float | None = None,
               connection: psycopg.Connection[Any] | None = None,
               digest: Digest | Mapping[str, Any] | None = None,
               lane: str | None = None, group: str | None = None
               ) -> Notified | Digested:
        """``Runtime.notify``: one intent per channel, returned by key.

        ``connection``: the caller's sync ``psycopg.Connection`` (psycopg 3) to the
        store's PostgreSQL database, in a transaction: the intents are written on it, in
        this thread, and exist if and only if that transaction commits (see
        ``notify_many``).

        ``digest``: add this call as an item to its digest's window instead
        (``Runtime.notify``'s ``digest``); answers ``Digested``.

        ``lane``, ``group``: the lane of each channel's queue, and the group on channels
        that share their lanes among groups (``Runtime.notify``'s)."""
        if digest is not None:
            from tidings.core.errors import InvalidInput

            if lane is not None:
                raise InvalidInput("lane", "a digest is sent in its channels' bulk lane "
                                           "when its window closes; leave the lane out")
            if group is not None:
                raise InvalidInput("group", "a digest item takes no group; leave it out")
            if connection is not None:
                raise InvalidInput("connection", "a digest item is not written in the "
                                                 "caller's transaction; leave one out")
            if due_at is not None or expires_at is not None:
                raise InvalidInput("due_at" if due_at is not None else "expires_at",
                                   "a digest item is sent when its window closes; leave "
                                   "it out")
            return self._call(lambda r: r.notify(
                key=key, recipient=recipient, channels=channels, template=template,
                data=data, digest=digest))
        if connection is not None:
            from tidings.admission.intake import NotifyRequest

            request = NotifyRequest(key=key, recipient=recipient, channels=channels,
                                    template=template, data=data, due_at=due_at,
                                    expires_at=expires_at, lane=lane, group=group)
            return self._joined([request], connection)[0]
        return self._call(lambda r: r.notify(
            key=key, recipient=recipient, channels=channels, template=template, data=data,
            due_at=due_at, expires_at=expires_at, lane=lane, group=group))

    def notify_many(self, requests: Iterable[NotifyRequest], *,
                    connection: psycopg.Connection[Any] | None = None) -> list[Notified]:
        """``Runtime.notify_many``: all validated first, then written together.

        With ``connection`` (as ``notify``'s) the validation, the drafts and the SQL all
        run in the calling thread, the SQL on that connection inside its transaction (in
        a savepoint: a refusal leaves the transaction usable); only the store's identity
        is read once on the client's loop. On the store's own queue the messages are
        written in the same transaction, and its workers are woken at commit; with a
        broker the intents wait, selected, for the outbox relay to publish them once
        committed. Refused, naming ``connection``: no psycopg 3 sync connection, one in
        no transaction (autocommit) or in a failed one, one to another database than the
        store's (``InvalidInput``); a store other than PostgreSQL
        (``ConfigurationError``)."""
        # What is no batch (None, a mapping, a string) goes through for the runtime to refuse.
        batch = (requests if requests is None or isinstance(requests, (str, bytes, Mapping))
                 else list(requests))
        if connection is not None:
            return self._joined(batch, connection)
        return self._call(lambda r: r.notify_many(batch))

    def cancel(self, key: str, reason: str = "cancelled by caller") -> dict[str, State | None]:
        """``Runtime.cancel``: before its send starts."""
        return self._call(lambda r: r.cancel(key, reason))

    def cancel_digest_item(self, digest_key: str, item_key: str) -> bool:
        """``Runtime.cancel_digest_item``: out of its digest while the window is open."""
        return self._call(lambda r: r.cancel_digest_item(digest_key, item_key))

    def close_digests(self) -> ClosedDigests:
        """``Runtime.close_digests``: admit the digests whose windows are due."""
        return self._call(lambda r: r.close_digests())

    def inspect(self, key: str | None = None, *, recipient: str | None = None
                ) -> list[Delivery]:
        """``Runtime.inspect``: the deliveries and timelines of a key or a recipient."""
        return self._call(lambda r: r.inspect(key, recipient=recipient))

    def set_preference(self, recipient_id: str, channel: str, *, opted_out: bool = False,
                       quiet_start: str | None = None, quiet_end: str | None = None,
                       timezone: str = "UTC") -> Preference:
        """``Runtime.set_preference``."""
        return self._call(lambda r: r.set_preference(
            recipient_id, channel, opted_out=opted_out, quiet_start=quiet_start,
            quiet_end=quiet_end, timezone=timezone))

    def delete_preference(self, recipient_id: str, channel: str) -> bool:
        """``Runtime.delete_preference``."""
        return self._call(lambda r: r.delete_preference(recipient_id, channel))

    def preferences(self, recipient_id: str) -> list[Preference]:
        """``Runtime.preferences``."""
        return self._call(lambda r: r.preferences(recipient_id))

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the runtime (every notify in hand is answered first). Idempotent."""
        with self._locked():
            self._closed = True
            runtime, self._runtime = self._runtime, None
            starting, self._starting = self._starting, None
            _open_clients.discard(self)
        if self._pid != os.getpid():
            return
        if runtime is None and starting is not None:
            # Closed while its runtime started: the caller waiting for it is told the
            # client is closed, and the runtime is closed here.
            try:
                runtime = starting.result(timeout=self.timeout_s)
            except Exception:
                return  # no runtime came of it, so none to close
        if runtime is not None:
            self._wait(_the_loop().submit(runtime.close()))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._runtime else "not started"
        return f"<tidings.Client {state}>"

    # ------------------------------------------------------------ the bridge

    def _call(self, call: Callable[[Runtime], Awaitable[T]]) -> T:
        self._refuse_misuse()
        loop = _the_loop()
        runtime = self._runtime_on(loop)

        async def run() -> T:
            return await call(runtime)

        return self._wait(loop.submit(run()))

    def _joined(self, requests: Iterable[NotifyRequest], connection: object
                ) -> list[Notified]:
        self._refuse_misuse()
        runtime = self._runtime_on(_the_loop())
        known = self._join
        if known is None or known[0] is not runtime:
            from tidings.admission.intake import joinable

            # Read once on the loop (the store's own connection); the join itself is
            # all in this thread, on the caller's connection.
            known = self._join = (runtime, self._call(lambda r: joinable(r.store).join_target()))
        return runtime.notify_many_joined(requests, connection=connection, target=known[1])

    def _refuse_misuse(self) -> None:
        if self._closed:
            raise ClientError("this Client is closed")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise ClientError("Client is for code without an event loop; in async code build "
                          "a runtime (tidings.build_runtime) and await its methods")

    def _after_fork(self) -> None:
        # In the child: the parent's runtime and start-up are the parent's; never close or
        # wait for them from here.
        self._lock = threading.Lock()
        self._runtime, self._starting, self._join = None, None, None
        self._pid = os.getpid()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Held only for a few assignments; bounded all the same, so no wait is unbounded.
        if not self._lock.acquire(timeout=self.timeout_s):
            raise ClientError(f"no answer within {self.timeout_s:g} s (timeout_s)")
        try:
            yield
        finally:
            self._lock.release()

    def _runtime_on(self, loop: _ProcessLoop) -> Runtime:
        with self._locked():
            if self._closed:
                raise ClientError("this Client is closed")
            if self._pid != os.getpid():  # forked with no fork hook run (never in CPython)
                self._after_fork()
            if self._runtime is not None:
                return self._runtime
            starting = self._starting
            if starting is None:
                from tidings.runtime import build_runtime

                # Built on the loop, with no lock held: the callers that come meanwhile
                # wait on this one future, each within its timeout.
                starting = self._starting = loop.submit(build_runtime(
                    self.settings, providers=self._providers, clock=self._clock,
                    migrate=self._migrate))
        try:
            runtime = starting.result(timeout=self.timeout_s)
        except TimeoutError:
            raise ClientError(f"no answer within {self.timeout_s:g} s (timeout_s): the "
                              "runtime is still starting") from None
        except BaseException:
            with self._locked():
                if self._starting is starting:  # the next call tries again
                    self._starting = None
            raise
        with self._locked():
            if self._starting is starting:
                self._starting, self._runtime = None, runtime
                _open_clients.add(self)
            if self._runtime is None:  # closed meanwhile (close closes what started)
                raise ClientError("this Client is closed")
            return self._runtime

    def _wait(self, future: Future[T]) -> T:
        try:
            return future.result(timeout=self.timeout_s)
        except TimeoutError:
            future.cancel()
            raise ClientError(f"no answer within {self.timeout_s:g} s (timeout_s)") from None
