"""The rules every entry point applies, outside HTTP: the text rule over JSON data, the
supported dates of the scheduler, and ``notify``, preferences and webhooks refusing what
no store holds."""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.admission.intake import NotifyRequest, drafts_for
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.cron import EARLIEST_DATE, LATEST_DATE, Schedule, check_instant, logical_day
from tidings.core.errors import InvalidInput
from tidings.core.keys import check_json_text, make_storable, storable
from tidings.operate import operations
from tidings.runtime import build_runtime
from tidings.webhooks.parse import parse

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}
NOW = 1_786_698_005.0

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


# ---------------------------------------------------------------- text in JSON


@given(json_values)
def test_json_data_passes_exactly_when_every_string_in_it_is_storable(value: object) -> None:
    strings: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict):
            strings += list(item)
            pending += list(item.values())
        elif isinstance(item, list):
            pending += item

    try:
        check_json_text(value, "data")
        passed = True
    except InvalidInput as exc:
        passed = False
        assert exc.field.startswith("data")
        assert storable(exc.field)  # the field shows a bad key escaped, never carries it

    assert passed == all(storable(s) for s in strings)


@pytest.mark.parametrize(("value", "field"), [
    ({"a": {"b": [1, "x\x00"]}}, "data.a.b[1]"),
    ({"bad key\ud800": 1}, "data['bad key\\ud800']"),
    ([{"ok": "y"}, "\udfff"], "data[1]"),
])
def test_the_field_names_the_place_inside_the_data(value: object, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_json_text(value, "data")
    assert caught.value.field == field


def test_data_nested_far_deeper_than_a_recursion_limit_is_walked() -> None:
    deep: object = "x\x00"
    for _ in range(50_000):
        deep = [deep]
    with pytest.raises(InvalidInput, match="NUL"):
        check_json_text(deep, "data")


@given(st.text())
def test_make_storable_is_always_storable_and_keeps_storable_text(text: str) -> None:
    assert storable(make_storable(text))
    assert (make_storable(text) == text) == storable(text)


# ---------------------------------------------------------------- supported dates


@pytest.mark.parametrize("text", ["0001-01-01", "1970-01-01", "9999-01-01", "9999-12-31"])
def test_a_day_outside_the_range_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidInput, match="outside the supported dates") as caught:
        logical_day(text, "schedule_day")
    assert caught.value.field == "schedule_day"


@given(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)),
       st.sampled_from(["0 9 * * *", "*/15 * * * *", "0 0 29 2 *", "30 2 * * 0"]),
       st.sampled_from(["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Berlin"]))
def test_replay_of_any_date_is_an_occurrence_or_invalid_input_never_a_crash(
        day: date, cron: str, zone: str) -> None:
    schedule = Schedule(cron, zone)
    try:
        occurrence = schedule.occurrence_for(day.isoformat())
    except InvalidInput as exc:
        assert exc.field == "date"
        return
    assert EARLIEST_DATE <= day <= LATEST_DATE
    check_instant(occurrence.logical_at, "logical_at")


@pytest.mark.parametrize("at", [math.inf, -math.inf, math.nan, 1e300, -1.0, 0.0,
                                253_402_300_800.0, 10**400, True, "1786698005"])
