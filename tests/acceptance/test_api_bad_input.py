"""What a careless client or an attacker sends ``tidings api``, fuzzed, on both stores.

A real ``tidings api`` process takes hypothesis-made requests over HTTP: publish
(every payload field: unicode with NUL and lone surrogates, control characters, huge
numbers, wrong types, overlong text, dates at the edges of the supported range, unknown
templates, malformed addresses), preferences, cancel, timeline and replay, plus bodies
JSON cannot read. The rule, per answer: never a 5xx, every 4xx names its field in the
API's error shape. Then real worker processes deliver against the sandbox, and the
store must show every intent that a 2xx stood for in a terminal state (one due later
is waiting for its day, and is then cancelled over the API to prove it can be ended).

PostgreSQL needs a server (see tests/conftest.py): without one that half skips, and
under CI it fails.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.api_process import TIDINGS, api_server, create_token
from support.cli_process import migrated
from support.crm import QUERY, write_crm
from tidings.config.settings import Settings
from tidings.core.states import TERMINAL, State
from tidings.runtime import build_runtime

pytestmark = pytest.mark.slow

#: Requests per store; with derandomize the same ones every run.
EXAMPLES = 200
WORKER_GUARD_S = 60.0  # only against a hang: the sandbox takes these in a few seconds

AUDIENCE = [f"cust_{i:03d}" for i in range(1, 31)]
TODAY = datetime.now(UTC).date()
DAYS = [(TODAY + timedelta(days=n)).isoformat() for n in (-1, 0, 1)]
EDGE_DAYS = ["0001-01-01", "1969-12-31", "1970-01-01", "1970-01-02", "9998-12-31",
             "9999-12-31", "2026-02-29", "2028-02-29", "2026-13-01", "2026-00-10",
             "٢٠٢٦-٠٨-١٤", "2026-8-1", "20260814", ""]

# ---------------------------------------------------------------- strategies

# What no store holds (NUL, lone surrogates) as often as everything else odd together.
ODD = st.one_of(st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80"]),
                st.sampled_from(["\x07", "\x1b", "\x7f", "\x85", "\x9f", " ", "\t", "\n", "/",
                                 "\u200b", "\ufeff", "\u2028", "é", "😀", "{", "}", "%", "'",
                                 '"', "\\"]))
TEXT = st.text(st.one_of(st.characters(), ODD), max_size=20)
OVERLONG = st.integers(min_value=201, max_value=3000).map(lambda n: "x" * n)
NUMBERS = st.one_of(st.integers(), st.integers(min_value=10**18, max_value=10**300),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, -1, 1e308, -1e308, 5e-324]))
WRONG = st.one_of(st.none(), st.booleans(), NUMBERS,
                  st.lists(st.integers(), max_size=3),
                  st.dictionaries(TEXT, st.integers(), max_size=2))
JSON = st.recursive(st.none() | st.booleans() | NUMBERS | TEXT,
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=8)


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each ``n`` times as likely (``one_of`` weighs them alike)."""
    return st.sampled_from([s for n, s in choices for _ in range(n)]).flatmap(lambda s: s)


def tainted(value: Any) -> st.SearchStrategy[Any]:
    """``value`` with one odd character put in it somewhere (a string only)."""
    if not isinstance(value, str):
        return st.just(value)
    return st.builds(lambda at, odd: value[:at] + odd + value[at:],
                     st.integers(0, len(value)), ODD)


