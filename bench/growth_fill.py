"""The growth benchmark's fill: a month of ledger written straight into tidings' schema.

Not through the API (30M intents through the pipeline would take hours): every row is
made inside the database by ``INSERT … SELECT`` over a series of numbers, one
transaction per chunk, on PostgreSQL from ``generate_series`` and on SQLite from a
recursive CTE (SQLite has no ``generate_series`` in Python's build; the CTE makes the
same rows as a Python generator would, without passing them through the driver). The
statements are written once for both stores; ``Dialect`` holds the few spellings that
differ.

What a month holds (shares of the 98 % of N finished over the 30 UTC days before the
fill's anchor day; ``make_plan`` has the exact numbers):

- campaigns, admitted on the store's own queue (born ``enqueued``, as the scheduler
  admits them there): ``daily-digest`` (email, 09:00 every day, 35 %),
  ``weekly-news`` (email, Mondays 10:00, 15 %), ``sms-reminders`` (sms, 17:00 every
  day, 10 %), each occurrence one ``occurrences`` row (``done``) and its recipients
  ``cust_00000001`` up;
- ``notify`` one-offs (``order-YYYYMMDD-N:email`` and ``…:sms``, 38 %) spread evenly
  over each day, to recipients drawn from the same pool;
- digests (2 %): a closed ``digest_windows`` row with three ``digest_items`` per
  digest intent (key ``<window id>:email``);
- in flight (2 %, on the anchor day before the anchor): scheduled ``enqueued`` intents
  due in 1–7 days with their queue messages, ``retryable`` ones (1 in 10) waiting 1–2
  days with theirs, and ``held`` ones (1 in 1,000) awaiting evidence;
- recent throttle windows and their holds (one rule, the last two days' digest
  recipients).

Each finished intent ends by a share of 1,000 (``CLASSES``): accepted (60 %), accepted
and then ``delivered`` by a provider report (32 %), bounced (1.5 %, email; a hard
bounce suppresses the address) and complained (0.1 %, email), accepted after one
transient failure (4 %), rejected (1 %), dead after two failures (0.5 %), suppressed
at the gate (0.5 %), expired (0.2 %) and cancelled (0.1 %). Its events are those the
pipeline writes on the store's queue: ``enqueued`` at admission, ``claimed`` and the
outcome per attempt (``transient_failure`` between tries), and
``provider_<type>`` for a report, with its ``provider_events`` row (and its
suppression). Events land in the day partitions a pruner would have made
(PostgreSQL), created here for every day of the month and a week ahead.

Resumable: every chunk's rows and its line in ``growth_bench_fill`` (the benchmark's
own table, which tidings never reads) commit together, so a fill stopped anywhere
(``--budget-min``, a kill) goes on from the first chunk not recorded.
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tidings.core.cron import Schedule
from tidings.core.keys import campaign_key_parts
from tidings.core.retention import day_partition

DAY_S = 86_400.0
DAYS = 30
#: How many intents one chunk (one transaction) writes, by store.
CHUNK = {"postgresql": 200_000, "sqlite": 100_000}
#: The pool of recipients is N / RECIPIENT_SHARE (at least 1,000): about ten
#: deliveries a recipient over the month.
RECIPIENT_SHARE = 10
META = "growth_bench_fill"
#: Secondary indexes (PostgreSQL) built once after the rows rather than row by row;
#: the unique ones stay (their conflicts are part of the fill's statements).
DEFERRED_INDEXES = ("intents_state", "intents_receipt", "intents_created", "events_key",
                    "events_outcomes_at")
#: The recipient ``inspect`` is measured on (in every audience: recipient 42).
INSPECTED = "cust_00000042"


def recipient_id(r: int) -> str:
    return f"cust_{r:08d}"


# ---------------------------------------------------------------- how intents end


@dataclass(frozen=True)
class Step:
    """One event of a class's timeline: at ``t0`` (admission) or ``t1`` (first claim)
    plus ``off`` seconds."""

    type: str
    base: int
    off: float
    attempt: int
    state: str
    worker: bool


@dataclass(frozen=True)
class Class:
    name: str
    upper: int  # k < upper (of 1,000) picks this class, after the classes before it
    state: str
    steps: tuple[Step, ...]
    attempts: int
    failures: int
    accepted: bool
    reason: str | None = None
    report: str | None = None  # a provider report after acceptance (provider_events)
    email_only: bool = False  # on sms this share is "delivered"


def _s(type_: str, base: int, off: float, attempt: int, state: str, worker: bool = True) -> Step:
    return Step(type_, base, off, attempt, state, worker)


ENQ = _s("enqueued", 0, 0.0, 0, "enqueued", worker=False)
CLAIM1 = _s("claimed", 1, 0.0, 1, "claimed")
ACC1 = _s("accepted", 1, 0.3, 1, "accepted")
FAIL1 = _s("transient_failure", 1, 0.3, 1, "retryable")
CLAIM2 = _s("claimed", 1, 60.0, 2, "claimed")

CLASSES: tuple[Class, ...] = (
    Class("dead", 5, "dead", (ENQ, CLAIM1, FAIL1, CLAIM2,
                             _s("dead", 1, 60.3, 2, "dead")), 2, 2, False,
          reason="retries exhausted: http 503"),
    Class("rejected", 15, "rejected", (ENQ, CLAIM1, _s("rejected", 1, 0.3, 1, "rejected")),
          1, 0, False, reason="invalid recipient"),
    Class("suppressed", 20, "suppressed", (ENQ, CLAIM1, _s("suppressed", 1, 0.01, 1,
                                                           "suppressed")),
          1, 0, False, reason="hard_bounce"),
    Class("expired", 22, "expired", (ENQ, _s("expired", 0, 21_600.0, 0, "expired",
                                             worker=False)), 0, 0, False,
          reason="freshness deadline passed"),
    Class("cancelled", 23, "cancelled", (ENQ, _s("cancelled", 0, 30.0, 0, "cancelled",
                                                 worker=False)), 0, 0, False,
          reason="cancelled by caller"),
    Class("retried", 63, "accepted", (ENQ, CLAIM1, FAIL1, CLAIM2,
                                      _s("accepted", 1, 60.3, 2, "accepted")), 2, 1, True),
    Class("bounced", 78, "bounced", (ENQ, CLAIM1, ACC1, _s("provider_bounced", 1, 120.0, 1,
                                                           "bounced", worker=False)),
          1, 0, True, report="bounced", email_only=True),
    Class("complained", 79, "complained", (ENQ, CLAIM1, ACC1,
                                           _s("provider_complained", 1, 3600.0, 1,
                                              "complained", worker=False)),
          1, 0, True, report="complained", email_only=True),
    Class("delivered", 400, "delivered", (ENQ, CLAIM1, ACC1,
                                          _s("provider_delivered", 1, 5.0, 1, "delivered",
                                             worker=False)),
          1, 0, True, report="delivered"),
    Class("accepted", 1000, "accepted", (ENQ, CLAIM1, ACC1), 1, 0, True),
)
#: In flight, on the anchor day: what is left when a month's ledger is looked at.
IN_FLIGHT: tuple[Class, ...] = (
    Class("retrying", 100, "retryable", (ENQ, CLAIM1, FAIL1), 1, 1, False),
    Class("held", 101, "held", (ENQ, CLAIM1, _s("uncertain", 1, 30.0, 1, "uncertain")),
          1, 0, False),
    Class("scheduled", 1000, "enqueued", (ENQ,), 0, 0, False),
)
BY_NAME = {c.name: c for c in (*CLASSES, *IN_FLIGHT)}


def class_case(classes: tuple[Class, ...], email: str) -> str:
    """The SQL expression choosing a row's class from its share ``k`` (0–999)."""
    arms = []
    for c in classes:
        cond = f"k < {c.upper}"
        if c.email_only:
            cond += f" AND {email}"
        arms.append(f"WHEN {cond} THEN '{c.name}'")
    sms_default = "'delivered'"
    return f"CASE {' '.join(arms)} ELSE {sms_default} END"