def test_an_instant_outside_the_range_or_not_a_number_is_refused(at: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_instant(at, "due_at")
    assert caught.value.field == "due_at"


def test_the_edges_of_the_range_are_instants() -> None:
    first = Schedule("0 0 * * *", "Pacific/Kiritimati").occurrence_for("1970-01-02")
    last = Schedule("59 23 * * *", "Etc/GMT+12").occurrence_for("9998-12-31")
    assert check_instant(first.logical_at, "at") > 0
    assert check_instant(last.logical_at, "at") == last.logical_at


# ---------------------------------------------------------------- notify


def notify(**change: object) -> NotifyRequest:
    fields: dict[str, object] = {"key": "order-1", "channels": ["email"],
                                 "template": "receipt/v1",
                                 "recipient": {"id": "c1", "email": "c1@example.com"}}
    fields.update(change)
    return NotifyRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("change", "field"), [
    ({"due_at": math.inf}, "due_at"),
    ({"due_at": 10.0**300}, "due_at"),
    ({"expires_at": math.nan}, "expires_at"),
    ({"template": "receipt\x00/v1"}, "template"),
    ({"recipient": {"id": "c\x001", "email": "c1@example.com"}}, "recipient.id"),
    ({"recipient": {"id": "c1", "email": "c1\ud800@example.com"}}, "recipient.email"),
    ({"data": {"note": ["ok", "a\x00"]}}, "data.note[1]"),
])
def test_notify_refuses_what_no_store_holds_naming_the_field(
        change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        drafts_for(notify(**change), known_channels={"email": "email"}, now=NOW)
    assert caught.value.field == field


def _cycle() -> dict[str, object]:
    looped: dict[str, object] = {}
    looped["self"] = looped
    return looped


def _shared(levels: int) -> list[object]:
    # One list held twice at every level: 2**levels paths to walk, few objects.
    shared: list[object] = ["x"]
    for _ in range(levels):
        shared = [shared, shared]
    return shared


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"data": _cycle()}, "data", "refers to itself"),
    ({"data": {"tree": _shared(100)}}, "data", "refers to itself"),
    ({"data": {"ratio": math.nan}}, "data", "not JSON-serializable"),
    ({"data": {"ratio": -math.inf}}, "data", "not JSON-serializable"),
    ({"data": "abc"}, "data", "must be a mapping"),
    ({"data": [1, 2]}, "data", "must be a mapping"),
    ({"channels": "email"}, "channels", "must be a list"),
    ({"channels": [["email"]]}, "channels[0]", "must be a channel name"),
    ({"channels": ["email", "email"]}, "channels[1]", "repeats channel 'email' (channels[0])"),
    ({"key": "k" * 512}, "key", "with ':email' appended the limit is 506"),
    ({"due_at": NOW - 120, "expires_at": NOW - 60}, "expires_at", "has passed already"),
])
def test_notify_refuses_what_no_worker_could_send_naming_the_field(
        change: dict[str, object], field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        drafts_for(notify(**change), known_channels={"email": "email"}, now=NOW)
    assert (caught.value.field, says in caught.value.message) == (field, True), caught.value


def test_notify_refuses_a_text_check_a_mapping_would_slip_past() -> None:
    from types import MappingProxyType

    with pytest.raises(InvalidInput) as caught:
        drafts_for(notify(data=MappingProxyType({"note": {"inner": "a\x00"}})),
                   known_channels={"email": "email"}, now=NOW)
    assert caught.value.field == "data.note.inner"


async def test_runtime_notify_refuses_an_unknown_template_and_a_bad_address(
        tmp_path: Path) -> None:
    version = tmp_path / "templates" / "receipt" / "v1"
    version.mkdir(parents=True)
    for name, text in (("subject.txt", "Receipt"), ("body.txt", "Thanks"),
                       ("sms.txt", "Thanks")):
        (version / name).write_text(text)
    folder = str(tmp_path / "templates")
    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"kind": "email", "templates": folder, **TWIN},
                     "sms": {"kind": "sms", "templates": folder, **TWIN}}}),
        clock=FakeClock(NOW))
    try:
        refused = []
        for change in ({"template": "receipt/v2"}, {"template": "nope/v1"},
                       {"recipient": {"id": "c1", "email": "not an email"}},
                       {"channels": ["sms"], "recipient": {"id": "c1", "phone": "555"}}):
            request = notify(**change)
            with pytest.raises(InvalidInput) as caught:
                await rt.notify(key=request.key, recipient=request.recipient,
                                channels=request.channels, template=request.template)
            refused.append(caught.value.field)
        with pytest.raises(InvalidInput) as many:
            await rt.notify_many([notify(), notify(key="order-2", template="nope/v1")])
        assert refused == ["template", "template", "recipient.email", "recipient.phone"]
        assert many.value.field == "requests[1].template"
        assert await rt.store.intent_get("order-1:email") is None  # nothing half written
        assert await rt.notify(key="order-3", recipient={"id": "c3", "email": "c3@example.com"},
                               channels=["email"], template="receipt/v1") == ["order-3:email"]
    finally:
        await rt.close()


def test_a_good_notify_still_makes_its_drafts() -> None:
    [draft] = drafts_for(notify(due_at=NOW + 60, data={"n": 1}),
                         known_channels={"email": "email"}, now=NOW)
    assert (draft.key, draft.due_at, json.loads(draft.data)) == ("order-1:email", NOW + 60,
                                                                 {"n": 1})