def fuzzed(*good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A good value (so that some requests are accepted), one with an odd character in
    it (so that the text rule meets every field), or anything else."""
    value = st.one_of(*good)
    return weighted((3, value), (2, value.flatmap(tainted)), (1, TEXT), (1, WRONG),
                    (1, OVERLONG))


customer_ids = fuzzed(st.sampled_from(AUDIENCE), st.from_regex(r"[a-z0-9_.:-]{1,12}",
                                                               fullmatch=True))
days = fuzzed(st.sampled_from(DAYS), st.sampled_from(EDGE_DAYS),
              st.dates().map(lambda d: d.isoformat()))
templates = fuzzed(st.sampled_from(["digest-v2", "receipt-v1", "receipt/v1", "digest/v2"]),
                   st.sampled_from(["digest-v9", "digest-v0", "nothere-v1", "receipt",
                                    "digest", "receipt-v1/x", "../digest-v2"]))
emails = fuzzed(st.sampled_from(["a@example.com", "ops+tag@example.org"]),
                st.sampled_from(["not-an-email", "a@", "@example.com", "a@b", "a b@example.com",
                                 "a@example.com\n", "ä@例え.jp"]))
phones = fuzzed(st.sampled_from(["+15550001234", "+447700900123"]),
                st.sampled_from(["12345", "+0123456789", "+1555abc0000", "+1234567890123456",
                                 "+1 555 000 1234"]))
data = fuzzed(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True),
                              st.integers(-1000, 1000) | st.text(max_size=8), max_size=3),
              st.dictionaries(TEXT, JSON, max_size=3))
queues = fuzzed(st.sampled_from(["digest", "mail", "text"]), st.sampled_from(["nope", ""]))

payloads = st.one_of(
    st.builds(lambda required, optional, extra: {**extra, **required, **optional},
              st.fixed_dictionaries({"customer_id": customer_ids, "schedule_day": days}),
              st.fixed_dictionaries({}, optional={"template": templates, "email": emails,
                                                  "phone": phones, "data": data}),
              st.dictionaries(TEXT, JSON, max_size=2)),
    st.fixed_dictionaries({}, optional={"customer_id": customer_ids, "schedule_day": days}),
    WRONG)

# A good message for each queue, then at most one field changed: most fuzz fails on its
# first bad field, so these find what gets past the checks that come first.
good_data = st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True),
                            st.integers(-1000, 1000) | st.text(max_size=8), max_size=3)
good_bodies = st.one_of(
    st.fixed_dictionaries(
        {"queue": st.just("digest"),
         "payload": st.fixed_dictionaries(
             {"customer_id": st.sampled_from(AUDIENCE), "schedule_day": st.sampled_from(DAYS[1:])},
             optional={"template": st.just("digest-v2"), "data": good_data,
                       "email": st.just("a@example.com"), "phone": st.just("+15550001234")})}),
    st.fixed_dictionaries(
        {"queue": st.just("mail"),
         "payload": st.fixed_dictionaries(
             {"customer_id": st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True),
              "schedule_day": st.sampled_from(DAYS) | st.dates().map(lambda d: d.isoformat()),
              "template": st.sampled_from(["receipt-v1", "receipt/v1"]),
              "email": st.sampled_from(["a@example.com", "ops+tag@example.org"])},
             optional={"data": good_data})}),
    st.fixed_dictionaries(
        {"queue": st.just("text"),
         "payload": st.fixed_dictionaries(
             {"customer_id": st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True),
              "schedule_day": st.sampled_from(DAYS), "template": st.just("receipt-v1"),
              "phone": st.sampled_from(["+15550001234", "+447700900123"])},
             optional={"data": good_data})}))
FIELDS = {"customer_id": customer_ids, "schedule_day": days, "template": templates,
          "email": emails, "phone": phones, "data": data}


def changed(body: dict[str, Any], change: tuple[str, Any] | None) -> dict[str, Any]:
    if change is None:
        return body
    name, value = change
    payload = dict(body["payload"])
    if value is _DROP:
        payload.pop(name, None)
    else:
        payload[name] = value
    return {**body, "payload": payload}


_DROP = object()
changes = weighted((2, st.none()), (3, st.sampled_from(sorted(FIELDS)).flatmap(
    lambda name: st.tuples(st.just(name), weighted((6, FIELDS[name]), (1, st.just(_DROP)))))))
publish_bodies = weighted(
    (6, st.builds(changed, good_bodies, changes)),
    (2, st.fixed_dictionaries({"queue": queues, "payload": payloads})),
    (1, st.fixed_dictionaries({"queue": queues, "payload": payloads, "extra": JSON})),
    (1, JSON))

# Bodies JSON itself chokes on, or the body limit refuses.
RAW_BODIES = [b"", b"null", b"{", b"\xff\xfe",
              b'{"queue": "mail", "payload": ' + b"9" * 5000 + b"}",
              b'{"queue": "mail", "payload": {"customer_id": NaN}}',
              b"[" * 50_000 + b"]" * 50_000,
              b'{"queue": "digest", "payload": {"customer_id": "cust_001", "schedule_day": "'
              + DAYS[1].encode() + b'", "data": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}}",
              b'{"queue": "' + b"q" * 2_000_000 + b'"}']


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: bytes | None
    scope: str


def segment(text: str) -> str:
    """A path segment or query value as a client would percent-encode it (a lone
    surrogate as the bytes of its UTF-8 form, which is no valid UTF-8)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=True).encode()