def steps_values() -> str:
    rows = []
    for c in (*CLASSES, *IN_FLIGHT):
        for seq, s in enumerate(c.steps):
            rows.append(f"('{c.name}', {seq}, '{s.type}', {s.base}, {s.off}, {s.attempt}, "
                        f"'{s.state}', {int(s.worker)})")
    return ",\n".join(rows)


def per_class(column: str, value: Callable[[Class], str]) -> str:
    arms = " ".join(f"WHEN '{c.name}' THEN {value(c)}" for c in (*CLASSES, *IN_FLIGHT))
    return f"CASE {column} {arms} END"


def _q(text: str | None) -> str:
    return "NULL" if text is None else "'" + text.replace("'", "''") + "'"


# ---------------------------------------------------------------- the two dialects


@dataclass(frozen=True)
class Dialect:
    name: str

    @property
    def pg(self) -> bool:
        return self.name == "postgresql"

    def series(self) -> str:
        if self.pg:
            return ("g(n) AS (SELECT generate_series(CAST(:lo AS bigint), "
                    "CAST(:hi AS bigint)))")
        return "g(n) AS (SELECT :lo UNION ALL SELECT n + 1 FROM g WHERE n < :hi)"

    def with_(self) -> str:
        return "WITH" if self.pg else "WITH RECURSIVE"

    def pad(self, expr: str, width: int = 8) -> str:
        if self.pg:
            return f"lpad(CAST({expr} AS text), {width}, '0')"
        return f"substr('{'0' * width}' || ({expr}), -{width}, {width})"

    def iso(self, expr: str) -> str:
        if self.pg:
            return (f"to_char(to_timestamp({expr}) AT TIME ZONE 'UTC', "
                    "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
        return f"strftime('%Y-%m-%dT%H:%M:%fZ', {expr}, 'unixepoch')"

    def insert_ignore(self, table: str) -> tuple[str, str]:
        if self.pg:
            return f"INSERT INTO {table}", "ON CONFLICT DO NOTHING"
        return f"INSERT OR IGNORE INTO {table}", ""

    def text(self, param: str) -> str:
        return f"CAST(:{param} AS text)"

    def boolean(self, value: bool) -> str:
        if self.pg:
            return "true" if value else "false"
        return "1" if value else "0"

    def sql(self, statement: str) -> str:
        """``:name`` parameters as the driver wants them (psycopg: ``%(name)s``)."""
        if not self.pg:
            return statement
        return re.sub(r"(?<![:\w]):([a-z_][a-z0-9_]*)", r"%(\1)s",
                      statement.replace("%", "%%"))


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Segment:
    """A run of intents made by one statement family: a campaign occurrence, a day's
    notify on one channel, a day's digests, or the anchor day's work in flight."""

    id: str
    kind: str  # campaign | notify | digest | in_flight
    channel: str
    count: int
    t_start: float
    t_step: float  # between two intents' admissions
    claim_step: float  # between two intents' first claims
    lag: float  # first claim after the first admission
    key_prefix: str
    key_suffix: str
    template: str
    campaign: str | None = None
    occurrence: str | None = None
    logical_at: float | None = None
    logical_date: str | None = None
    expires_s: float | None = None
    due_in: tuple[float, float] = (0.0, 0.0)  # in flight: due this many s after anchor
    salt: int = 0
    pick: str = "campaign"  # campaign: recipient n; pool: a recipient drawn from the pool


@dataclass(frozen=True)
class Chunk:
    segment: Segment
    lo: int
    hi: int

    @property
    def id(self) -> str:
        return f"{self.segment.id}#{self.lo}"


@dataclass
class Plan:
    size: int
    anchor: float
    pool: int
    segments: list[Segment] = field(default_factory=list)
    partitions: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def first_day(self) -> float:
        return math.floor(self.anchor / DAY_S) * DAY_S - DAYS * DAY_S

    def chunks(self, chunk: int) -> Iterator[Chunk]:
        for seg in self.segments:
            for lo in range(1, seg.count + 1, chunk):
                yield Chunk(seg, lo, min(seg.count, lo + chunk - 1))


CAMPAIGNS = (
    # name, cron, channel, template, share of a day's volume (weekly: of a week's / 7)
    ("daily-digest", "0 9 * * *", "email", "daily-digest/v4", 0.35),
    ("weekly-news", "0 10 * * 1", "email", "weekly-news/v2", 0.15),
    ("sms-reminders", "0 17 * * *", "sms", "sms-reminder/v1", 0.10),
)
NOTIFY_SHARE = {"email": 0.304, "sms": 0.076}
DIGEST_SHARE = 0.02
IN_FLIGHT_SHARE = 0.02


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y%m%d")


def make_plan(size: int, anchor: float) -> Plan:
    """The segments of a month of ``size`` intents ending on ``anchor``'s day."""
    plan = Plan(size=size, anchor=anchor, pool=max(1_000, size // RECIPIENT_SHARE))
    if size == 0:  # an empty ledger: the partitions a pruner's first pass makes ahead
        plan.partitions = _partitions(plan, math.floor(anchor / DAY_S) * DAY_S - DAY_S)
        return plan
    first = plan.first_day
    in_flight = round(size * IN_FLIGHT_SHARE)
    per_day = (size - in_flight) / DAYS
    made = 0
    salt = 0
    weekly_occurrences = {
        name: len(Schedule(cron, "UTC").between(first - 1e-6, first + DAYS * DAY_S - 1e-6))
        for name, cron, *_ in CAMPAIGNS if "* * 1" in cron}
    for d in range(DAYS):
        start = first + d * DAY_S
        for name, cron, channel, template, share in CAMPAIGNS:
            schedule = Schedule(cron, "UTC")
            for occ in schedule.between(start - 1e-6, start + DAY_S - 1e-6):
                weekly = "* * 1" in cron
                count = min(plan.pool, round(
                    per_day * share * (DAYS / weekly_occurrences[name] if weekly else 1)))
                prefix, suffix = campaign_key_parts(name, occ.logical_date, channel, 1)
                salt += 1
                plan.segments.append(Segment(
                    id=f"{name}/{occ.logical_date}", kind="campaign", channel=channel,
                    count=count, t_start=occ.logical_at + 1.0, t_step=1 / 20_000,
                    claim_step=1 / 400, lag=0.5, key_prefix=prefix + "cust_",
                    key_suffix=suffix, template=template, campaign=name,
                    occurrence=f"{name}/{occ.logical_date}", logical_at=occ.logical_at,
                    logical_date=occ.logical_date, expires_s=6 * 3600.0, salt=salt))
                made += count
        for channel, share in NOTIFY_SHARE.items():
            count = round(per_day * share)
            salt += 1
            plan.segments.append(Segment(
                id=f"notify/{_day(start)}/{channel}", kind="notify", channel=channel,
                count=count, t_start=start, t_step=DAY_S / max(count, 1),
                claim_step=DAY_S / max(count, 1), lag=0.2,
                key_prefix=f"order-{_day(start)}-", key_suffix=f":{channel}",
                template=f"order-{channel}", salt=salt, pick="pool"))
            made += count
        count = round(per_day * DIGEST_SHARE)
        salt += 1
        plan.segments.append(Segment(
            id=f"digest/{_day(start)}", kind="digest", channel="email", count=count,
            t_start=start + 3600.0, t_step=(DAY_S - 7200.0) / max(count, 1),
            claim_step=(DAY_S - 7200.0) / max(count, 1), lag=0.5, key_prefix="",
            key_suffix=":email", template="comments-digest", salt=salt, pick="pool"))
        made += count
    # The rounding's remainder goes to the anchor day's work in flight.
    in_flight = size - made
    day = math.floor(anchor / DAY_S) * DAY_S
    span = max(60.0, anchor - day)
    plan.segments.append(Segment(
        id=f"in-flight/{_day(day)}", kind="in_flight", channel="email", count=in_flight,
        t_start=day, t_step=span / max(in_flight, 1), claim_step=span / max(in_flight, 1),
        lag=0.2, key_prefix=f"reminder-{_day(day)}-", key_suffix=":email",
        template="reminder", due_in=(DAY_S, 7 * DAY_S), salt=salt + 1, pick="pool"))
    plan.segments = [s for s in plan.segments if s.count > 0]
    plan.partitions = _partitions(plan)
    return plan


def _partitions(plan: Plan, start: float | None = None) -> list[tuple[str, float, float]]:
    """Day partitions of events from the month's first day (or ``start``) to a week past
    the anchor, as the pruner keeps them made ahead."""
    out = []
    day = plan.first_day - DAY_S if start is None else start
    end = math.floor(plan.anchor / DAY_S) * DAY_S + 8 * DAY_S
    while day < end:
        p = day_partition(day)
        assert p.lower is not None and p.upper is not None
        out.append((p.name, p.lower, p.upper))
        day += DAY_S
    return out


# ---------------------------------------------------------------- the statements


def _base(d: Dialect, seg: Segment, classes: tuple[Class, ...]) -> str:
    """The CTEs every statement of a chunk starts from: one row per intent number n
    with its key, recipient, times and class."""
    email = "1 = 1" if seg.channel == "email" else "1 = 0"
    r = "n" if seg.pick == "campaign" else "((n * 104729 + :salt) % :pool) + 1"
    window = ("'digest/comments:cust_' || " + d.pad("r") + " || '/' || "
              + d.iso("t0 - 900.0"))
    if seg.kind == "digest":
        key = f"{window} || {d.text('key_suffix')}"
    else:
        number = d.pad("n") if seg.pick == "campaign" else "n"
        key = f"{d.text('key_prefix')} || {number} || {d.text('key_suffix')}"
        window = "NULL"
    address = ("'c' || r || '@example.com'" if seg.channel == "email"
               else "'+1555' || " + d.pad("r", 7))
    return f"""{d.with_()} {d.series()},
s(cls, seq, type, base, off, attempt, state, worker) AS (VALUES
{steps_values()}),
a AS (
    SELECT n, ((n * 7919 + :salt) % 1000) AS k, {r} AS r,
           :t_start + (n - 1) * :t_step AS t0,
           :t_start + (n - 1) * :claim_step + :lag AS t1
    FROM g
),
b AS (
    SELECT n, k, r, t0, t1, {class_case(classes, email)} AS c,
           'cust_' || {d.pad('r')} AS rid, {address} AS addr
    FROM a
),
i AS (
    SELECT b.*, {key} AS key, {window} AS window_id FROM b
)"""


def _times(c: Class) -> dict[str, str]:
    """SQL for a class's last-event time, accepted_at and finished_at."""
    def at(step: Step) -> str:
        return f"({'t0' if step.base == 0 else 't1'} + {step.off})"
    last = at(c.steps[-1])
    accepted = next((at(s) for s in c.steps if s.type == "accepted"), "NULL")
    terminal = c.name not in {x.name for x in IN_FLIGHT}
    finish = next((at(s) for s in c.steps if s.type == "accepted"), last) if terminal \
        else "NULL"
    return {"updated": last, "accepted": accepted, "finished": finish}


def intents_sql(d: Dialect, seg: Segment) -> str:
    classes = IN_FLIGHT if seg.kind == "in_flight" else CLASSES
    data = ("'{\"first\":\"C' || r || '\",\"plan\":\"pro\",\"items\":' || (n % 7) || '}'"
            if seg.kind != "digest" else
            "'{\"items\":[{\"by\":\"u1\"},{\"by\":\"u2\"},{\"by\":\"u3\"}]}'")
    if seg.kind == "in_flight":
        due = ":anchor + :due_lo + ((n * 7907) % 1000) * (:due_hi - :due_lo) / 1000.0"
        next_attempt = ("CASE c WHEN 'retrying' THEN :anchor + 86400.0 + (n % 86400) "
                        "ELSE NULL END")
    elif seg.kind == "campaign":
        due, next_attempt = ":logical_at", "CASE c WHEN 'retried' THEN t1 + 60.0 ELSE NULL END"
    else:
        due, next_attempt = "t0", "CASE c WHEN 'retried' THEN t1 + 60.0 ELSE NULL END"
    expires = ":logical_at + :expires_s" if seg.kind == "campaign" else "NULL"
    return f"""INSERT INTO intents (
    key, channel, recipient_id, address, template, data, campaign, occurrence, state,
    due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
    finished_at, attempts, failures, lease_token, send_started_token, next_attempt_at,
    receipt, provider_request_id, disposition, reason)
{_base(d, seg, classes)}
SELECT key, {d.text('channel')}, rid, addr, {d.text('template')}, {data},
       {d.text('campaign')}, {d.text('occurrence')},
       {per_class('c', lambda c: _q(c.state))},
       {due}, {expires}, t0,
       {per_class('c', lambda c: _times(c)['updated'])}, t0, t0,
       {per_class('c', lambda c: _times(c)['accepted'])},
       {per_class('c', lambda c: _times(c)['finished'])},
       {per_class('c', lambda c: str(c.attempts))},
       {per_class('c', lambda c: str(c.failures))},
       {per_class('c', lambda c: str(c.attempts))},
       {per_class('c', lambda c: str(c.attempts) if c.attempts else 'NULL')},
       {next_attempt},
       {per_class('c', lambda c: "'sbx_' || :salt || '_' || n" if c.accepted else 'NULL')},
       {per_class('c', lambda c: "'req_' || :salt || '_' || n" if c.attempts else 'NULL')},
       {per_class('c', lambda c: 'NULL' if c.name in {x.name for x in IN_FLIGHT}
                  else _q('accepted' if c.accepted else c.state))},
       {per_class('c', lambda c: _q(c.reason))}
FROM i"""


def events_sql(d: Dialect, seg: Segment) -> str:
    classes = IN_FLIGHT if seg.kind == "in_flight" else CLASSES
    return f"""INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
{_base(d, seg, classes)}
SELECT i.key, {d.text('channel')}, s.type,
       CASE s.base WHEN 0 THEN i.t0 ELSE i.t1 END + s.off, s.state, s.attempt,
       CASE WHEN s.worker = 1 THEN 'worker-' || {d.text('channel')} || '-' || (i.n % 4) END,
       CASE WHEN s.worker = 1 THEN i.key END,
       CASE WHEN s.type IN ('accepted', 'rejected', 'transient_failure', 'dead')
            THEN 'req_' || :salt || '_' || i.n END,
       CASE s.type WHEN 'accepted' THEN 'r_' || :salt || '_' || i.n
                   WHEN 'transient_failure' THEN 'http 503: upstream unavailable'
                   WHEN 'rejected' THEN 'http 400: invalid recipient'
                   WHEN 'dead' THEN 'retries exhausted'
                   WHEN 'suppressed' THEN 'hard_bounce' END
FROM i JOIN s ON s.cls = i.c
ORDER BY i.n, s.seq"""


def reports_sql(d: Dialect, seg: Segment) -> str:
    """provider_events of the reported classes (delivered, bounced, complained)."""
    return f"""INSERT INTO provider_events (provider, message_id, type, at, received_at, key,
                             detail, bounce)
{_base(d, seg, CLASSES)}
SELECT 'sandbox', 'sbx_' || :salt || '_' || n, c, t1 + s.off, t1 + s.off + 1.0, key, NULL,
       CASE c WHEN 'bounced' THEN 'hard' END
FROM i JOIN s ON s.cls = i.c AND s.type LIKE 'provider_%'"""


def suppressions_sql(d: Dialect, seg: Segment) -> str:
    head, tail = d.insert_ignore("suppressions")
    return f"""{head} (address, kind, reason, source, created_at, key, detail)
{_base(d, seg, CLASSES)}
SELECT addr, 'email', CASE c WHEN 'bounced' THEN 'hard_bounce' ELSE 'complaint' END,
       'webhook:sandbox:sbx_' || :salt || '_' || n, t1 + 120.0, key, NULL
FROM i WHERE c IN ('bounced', 'complained')
{tail}"""


def messages_sql(d: Dialect, seg: Segment) -> str:
    """The queue messages of work in flight (scheduled and retrying), each visible when
    it is due (a retry: at its next attempt)."""
    body = "'{\"key\":\"' || key || '\"}'"
    return f"""INSERT INTO messages (queue, message_id, body, available_at, enqueued_at,
                      receive_count, failures)
{_base(d, seg, IN_FLIGHT)}
SELECT {d.text('channel')}, key, {body},
       CASE c WHEN 'retrying' THEN :anchor + 86400.0 + (n % 86400)
              ELSE :anchor + :due_lo + ((n * 7907) % 1000) * (:due_hi - :due_lo) / 1000.0 END,
       t0, CASE c WHEN 'retrying' THEN 1 ELSE 0 END, CASE c WHEN 'retrying' THEN 1 ELSE 0 END
FROM i WHERE c IN ('scheduled', 'retrying')
ORDER BY n"""


def digest_windows_sql(d: Dialect, seg: Segment) -> str:
    request = ("'{\"recipient\":{\"id\":\"' || rid || '\",\"email\":\"' || addr || "
               "'\"},\"channels\":[\"email\"],\"template\":\"comments-digest\"}'")
    return f"""INSERT INTO digest_windows (window_id, digest_key, state, opened_at, closes_at,
    window_s, wait_s, sliding, max_items, items, added, bytes, request, closed_at,
    intent_keys)
{_base(d, seg, CLASSES)}
SELECT window_id, 'comments:' || rid, 'closed', t0 - 900.0, t0, 900.0, 3600.0,
       {d.boolean(False)}, 50, 3, 3, 120, {request}, t0, '["' || key || '"]'
FROM i"""


def digest_items_sql(d: Dialect, seg: Segment) -> str:
    return f"""INSERT INTO digest_items (digest_key, item_key, window_id, seq, added_at, data,
                          cancelled_at)
{_base(d, seg, CLASSES)}
SELECT 'comments:' || rid, 'comment-' || :salt || '-' || n || '-' || x.j, window_id, x.j,
       t0 - 900.0 + 300.0 * x.j, '{{"by":"u' || x.j || '"}}', NULL
FROM i CROSS JOIN (SELECT 0 AS j UNION ALL SELECT 1 UNION ALL SELECT 2) x"""


def occurrence_sql(d: Dialect) -> str:
    return d.sql("""INSERT INTO occurrences (id, campaign, logical_at, logical_date, kind,
    status, high_water, members, admitted, skipped, passes, created_at, finished_at, reason,
    suppressed)
VALUES (:occurrence, :campaign, :logical_at, :logical_date, 'scheduled', 'done',
        :high_water, :count, :count, 0, :passes, :t_start, :finished, NULL, 0)""")


def throttles_sql(d: Dialect) -> list[str]:
    """Recent windows of one rule (a digest a day per recipient) and their holds."""
    windows = f"""INSERT INTO throttle_windows (rule, recipient, window_start, window_end, sends)
{d.with_()} {d.series()}
SELECT 'one-digest-a-day', 'cust_' || {d.pad('n')}, :day_start, :day_start + 86400.0, 1
FROM g"""
    holds = f"""INSERT INTO throttle_holds (key, rule, window_start, recipient, window_end)
{d.with_()} {d.series()}
SELECT :key_prefix || {d.pad('n')} || :key_suffix, 'one-digest-a-day', :day_start,
       'cust_' || {d.pad('n')}, :day_start + 86400.0
FROM g"""
    return [d.sql(windows), d.sql(holds)]


def params_of(chunk: Chunk, plan: Plan) -> dict[str, Any]:
    seg = chunk.segment
    return {"lo": chunk.lo, "hi": chunk.hi, "salt": seg.salt, "pool": plan.pool,
            "t_start": seg.t_start, "t_step": seg.t_step, "claim_step": seg.claim_step,
            "lag": seg.lag, "key_prefix": seg.key_prefix, "key_suffix": seg.key_suffix,
            "channel": seg.channel, "template": seg.template, "campaign": seg.campaign,
            "occurrence": seg.occurrence, "logical_at": seg.logical_at,
            "expires_s": seg.expires_s, "anchor": plan.anchor, "due_lo": seg.due_in[0],
            "due_hi": seg.due_in[1]}


def chunk_statements(d: Dialect, seg: Segment) -> list[str]:
    """Every statement of one chunk of ``seg``, in order."""
    out = [intents_sql(d, seg), events_sql(d, seg)]
    if seg.kind == "in_flight":
        out.append(messages_sql(d, seg))
    else:
        out += [reports_sql(d, seg)]
        if seg.channel == "email":
            out.append(suppressions_sql(d, seg))
    if seg.kind == "digest":
        out += [digest_windows_sql(d, seg), digest_items_sql(d, seg)]
    return [d.sql(s) for s in out]


# ---------------------------------------------------------------- running it


class Budget:
    """A deadline (``--budget-min``): work checks it between steps and stops cleanly."""

    def __init__(self, minutes: float | None) -> None:
        self.deadline = None if minutes is None else time.monotonic() + minutes * 60.0

    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


@dataclass
class FillResult:
    done: bool
    intents: int
    seconds: float
    chunks_written: int
    resumed_from: int  # intents already there when this run began

    def as_dict(self) -> dict[str, Any]:
        rate = (self.intents - self.resumed_from) / self.seconds if self.seconds > 0 else 0.0
        return {"done": self.done, "intents": self.intents, "seconds": round(self.seconds, 1),
                "chunks_written": self.chunks_written, "resumed_from": self.resumed_from,
                "intents_per_s": round(rate)}


class Filler:
    """Runs a plan's chunks on one connection, one transaction each, skipping those
    recorded as done."""

    def __init__(self, dialect: Dialect, conn: Any, log: Callable[[str], None], *,
                 defer_indexes: bool = True) -> None:
        self.defer_indexes = defer_indexes
        self.d = dialect
        self.conn = conn
        self.log = log

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        return self.conn.execute(sql, params or {})

    def commit(self) -> None:
        self.conn.commit()

    def meta(self) -> dict[str, str]:
        rows = self.execute(f"SELECT name, value FROM {META}").fetchall()
        return {str(k): str(v) for k, v in rows}

    def ensure_meta(self, size: int, anchor: float, schema: int) -> float:
        """The anchor this database was (or is now) filled towards."""
        self.execute(f"CREATE TABLE IF NOT EXISTS {META} (name text PRIMARY KEY, "
                     "value text NOT NULL)")
        meta = self.meta()
        if "anchor" in meta:
            return float(meta["anchor"])
        for name, value in (("anchor", repr(anchor)), ("size", str(size)),
                            ("schema", str(schema))):
            self.execute(self.d.sql(f"INSERT INTO {META} (name, value) VALUES (:n, :v)"),
                         {"n": name, "v": value})
        self.commit()
        return anchor

    def run(self, plan: Plan, budget: Budget) -> FillResult:
        d = self.d
        meta = self.meta()
        if meta.get("filled") == "1":
            return FillResult(True, plan.size, 0.0, 0, plan.size)
        done_before = sum(int(v) for k, v in meta.items() if k.startswith("chunk:"))
        if d.pg:
            self.execute("SET synchronous_commit = off")
            for name, lower, upper in plan.partitions:
                self.execute(f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF events "
                             f"FOR VALUES FROM ({lower}) TO ({upper})")
            if self.defer_indexes and not done_before:
                self._drop_indexes()
            self.commit()
        started = time.monotonic()
        written = 0
        made = done_before
        last_print = started
        statements: dict[str, list[str]] = {}
        chunk_size = CHUNK[d.name]
        occurrence_sql_ = occurrence_sql(d)
        pending = 0
        for chunk in plan.chunks(chunk_size):
            if f"chunk:{chunk.id}" in meta:
                continue
            if budget.spent():
                self.commit()
                self.log(f"  fill stopped by --budget-min at {made:,} of {plan.size:,} "
                         "intents; run again to go on")
                return FillResult(False, made, time.monotonic() - started, written,
                                  done_before)
            seg = chunk.segment
            family = f"{seg.kind}/{seg.channel}/{seg.pick}"
            if family not in statements:
                statements[family] = chunk_statements(d, seg)
            params = params_of(chunk, plan)
            for sql in statements[family]:
                self.execute(sql, params)
            if seg.kind == "campaign" and chunk.hi == seg.count:
                self.execute(occurrence_sql_, {
                    "occurrence": seg.occurrence, "campaign": seg.campaign,
                    "logical_at": seg.logical_at, "logical_date": seg.logical_date,
                    "high_water": recipient_id(seg.count), "count": seg.count,
                    "passes": max(1, math.ceil(seg.count / 100_000)), "t_start": seg.t_start,
                    "finished": seg.t_start + seg.count * seg.t_step})
            n = chunk.hi - chunk.lo + 1
            self.execute(d.sql(f"INSERT INTO {META} (name, value) VALUES (:n, :v)"),
                         {"n": f"chunk:{chunk.id}", "v": str(n)})
            pending += n
            if pending >= chunk_size:  # small segments share a transaction
                self.commit()
                pending = 0
            written += 1
            made += n
            now = time.monotonic()
            if now - last_print >= 10.0:
                rate = (made - done_before) / (now - started)
                left = (plan.size - made) / rate if rate > 0 else float("inf")
                self.log(f"  fill: {made:,} / {plan.size:,} intents ({made / plan.size:.0%}), "
                         f"{rate:,.0f}/s, ~{left / 60:.1f} min left")
                last_print = now
        self.commit()
        self._finish(plan)
        return FillResult(True, made, time.monotonic() - started, written, done_before)

    def _drop_indexes(self) -> None:
        """Drop the secondary indexes of intents and events for the fill, their
        definitions kept in the fill's table (so a resumed fill builds them too): one
        sorted build at the end costs far less than an entry per row in each."""
        rows = self.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = "
            "current_schema() AND indexname = ANY(%(names)s)",
            {"names": list(DEFERRED_INDEXES)}).fetchall()
        for name, definition in rows:
            self.execute(f"INSERT INTO {META} (name, value) VALUES (%(n)s, %(v)s)",
                         {"n": f"index:{name}", "v": definition.replace(" ON ONLY ", " ON ")})
            self.execute(f"DROP INDEX {name}")

    def _build_indexes(self) -> None:
        rows = self.execute(f"SELECT name, value FROM {META} WHERE name LIKE 'index:%%'"
                            ).fetchall()
        if not rows:
            return
        self.execute("SET maintenance_work_mem = '512MB'")
        for name, definition in rows:
            started = time.monotonic()
            self.execute(definition)
            self.execute(f"DELETE FROM {META} WHERE name = %(n)s", {"n": name})
            self.commit()
            self.log(f"  index {name.removeprefix('index:')} built in "
                     f"{time.monotonic() - started:.1f} s")

    def _finish(self, plan: Plan) -> None:
        """Throttle windows of the last two days, then statistics (a month-old ledger has
        been analysed by autovacuum many times over; SQLite's is left as tidings leaves
        it), then the mark that says the fill is complete."""
        d = self.d
        if plan.size:
            digest = [s for s in plan.segments if s.campaign == "daily-digest"][-2:]
            for seg in digest:
                day = math.floor(seg.t_start / DAY_S) * DAY_S
                for sql in throttles_sql(d):
                    self.execute(sql, {"lo": 1, "hi": seg.count, "day_start": day,
                                       "key_prefix": seg.key_prefix,
                                       "key_suffix": seg.key_suffix})
        if d.pg:
            self._build_indexes()
        self.execute(d.sql(f"INSERT INTO {META} (name, value) VALUES ('filled', '1')"))
        self.commit()
        if d.pg:
            self.conn.autocommit = True
            for table in ("intents", "events", "messages", "provider_events", "occurrences",
                          "suppressions", "digest_windows", "digest_items",
                          "throttle_windows", "throttle_holds"):
                self.execute(f"VACUUM (ANALYZE) {table}")
            self.conn.autocommit = False


def count_rows(conn: Any, tables: list[str]) -> dict[str, int]:
    out = {}
    for table in tables:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        out[table] = int(row[0])
    return out


def expected_rows(plan: Plan) -> dict[str, int]:
    """What the fill must have written, counted from the plan in Python (the same class
    rule as the SQL), for the smoke's check."""
    intents = events = reports = messages = windows = 0
    for seg in plan.segments:
        classes = IN_FLIGHT if seg.kind == "in_flight" else CLASSES
        for n in range(1, seg.count + 1):
            k = (n * 7919 + seg.salt) % 1000
            c = next((c for c in classes if k < c.upper
                      and (not c.email_only or seg.channel == "email")), BY_NAME["delivered"])
            intents += 1
            events += len(c.steps)
            reports += c.report is not None
            messages += c.name in ("scheduled", "retrying")
        if seg.kind == "digest":
            windows += seg.count
    return {"intents": intents, "events": events, "provider_events": reports,
            "messages": messages, "digest_windows": windows, "digest_items": 3 * windows,
            "occurrences": sum(1 for s in plan.segments if s.kind == "campaign")}


def sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level="DEFERRED")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA cache_size = -262144")
    return conn