def test_a_recipients_own_fields_are_template_data_and_the_requests_data_wins() -> None:
    from tidings.core.model import Recipient

    for recipient in ({"id": "c1", "email": "c1@example.com", "name": "Ann", "tier": "gold"},
                      Recipient(id="c1", email="c1@example.com",
                                data={"name": "Ann", "tier": "gold"})):
        [draft] = drafts_for(notify(recipient=recipient, data={"tier": "silver"}),
                             known_channels={"email": "email"}, now=NOW)
        assert json.loads(draft.data) == {"name": "Ann", "tier": "silver"}


@pytest.mark.parametrize(("rid", "says"), [
    (1.5, "must be a string or an integer, not float"),
    (True, "must be a string or an integer, not bool"),
    (None, "is missing"), ("", "is missing"), (["c1"], "not list"),
])
def test_a_recipient_id_of_the_wrong_type_says_so(rid: object, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        drafts_for(notify(recipient={"id": rid, "email": "c1@example.com"}),
                   known_channels={"email": "email"}, now=NOW)
    assert caught.value.field == "recipient.id" and says in caught.value.message


async def test_notify_many_takes_any_iterable_and_refuses_what_is_none(
        tmp_path: Path) -> None:
    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}", "channels": {"email": TWIN}}),
        clock=FakeClock(NOW))
    try:
        for wrong in (None, {"a": 1}, "order-1", 5):
            with pytest.raises(InvalidInput) as caught:
                await rt.notify_many(wrong)  # type: ignore[arg-type]
            assert caught.value.field == "requests", wrong
        made = await rt.notify_many(notify(key=f"g-{i}") for i in range(3))
        assert made == [["g-0:email"], ["g-1:email"], ["g-2:email"]]
    finally:
        await rt.close()


def test_a_channel_is_addressed_by_its_kind_not_its_name() -> None:
    both = {"id": "c1", "email": "c1@example.com", "phone": "+15550100123"}
    drafts = drafts_for(notify(channels=["text", "mail"], recipient=both),
                        known_channels={"text": "sms", "mail": "email"}, now=NOW)
    assert [(d.channel, d.address) for d in drafts] == [("text", "+15550100123"),
                                                        ("mail", "c1@example.com")]
    with pytest.raises(InvalidInput) as caught:
        drafts_for(notify(channels=["text"], recipient={"id": "c1", "email": "c1@example.com"}),
                   known_channels={"text": "sms"}, now=NOW)
    assert caught.value.field == "recipient.phone"


# ---------------------------------------------------------------- webhooks


@pytest.mark.parametrize(("report", "field"), [
    ({"message_id": "m\x001", "event": "delivered"}, "body.message_id"),
    ({"message_id": "m1", "event": "deli\ud800vered"}, "body.event"),
    ({"message_id": "m1", "event": "bounced", "detail": "x\x00"}, "body.detail"),
])
def test_a_webhook_field_no_store_holds_is_refused(report: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse("generic", json.dumps(report).encode(), now=NOW)
    assert caught.value.field == field


@pytest.mark.parametrize("at", [1e300, -1, "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59"])
def test_a_webhook_time_outside_the_supported_dates_is_refused(at: object) -> None:
    report = {"message_id": "m1", "event": "delivered", "at": at}
    with pytest.raises(InvalidInput, match="outside the supported dates") as caught:
        parse("generic", json.dumps(report).encode(), now=NOW)
    assert caught.value.field == "body.at"


def test_a_providers_free_text_is_kept_in_a_make_storable() -> None:
    body = json.dumps([{"event": "bounce", "sg_message_id": "m1.filter0", "timestamp": NOW,
                        "reason": "mailbox\x00full\ud800"}]).encode()

    [event] = parse("sendgrid", body, now=NOW).events

    assert event.detail is not None and storable(event.detail)
    assert "mailbox\ufffdfull\ufffd" in event.detail


# ---------------------------------------------------------------- preferences


async def test_preferences_refuse_a_recipient_id_no_store_holds(tmp_path: Path) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'p.db'}",
                               "channels": {"email": {"quota": "10/s", **TWIN}}})
    async with await build_runtime(settings, clock=FakeClock()) as runtime:
        for call in (runtime.set_preference("a\x00b", "email", opted_out=True),
                     runtime.delete_preference("a\ud800", "email"),
                     runtime.preferences("a\x00")):
            with pytest.raises(InvalidInput) as caught:
                await call
            assert caught.value.field == "recipient_id"