publish_calls = publish_bodies.map(lambda b: Call("POST", "/v1/queue/publish", dumps(b),
                                                  "publish"))

# Preference ids never match a customer above: quiet hours there would defer a send past
# the end of the test.
recipient_ids = fuzzed(st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True)).map(
    lambda v: f"p:{v}" if isinstance(v, str) else v)
preference_bodies = st.fixed_dictionaries({}, optional={
    "opted_out": fuzzed(st.booleans()), "timezone": fuzzed(st.sampled_from(
        ["UTC", "Europe/London", "Mars/Olympus", "/etc/passwd", "../UTC"])),
    "quiet_start": fuzzed(st.sampled_from(["22:00", "07:30", "24:00", "9:00"])),
    "quiet_end": fuzzed(st.sampled_from(["07:00", "22:15", "25:61", "7"])),
    "unknown": JSON})
channels = fuzzed(st.sampled_from(["email", "sms", "fax"]))


def path_of(value: object) -> str:
    return segment(value if isinstance(value, str) else json.dumps(value))


preference_calls = st.one_of(
    st.builds(lambda rid, ch, body: Call("PUT", f"/v1/preferences/{path_of(rid)}/{path_of(ch)}",
                                         dumps(body), "publish"),
              recipient_ids, channels, st.one_of(preference_bodies, JSON)),
    st.builds(lambda rid, ch: Call("DELETE", f"/v1/preferences/{path_of(rid)}/{path_of(ch)}",
                                   None, "publish"), recipient_ids, channels),
    st.builds(lambda rid: Call("GET", f"/v1/preferences/{path_of(rid)}", None, "viewer"),
              recipient_ids))
cancel_calls = st.builds(
    lambda body: Call("POST", "/v1/cancel", dumps(body), "operator"),
    st.one_of(st.fixed_dictionaries({"key": fuzzed(st.sampled_from(["nope", "a:email"]))},
                                    optional={"reason": fuzzed(st.just("asked"))}), JSON))
timeline_calls = st.builds(
    lambda query: Call("GET", "/v1/timeline?" + "&".join(
        f"{name}={path_of(value)}" for name, value in query.items()), None, "viewer"),
    st.fixed_dictionaries({}, optional={"key": fuzzed(st.just("nope/x")),
                                        "recipient": fuzzed(st.just("cust_001")),
                                        "limit": fuzzed(st.integers(1, 500))}))
replay_calls = st.builds(
    lambda campaign, day: Call("POST", f"/v1/replay/{path_of(campaign)}/{path_of(day)}",
                               None, "operator"),
    fuzzed(st.sampled_from(["digest", "x"])),
    st.one_of(st.sampled_from(EDGE_DAYS), st.sampled_from(DAYS), TEXT, OVERLONG,
              st.dates().map(lambda d: d.isoformat())))
