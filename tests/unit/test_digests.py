"""Digests through the runtime, on the embedded store with a fake clock and a provider of
the test's own that keeps every message it is asked to send, rendered (its inbox is the
witness, not the ledger): many notify calls in a window become one message listing the
items in order; replays, late items, cancels, the cap and a closer run twice or killed
between its steps each send every item in exactly one digest."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tidings import Digest, Digested
from tidings.admission import digests as digests_module
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.digest import digest_intent_key, digest_of, window_id
from tidings.core.errors import InvalidInput
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime
from tidings.stores.base import DigestPage

T0 = 1_790_000_000.0
ADA = {"id": "cust-1", "email": "ada@example.com", "name": "Ada"}
COMMENTS = Digest(key="comments:cust-1", window_s=600)


@dataclass
class Inbox:
    """An email provider that keeps what it was asked to send, rendered."""

    sent: list[SendRequest] = field(default_factory=list)
    name: str = "inbox"
    channel: str = "email"
    supports_lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None

    async def send(self, request: SendRequest) -> Outcome:
        self.sent.append(request)
        return Accepted(receipt=f"m{len(self.sent)}")

    async def close(self) -> None:
        return None

    def bodies(self) -> list[str]:
        return [r.content.text if r.content else "" for r in self.sent]


def write_templates(root: Path) -> str:
    folder = root / "comments" / "v1"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("{{ count }} new comments")
    (folder / "body.txt").write_text(
        "Hi {{ name }}:{% for item in items %} [{{ item.text }}]{% endfor %}")
    return str(root)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
async def runtime(tmp_path: Path, clock: FakeClock, inbox: Inbox) -> AsyncIterator[Runtime]:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 's.db'}", "channels": {
        "email": {"kind": "email", "templates": write_templates(tmp_path / "templates")}}})
    rt = await build_runtime(settings, clock=clock, providers={"email": inbox}, campaigns=[])
    yield rt
    await rt.close()


async def comment(runtime: Runtime, key: str, text: str | None = None,
                  digest: Digest | dict[str, Any] = COMMENTS) -> Digested:
    return await runtime.notify(key=key, recipient=ADA, channels=["email"],
                                template="comments/v1", data={"text": text or key},
                                digest=digest)


async def deliver(runtime: Runtime) -> None:
    await runtime.close_digests()
    worker = runtime.worker("email", "w1")
    while await worker.run_once():
        pass


async def test_many_events_in_a_window_become_one_message_in_order(
        runtime: Runtime, clock: FakeClock, inbox: Inbox) -> None:
    first = await comment(runtime, "c1")
    for n in (2, 3, 4, 5):
        clock.advance(60)
        await comment(runtime, f"c{n}")
    await deliver(runtime)
    assert inbox.sent == []  # the window is open for 600 s from its first item

    clock.advance(600 - 4 * 60)
    await deliver(runtime)

    assert len(inbox.sent) == 1
    assert inbox.bodies() == ["Hi Ada: [c1] [c2] [c3] [c4] [c5]"]
    assert inbox.sent[0].content is not None
    assert inbox.sent[0].content.subject == "5 new comments"
    assert inbox.sent[0].key == digest_intent_key(first.window_id, "email")
    assert first.window_id == window_id("comments:cust-1", T0)
    [delivery] = await runtime.inspect(first.intent_keys(["email"])[0])
    assert delivery.intent.state == State.ACCEPTED


async def test_a_replayed_event_lands_in_its_digest_once(
        runtime: Runtime, clock: FakeClock, inbox: Inbox) -> None:
    a = await comment(runtime, "c1")
    again = await comment(runtime, "c1", text="other text")
    assert a.created and not again.created and again.window_id == a.window_id
    clock.advance(600)
    await deliver(runtime)
    # replayed after its digest was sent: still nothing new
    clock.advance(30)
    late_replay = await comment(runtime, "c1")
    assert not late_replay.created and late_replay.window_id == a.window_id
    clock.advance(600)
    await deliver(runtime)

    assert inbox.bodies() == ["Hi Ada: [c1]"]


async def test_an_item_after_the_close_goes_into_the_next_digest(
        runtime: Runtime, clock: FakeClock, inbox: Inbox) -> None:
    await comment(runtime, "c1")
    clock.advance(600)
    late = await comment(runtime, "c2")  # its window's time is up; no closer ran yet
    await deliver(runtime)
    assert inbox.bodies() == ["Hi Ada: [c1]"]

    clock.advance(600)
    await deliver(runtime)
    assert inbox.bodies() == ["Hi Ada: [c1]", "Hi Ada: [c2]"]
    assert late.window_id == window_id("comments:cust-1", T0 + 600)


async def test_a_cancelled_item_is_left_out_and_an_empty_digest_is_not_sent(
        runtime: Runtime, clock: FakeClock, inbox: Inbox) -> None:
    await comment(runtime, "c1")
    await comment(runtime, "c2")
    assert await runtime.cancel_digest_item("comments:cust-1", "c1")
    other = Digest(key="comments:cust-2", window_s=600)
    await comment(runtime, "x1", digest=other)
    assert await runtime.cancel_digest_item("comments:cust-2", "x1")
    with pytest.raises(InvalidInput, match="has no item 'nope'") as refused:
        await runtime.cancel_digest_item("comments:cust-1", "nope")
    assert refused.value.field == "key"

    clock.advance(600)
    closed = await runtime.close_digests()
    await deliver(runtime)

    assert (closed.windows, closed.admitted, closed.empty) == (2, 1, 1)
    assert inbox.bodies() == ["Hi Ada: [c2]"]
    assert not await runtime.cancel_digest_item("comments:cust-1", "c2")  # too late


async def test_the_item_cap_sends_at_once(runtime: Runtime, inbox: Inbox) -> None:
    capped = Digest(key="comments:cust-1", window_s=600, max_items=3)
    answers = [await comment(runtime, f"c{n}", digest=capped) for n in range(1, 5)]
    worker = runtime.worker("email", "w1")
    while await worker.run_once():
        pass

    assert [a.sealed for a in answers] == [False, False, True, False]
    assert inbox.bodies() == ["Hi Ada: [c1] [c2] [c3]"]


async def test_a_sliding_window_waits_for_quiet_within_its_maximum(
        runtime: Runtime, clock: FakeClock, inbox: Inbox) -> None:
    sliding = {"key": "comments:cust-1", "window_s": 100, "sliding": True, "max_wait_s": 250}
    for n in range(6):  # an item every 60 s: never 100 s of quiet
        await comment(runtime, f"c{n}", digest=sliding)
        await deliver(runtime)
        clock.advance(60)
    # items at 0..300 s; the first window closed at its maximum wait, 250 s
    clock.advance(200)
    await deliver(runtime)

    assert inbox.bodies() == ["Hi Ada: [c0] [c1] [c2] [c3] [c4]", "Hi Ada: [c5]"]


async def test_a_closer_stopped_mid_close_leaves_its_windows_to_the_next(
        runtime: Runtime, clock: FakeClock, inbox: Inbox,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a = await comment(runtime, "c1")
    clock.advance(600)
    # killed while making the page's digests: the page's transaction rolls back

    def killed(*args: Any, **kwargs: Any) -> DigestPage:
        raise RuntimeError("killed")

    monkeypatch.setattr(digests_module, "build_page", killed)
    with pytest.raises(RuntimeError, match="killed"):
        await runtime.close_digests()
    monkeypatch.undo()
    window = await runtime.store.digest_window(a.window_id)
    assert window is not None and window.state == "open"
    # sealed by an item that found its time up, then closed by the next pass
    late = await comment(runtime, "c2")
    closed = await runtime.close_digests()
    again = await runtime.close_digests()
    await deliver(runtime)

    assert (closed.windows, closed.admitted, again.windows) == (1, 1, 0)
    assert inbox.bodies() == ["Hi Ada: [c1]"]
    assert late.window_id != a.window_id


async def test_the_call_that_fills_a_window_admits_that_window_alone(
        runtime: Runtime, clock: FakeClock, inbox: Inbox) -> None:
    others = [await comment(runtime, f"o{n}", digest=Digest(key=f"other:{n}", window_s=60))
              for n in range(3)]
    clock.advance(60)  # the others are due; no close pass ran yet
    capped = Digest(key="comments:cust-1", window_s=600, max_items=2)
    await comment(runtime, "c1", digest=capped)
    filled = await comment(runtime, "c2", digest=capped)

    assert filled.sealed
    assert await runtime.store.intent_get(filled.intent_keys(["email"])[0]) is not None
    for other in others:
        assert await runtime.store.intent_get(other.intent_keys(["email"])[0]) is None
    assert (await runtime.store.digest_pending()).windows == 3
    # filled again (a close pass holds it meanwhile, or closed it): nothing more
    again = await runtime.close_digest_windows([filled.window_id])
    assert (again.windows, again.admitted) == (0, 0)
    closed = await runtime.close_digests()
    await deliver(runtime)

    assert (closed.windows, closed.admitted) == (3, 3)
    assert sorted(inbox.bodies()) == ["Hi Ada: [c1] [c2]", "Hi Ada: [o0]", "Hi Ada: [o1]",
                                      "Hi Ada: [o2]"]


@pytest.mark.parametrize(("digest", "field"), [
    ({"key": "", "window_s": 60}, "digest.key"),
    ({"key": "a b", "window_s": 60}, "digest.key"),
    ({"key": "k" * 401, "window_s": 60}, "digest.key"),
    ({"key": "k", "window_s": 0}, "digest.window_s"),
    ({"key": "k", "window_s": float("nan")}, "digest.window_s"),
    ({"key": "k", "window_s": "60"}, "digest.window_s"),
    ({"key": "k", "window_s": 60, "max_items": 0}, "digest.max_items"),
    ({"key": "k", "window_s": 60, "max_items": 1001}, "digest.max_items"),
    ({"key": "k", "window_s": 60, "max_wait_s": 120}, "digest.max_wait_s"),
    ({"key": "k", "window_s": 60, "sliding": True, "max_wait_s": 30}, "digest.max_wait_s"),
    ({"key": "k", "window_s": 60, "sliding": "yes"}, "digest.sliding"),
    ({"key": "k", "window_s": 60, "every": 1}, "digest.every"),
    ({"window_s": 60}, "digest.key"),
    ({"key": "k"}, "digest.window_s"),
])
async def test_a_bad_digest_is_refused_naming_the_field(
        runtime: Runtime, inbox: Inbox, digest: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        await comment(runtime, "c1", digest=digest)
    assert refused.value.field == field
    assert (await runtime.store.digest_pending()).items == 0


async def test_a_digest_item_refuses_what_notify_would_and_what_it_cannot_take(
        runtime: Runtime) -> None:
    with pytest.raises(InvalidInput) as refused:
        await runtime.notify(key="c1", recipient=ADA, channels=["email"],
                             template="comments/v1", data={"text": "x"}, due_at=T0 + 5,
                             digest=COMMENTS)  # type: ignore[call-overload]
    assert refused.value.field == "due_at"
    with pytest.raises(InvalidInput) as refused:
        await runtime.notify(key="c1", recipient={"id": "x"}, channels=["email"],
                             template="comments/v1", digest=COMMENTS)
    assert refused.value.field == "recipient.email"
    with pytest.raises(InvalidInput) as refused:
        await runtime.notify(key="c1", recipient=ADA, channels=["email"],
                             template="nope/v1", digest=COMMENTS)
    assert refused.value.field == "template"
    with pytest.raises(InvalidInput) as refused:
        await runtime.notify(key="c1", recipient=ADA, channels=["email"],
                             template="comments/v1", data={"text": "x" * 300_000},
                             digest=COMMENTS)
    assert refused.value.field == "data"
    assert (await runtime.store.digest_pending()).items == 0


def test_digest_of_takes_a_digest_or_its_fields() -> None:
    assert digest_of(COMMENTS) is COMMENTS
    made = digest_of({"key": "k", "window_s": 60, "sliding": True})
    assert made.wait_s == 240  # four windows by default
    assert Digest(key="k", window_s=60).wait_s == 60
    with pytest.raises(InvalidInput, match="must be a Digest or a mapping"):
        digest_of(["k"])  # type: ignore[arg-type]


@hsettings(max_examples=25, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 400), st.booleans(),
                               st.booleans()), min_size=1, max_size=30))
def test_every_item_lands_in_exactly_one_sent_digest(
        tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[int, int, bool, bool]]
        ) -> None:
    """Items (some replayed, some cancelled at once) at random moments for three keys,
    with closers run at random: each kept item is in exactly one sent message, and no
    cancelled one in any."""
    import asyncio

    async def run() -> None:
        tmp = tmp_path_factory.mktemp("digests")
        clock, inbox = FakeClock(T0), Inbox()
        settings = Settings.parse({"store": f"sqlite:///{tmp / 's.db'}", "channels": {
            "email": {"kind": "email", "templates": write_templates(tmp / "templates")}}})
        runtime = await build_runtime(settings, clock=clock, providers={"email": inbox},
                                      campaigns=[])
        kept: set[str] = set()
        cancelled: set[str] = set()
        try:
            for n, (item, wait, cancel, close) in enumerate(plan):
                key = f"i{item}"
                digest = Digest(key=f"d{item % 3}", window_s=300, max_items=4)
                added = await comment(runtime, key, digest=digest)
                if added.created and cancel and not added.sealed:
                    assert await runtime.cancel_digest_item(digest.key, key)
                    cancelled.add(key)
                elif added.created:
                    kept.add(key)
                clock.advance(wait)
                if close or n == len(plan) - 1:
                    await deliver(runtime)
            clock.advance(10_000)
            await deliver(runtime)
        finally:
            await runtime.close()
        seen = [json.loads(r.data_json)["items"] for r in inbox.sent]
        texts = [i["text"] for items in seen for i in items]
        assert sorted(texts) == sorted(kept)
        assert not cancelled & set(texts)
        assert all(items for items in seen)

    asyncio.run(run())