async def test_a_timeline_of_text_no_store_holds_is_invalid_input(tmp_path: Path) -> None:
    # The dashboard's search and the CLI's inspect call this too, not only the JSON API.
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}",
                               "channels": {"email": {"quota": "10/s", **TWIN}}})
    async with await build_runtime(settings, clock=FakeClock()) as runtime:
        for selector, field in (({"key": "a\x00b"}, "key"), ({"key": "a b"}, "key"),
                                ({"recipient": "c\ud800"}, "recipient")):
            with pytest.raises(InvalidInput) as caught:
                await operations.timeline(runtime.store, channels=["email"], **selector)
            assert caught.value.field == field


@pytest.mark.parametrize("text", ["\x1b[31mRED\x1b[0m", "one\r\nfake line", "tab\there",
                                  "\x9b2J", "x" * 501])
def test_a_line_an_operator_writes_has_no_control_character_and_a_bound(text: str) -> None:
    from tidings.core.keys import check_line

    with pytest.raises(InvalidInput) as caught:
        check_line(text, "reason")
    assert caught.value.field == "reason"
    assert check_line("wrong audience: Ünïcode is fine", "reason")


async def test_reasons_are_lines_and_a_second_pause_keeps_the_first_reason(
        tmp_path: Path) -> None:
    from tidings.operate import bulk, holds
    from tidings.operate.operations import switch_admission

    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}", "channels": {"email": TWIN}}),
        clock=FakeClock(NOW))
    try:
        with pytest.raises(InvalidInput) as held:
            await holds.hold(rt.store, scope="channel", name="email", by="ana", now=NOW,
                             reason="\x1b[31mRED\x1b[0m")
        assert held.value.field == "reason" and await rt.store.hold_all() == []
        with pytest.raises(InvalidInput) as bulked:
            await bulk.run(rt.store, bulk.BulkRequest(action="cancel", by="ana",
                                                      channel="email", reason="a\nb"),
                           now=NOW)
        assert bulked.value.field == "reason"

        first, _ = await switch_admission(rt.store, scope="channel", name="email",
                                          paused=True, now=NOW, reason="guardrail: 8% > 5%")
        again, before = await switch_admission(rt.store, scope="channel", name="email",
                                               paused=True, now=NOW + 5, reason="me too")
        assert (again.reason, again.changed_at) == ("guardrail: 8% > 5%", NOW)
        assert before == first
        resumed, was = await switch_admission(rt.store, scope="channel", name="email",
                                              paused=False, now=NOW + 9)
        assert not resumed.paused and was is not None and was.reason == "guardrail: 8% > 5%"
    finally:
        await rt.close()


async def test_a_plug_in_whose_close_raises_leaves_no_store_open(tmp_path: Path) -> None:
    class Breaks:
        name, supports_lookup = "breaks", False

        async def send(self, request: object) -> object:
            raise AssertionError("not sent here")

        async def close(self) -> None:
            raise RuntimeError("close failed")

    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}", "channels": {"push": {}}}),
        clock=FakeClock(NOW), providers={"push": Breaks()})  # type: ignore[dict-item]
    await rt.close()  # no raise: the store and transport are closed after it
    with pytest.raises(Exception, match="closed"):
        await rt.store.intent_counts()


async def test_a_plug_in_may_give_its_own_send_deadline(tmp_path: Path) -> None:
    class Slow:
        name, supports_lookup = "slow", False
        send_deadline_s = 42.0

        async def send(self, request: object) -> object:
            raise AssertionError("not sent here")

        async def close(self) -> None:
            return None

    class Plain(Slow):
        send_deadline_s = float("nan")  # not a deadline: the channel's timeouts decide

    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"push": {}, "fax": {"provider": {"timeout_s": 2}}}}),
        clock=FakeClock(NOW), providers={"push": Slow(), "fax": Plain()})  # type: ignore[dict-item]
    try:
        assert (rt.send_deadline_s("push"), rt.send_deadline_s("fax")) == (42.0, 6.0)
    finally:
        await rt.close()


@pytest.mark.parametrize(("active", "says"), [
    (False, "is false: an inactive recipient is sent nothing"),
    ("no", "must be true or false, not str"),
])
def test_notify_of_an_inactive_recipient_is_refused_not_skipped(active: object,
                                                                says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        drafts_for(notify(recipient={"id": "c1", "email": "c1@example.com", "active": active}),
                   known_channels={"email": "email"}, now=NOW)
    assert caught.value.field == "recipient.active" and says in caught.value.message