# The cases of the report that asked for this suite, sent as they are on both stores.
NUL, LONE = "\x00", "\ud800"
GOOD = {"customer_id": "cust_001", "schedule_day": DAYS[1]}
REPORTED = [
    *(Call("POST", "/v1/queue/publish", body, "publish") for body in RAW_BODIES),
    *(Call("POST", "/v1/queue/publish", dumps({"queue": "digest", "payload": payload}),
           "publish") for payload in (
        {**GOOD, "customer_id": f"cust{NUL}001"}, {**GOOD, "email": f"a{NUL}@example.com"},
        {**GOOD, "customer_id": f"cust{LONE}001"}, {**GOOD, "schedule_day": "0001-01-01"},
        {**GOOD, "data": {f"k{LONE}": f"v{NUL}"}}, {**GOOD, "template": "digest-v9"},
        {**GOOD, "email": "not-an-address"})),
    Call("PUT", "/v1/preferences/a%00b/email", dumps({"opted_out": True}), "publish"),
    Call("PUT", "/v1/preferences/p:c/email", dumps({"opted_out": "yes"}), "publish"),
    Call("POST", "/v1/cancel", dumps({"key": f"a{NUL}b"}), "operator"),
    Call("GET", "/v1/timeline?key=a%00b", None, "viewer"),
    Call("POST", "/v1/replay/x/0001-01-01", None, "operator"),
    Call("POST", "/v1/replay/digest/0001-01-01", None, "operator"),
]

calls = weighted((14, publish_calls), (3, preference_calls), (1, cancel_calls),
                 (1, timeline_calls), (1, replay_calls))


# ---------------------------------------------------------------- the set-up


def write_templates(root: Path) -> str:
    for template_id in ("digest/v2", "receipt/v1"):
        folder = root / template_id
        folder.mkdir(parents=True)
        (folder / "subject.txt").write_text("A word from us")
        (folder / "body.txt").write_text("Hello {{ recipient_id }}")
        (folder / "sms.txt").write_text("Hello")
    return str(root)


