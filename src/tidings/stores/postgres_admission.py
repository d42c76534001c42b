"""Admission on PostgreSQL (the ``Ledger`` role's way in): a page ``COPY``'d into a
temporary stage, then one statement inserts the intents (``ON CONFLICT DO NOTHING
RETURNING key``, so the keys returned are exactly those this transaction inserted,
even when two schedulers admit the same page at once) and, for just those, their
events and queue messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from tidings.core.errors import StoreError
from tidings.core.model import DraftPage, IntentDraft, message_body, message_body_parts
from tidings.core.repeats import AdmitGuard
from tidings.stores import base, rows
from tidings.stores.postgres_base import PostgresBase
from tidings.stores.postgres_db import Conn
from tidings.stores.postgres_steps import (
    Attempt,
    Copy,
    Execute,
    Result,
    Step,
    Steps,
    Wait,
    run_async,
)

#: How long a page's transaction waits for the previous page before rolling back. Two
#: schedulers admitting overlapping pages can wait on each other's rows while each
#: waits for its own previous page, a cycle PostgreSQL cannot see; rolling back after
#: this long breaks it (the page is admitted again from the high-water mark).
PAGE_ORDER_WAIT_S = 10.0
#: The admission inserts by whether the new intents are born enqueued (their messages
#: in the same transaction) or selected; whole names, so each query's user is found.
_ADMIT_PAGE = {False: "intent_admit_page", True: "intent_admit_page_enqueued"}
_ADMIT_FRESH = {False: "intent_admit_fresh", True: "intent_admit_fresh_enqueued"}
_ADMIT_STAGED = {False: "intent_admit_staged", True: "intent_admit_staged_enqueued"}
#: Drafts to admit in one transaction, each group with whether it is born enqueued.
Groups = Sequence[tuple[Sequence[IntentDraft], bool]]


def _page_copy_text(page: DraftPage) -> str | None:
    """The page's rows as COPY text when no field needs escaping (the usual case), else
    None and psycopg formats them row by row. One join and four scans of the result
    instead of a formatting call per row: this runs for every member admitted."""
    members = page.rows
    text = "".join([f"{c}\t{r}\t{a}\t{d}\n" for c, r, a, d in members])
    if (text.count("\t") == 3 * len(members) and text.count("\n") == len(members)
            and "\\" not in text and "\r" not in text):
        return text
    return None


async def _in_page_order(previous: Awaitable[object]) -> None:
    """Wait for the previous page's write (its failure is this page's failure)."""
    try:
        await asyncio.wait_for(asyncio.shield(previous), timeout=PAGE_ORDER_WAIT_S)
    except TimeoutError:
        raise StoreError(f"the previous page was not written within {PAGE_ORDER_WAIT_S} s; "
                         "this page rolled back and will be admitted again") from None


class PostgresAdmission(PostgresBase):
    """``intent_admit``, and the admission transaction body ``api_publish_many`` runs
    too (a join of a caller's transaction runs its steps: ``postgres_join``)."""

    async def intent_admit(self, drafts: Sequence[IntentDraft], *, now: float,
                           publish_lease_until: float | None = None,
                           progress: base.OccurrenceProgress | None = None,
                           enqueue: bool = False,
                           progress_after: Awaitable[object] | None = None) -> list[str]:
        """``Store.intent_admit``, pages side by side: with ``progress_after`` this page's
        rows are written while that one's are, and only the occurrence's progress waits
        for it (see ``_admission`` for how a page goes in)."""
        if not drafts and progress is None:
            return []
        fn = self._admission(drafts, now=now, publish_lease_until=publish_lease_until,
                             progress=progress, enqueue=enqueue, progress_after=progress_after)
        return await self.db.write(fn)

    async def intent_admit_groups(self, groups: Groups, *, now: float,
                                  guard: AdmitGuard | None = None) -> list[str]:
        """``Ledger.intent_admit_groups``: every group in one transaction, then
        ``guard`` over what the transaction found under its keys (``groups_steps``)."""
        if not any(drafts for drafts, _ in groups):
            return []
        sql = self._sql

        async def fn(conn: Conn) -> list[str]:
            return await run_async(conn, groups_steps(sql, groups, now=now, guard=guard))

        return await self.db.write(fn)

    def _admission(self, drafts: Sequence[IntentDraft], *, now: float,
                   publish_lease_until: float | None, progress: base.OccurrenceProgress | None,
                   enqueue: bool, progress_after: Awaitable[object] | None
                   ) -> Callable[[Conn], Awaitable[list[str]]]:
        """The body of one admission transaction on the store's own (async) connection
        (safe to run again: see intent_admit); ``admission_steps`` says what it does."""
        async def fn(conn: Conn) -> list[str]:
            return await run_async(conn, admission_steps(
                self._sql, drafts, now=now, publish_lease_until=publish_lease_until,
                progress=progress, enqueue=enqueue, progress_after=progress_after))

        return fn


def admission_steps(sql: Mapping[str, str], drafts: Sequence[IntentDraft], *, now: float,
                    publish_lease_until: float | None = None,
                    progress: base.OccurrenceProgress | None = None, enqueue: bool = False,
                    progress_after: Awaitable[object] | None = None,
                    clear_stage: bool = False) -> Steps[list[str]]:
    """One admission, as steps (``postgres_steps``) for either driver; the new keys.

    The first try assumes no key exists yet (a scheduler's page past its mark) and
    inserts without ON CONFLICT in a savepoint; a unique_violation rolls back to it
    and the page goes in by ``intent_admit_staged``, which skips existing keys.
    A ``DraftPage`` is staged in its columns; anything else as whole drafts.
    ``clear_stage``: empty the drafts' stage first (a caller's transaction may have
    admitted before, and the stage keeps its rows until commit).
    """
    params: dict[str, Any] = {"now": now, "lease_until": publish_lease_until}
    page = drafts if isinstance(drafts, DraftPage) else None
    channels = [] if page is None else [c for c, _, _ in page.channels]
    if page is not None:
        body_head, body_tail = message_body_parts()
        params.update(
            channels=channels,
            prefixes=[p for _, p, _ in page.channels],
            suffixes=[s for _, _, s in page.channels], lanes=list(page.lanes),
            groups=list(page.groups),
            template=page.template, campaign=page.campaign, occurrence=page.occurrence,
            due_at=page.due_at, expires_at=page.expires_at,
            body_head=body_head, body_tail=body_tail)

    def unique_drafts() -> tuple[list[IntentDraft], list[tuple[Any, ...]]]:
        seen: set[str] = set()
        unique: list[IntentDraft] = []
        staged: list[tuple[Any, ...]] = []
        for d in drafts:  # keeps the first of a key drafted twice
            if d.key not in seen:
                seen.add(d.key)
                unique.append(d)
                staged.append((len(staged), d.key, d.channel, d.recipient_id, d.address,
                               d.template, d.data, d.campaign, d.occurrence, d.due_at,
                               d.expires_at, message_body(d.key), d.lane, d.group))
        return unique, staged

    def stage_drafts(staged: Sequence[tuple[Any, ...]]) -> Steps[None]:
        yield Execute(sql["admit_stage_create"])
        if clear_stage:
            yield Execute(sql["admit_stage_clear"])
        yield Copy(sql["admit_stage_copy"], staged)

    def fresh_only(insert: str) -> Steps[bool]:
        # False: some keys exist (a replay, a second scheduler).
        ok: bool = yield Attempt(one(Execute(sql[insert], params)))
        return ok

    def write() -> Steps[tuple[list[str], set[str]]]:
        """The new keys, and the queues that got messages."""
        if page is not None:
            yield Execute(sql["admit_page_stage_create"])
            yield Copy(sql["admit_page_stage_copy"], page.rows, _page_copy_text(page))
            if (yield from fresh_only(_ADMIT_PAGE[enqueue])):
                used = {channel for channel, _, _, _ in page.rows}
                return page.keys(), {channels[i] for i in used}
            unique, staged = unique_drafts()
            yield from stage_drafts(staged)
        else:
            unique, staged = unique_drafts()
            yield from stage_drafts(staged)
            if (yield from fresh_only(_ADMIT_FRESH[enqueue])):
                return [d.key for d in unique], {d.channel for d in unique}
        found: Result = yield Execute(sql[_ADMIT_STAGED[enqueue]], params)
        inserted = {key for (key,) in found.rows}
        fresh = [d for d in unique if d.key in inserted]
        return [d.key for d in fresh], {d.channel for d in fresh}

    keys: list[str] = []
    queues: set[str] = set()
    if drafts:
        keys, queues = yield from write()
    if enqueue:
        for queue in sorted(queues):
            yield Execute(sql["queue_notify"], {"queue": queue})
    if progress_after is not None:
        yield Wait(_in_page_order(progress_after))
    if progress is not None:
        done: Result = yield Execute(sql["occurrence_progress"],
                                     rows.progress_params(progress, admitted=len(keys)))
        if done.rowcount != 1:
            raise StoreError(f"occurrence {progress.occurrence!r} does not exist")
    return keys


def groups_steps(sql: Mapping[str, str], groups: Groups, *, now: float,
                 guard: AdmitGuard | None, clear_stage: bool = False) -> Steps[list[str]]:
    """Admit each group of drafts (born enqueued or not) in this one transaction, then
    run ``guard``; the keys created. ``clear_stage``: the first group's too (a caller's
    transaction may have admitted before)."""
    created: list[str] = []
    for drafts, enqueue in groups:
        if drafts:
            # The stage keeps its rows until commit: a transaction admitting twice
            # clears it between.
            created += yield from admission_steps(sql, drafts, now=now, enqueue=enqueue,
                                                  clear_stage=clear_stage)
            clear_stage = True
    if guard is not None:
        yield from guard_steps(sql, guard, created)
    return created


def guard_steps(sql: Mapping[str, str], guard: AdmitGuard, created: Sequence[str]
                ) -> Steps[None]:
    """Read back, after the inserts, what is under the guard's keys that this
    transaction did not create (a row committed meanwhile by another included: this is
    a new statement) and hand it to the guard, whose KeyConflict rolls the write back."""
    made = set(created)
    wanted = [key for key in guard.keys if key not in made]
    held = {}
    if wanted:
        found: Result = yield Execute(sql["intent_bodies"], {"keys": wanted})
        held = {body.key: body for body in rows.INTENT_BODY.all(found.description, found.rows)}
    guard.check(held)


def one(step: Step) -> Steps[Any]:
    """A body of one step."""
    answer = yield step
    return answer