@pytest.fixture(params=["sqlite", "postgresql"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Email and sms channels with kinds and templates (addresses are checked and
    messages rendered, as in production), a daily digest over a SQL audience, a queue
    for the digest and one per channel; on SQLite or PostgreSQL, migrated."""
    store = (f"sqlite:///{tmp_path / 'fuzz.db'}" if request.param == "sqlite"
             else request.getfixturevalue("pg_url"))
    crm = write_crm(tmp_path / "crm.db")
    templates = write_templates(tmp_path / "templates")
    path = tmp_path / "tidings.toml"
    path.write_text(f'''
store = "{store}"
[channels.email]
provider = {{ kind = "sandbox-twin" }}
quota = "200/s"
kind = "email"
templates = "{templates}"
[channels.sms]
provider = {{ kind = "sandbox-twin" }}
quota = "200/s"
kind = "sms"
templates = "{templates}"
[campaigns.digest]
cron = "0 9 * * *"
channels = ["email", "sms"]
template = "digest"
version = 2
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}
[api.queues.digest]
campaign = "digest"
[api.queues.mail]
channel = "email"
[api.queues.text]
channel = "sms"
''')
    migrated(path)
    return path


@dataclass
class Seen:
    """What the API answered: counts by status, and the keys its 2xx publishes stand for."""

    statuses: dict[int, int] = field(default_factory=dict)
    fields: dict[str, int] = field(default_factory=dict)
    """How often each field was named by a refusal."""
    keys: set[str] = field(default_factory=set)
    replays: int = 0


def judge(call: Call, response: httpx.Response, seen: Seen) -> None:
    """Never a 5xx; a 4xx in the error shape naming a field; a 2xx publish's keys kept."""
    status = response.status_code
    seen.statuses[status] = seen.statuses.get(status, 0) + 1
    where = f"{call.method} {call.path[:200]} {(call.body or b'')[:300]!r}"
    assert status < 500, f"{where} -> {status} {response.text[:500]}"
    if status >= 400:
        answer = response.json()
        assert isinstance(answer, dict), where
        assert isinstance(answer.get("field"), str) and answer["field"], (where, answer)
        assert isinstance(answer.get("message"), str) and answer["message"], (where, answer)
        seen.fields[answer["field"]] = seen.fields.get(answer["field"], 0) + 1
        return
    if call.path == "/v1/queue/publish":
        assert status == 202, where
        seen.keys.update(response.json()["keys"])
    elif call.path.startswith("/v1/replay/"):
        seen.replays += 1


@contextmanager
def workers(config: Path) -> Iterator[None]:
    """``tidings worker`` for each channel, stopped by SIGTERM and checked (exit 0)."""
    started = [subprocess.Popen([*TIDINGS, "worker", "--channel", channel, "--config",
                                 str(config)], stderr=subprocess.DEVNULL)
               for channel in ("email", "sms")]
    try:
        yield
        for process in started:
            assert process.poll() is None, "a worker exited while delivering"
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = [process.wait(timeout=30) for process in started]
    assert codes == [0, 0]


async def unfinished(config: Path, keys: set[str]) -> tuple[dict[str, str], list[str]]:
    """Intents not yet terminal (key -> state), and of those the ones due later than
    the relay publishes now (they wait in the store for their day)."""
    runtime = await build_runtime(Settings.load(config), migrate=False)
    async with runtime:
        now = runtime.clock.now()
        horizon = runtime.settings.scheduler.relay_horizon_s
        open_states = [s for s in State if s not in TERMINAL]
        pending = {i.key: i for i in await runtime.store.intent_find(states=open_states,
                                                                      limit=100_000)}
        for key in keys:  # every key a 2xx named exists
            assert key in pending or await runtime.store.intent_get(key) is not None, key
    later = [k for k, i in pending.items()
             if i.state is State.SELECTED and i.due_at > now + horizon]
    return {k: i.state.value for k, i in pending.items()}, later


# ---------------------------------------------------------------- the test


def send(http: httpx.Client, tokens: dict[str, str], call: Call, serial: int) -> httpx.Response:
    headers = {"Authorization": f"Bearer {tokens[call.scope]}"}
    if call.body is not None:
        headers["Content-Type"] = "application/json"
    if call.path == "/v1/queue/publish":
        headers["Idempotency-Key"] = f"fuzz-{serial}"
    return http.request(call.method, call.path, content=call.body, headers=headers)


def test_no_input_gets_a_5xx_and_every_accepted_one_ends(config: Path) -> None:
    tokens = {scope: create_token(config, scope) for scope in ("publish", "viewer", "operator")}
    seen = Seen()
    serial = itertools.count()
    with api_server(config, {}) as base, httpx.Client(base_url=base, timeout=30) as http:

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.filter_too_much])
        @given(calls)
        def request(call: Call) -> None:
            judge(call, send(http, tokens, call, next(serial)), seen)

        for call in REPORTED:
            response = send(http, tokens, call, next(serial))
            judge(call, response, seen)
            assert 400 <= response.status_code < 500, (call, response.text)
        request()

        # Some of each: refusals and acceptances both, or the fuzzing proved little.
        assert sum(n for s, n in seen.statuses.items() if s == 422) > EXAMPLES // 4, seen
        assert len(seen.keys) >= EXAMPLES // 10, seen

        with workers(config):
            deadline = time.monotonic() + WORKER_GUARD_S
            while True:
                open_intents, later = asyncio.run(unfinished(config, seen.keys))
                if set(open_intents) == set(later):
                    break
                assert time.monotonic() < deadline, f"not terminal: {open_intents}"
                time.sleep(0.25)

        # What waits for its day can still be ended: an operator cancels it.
        operator = {"Authorization": f"Bearer {tokens['operator']}"}
        for key in later:
            cancelled = http.post("/v1/cancel", json={"key": key}, headers=operator)
            assert cancelled.json() == {"cancelled": {key: "cancelled"}}, cancelled.text
        left, _ = asyncio.run(unfinished(config, seen.keys))
        assert left == {}
