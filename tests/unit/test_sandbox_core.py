"""SandboxCore: quota windows, injected faults, dedupe, counts — on an injected clock."""

from __future__ import annotations

import json
import random
import statistics
from email.utils import parsedate_to_datetime

import pytest

from tidings.core.errors import ConfigurationError
from tidings.sandbox import AnswerKind, LatencySpec, SandboxAnswer, SandboxConfig, SandboxCore
from tidings.sandbox import counts as counts_module

T0 = 1_780_000_000.25


class Now:
    """A settable time source for the core."""

    def __init__(self, start: float = T0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def make(now: Now | None = None, seed: int = 7, **config: object) -> tuple[SandboxCore, Now]:
    now = now or Now()
    return SandboxCore(SandboxConfig.from_dict(config), now=now, seed=seed), now


def send(core: SandboxCore, key: str, to: str = "ada@example.com",
         channel: str = "email") -> SandboxAnswer:
    return core.handle(channel, key, to)


# ---------------------------------------------------------------- configuration


def test_defaults_match_the_documented_quotas() -> None:
    config = SandboxConfig()
    assert dict(config.quotas) == {"email": 1000, "sms": 100}
    assert config.dedupe is True
    assert config.retry_after_s == 1.0
    assert config.hang_s == 30.0


def test_config_round_trips_through_plain_data() -> None:
    config = SandboxConfig.from_dict({
        "quotas": {"email": 5},
        "latency": {"email": {"median_ms": 5, "p99_ms": 40}, "sms": 0},
        "rate_limit": 0.1, "server_error": 0.2, "retry_after_date_share": 0.5,
        "reject_addresses": ["@invalid.example"], "dedupe": False,
    })
    assert config.latency["email"] == LatencySpec(median_ms=5, p99_ms=40)
    assert config.latency["sms"] == LatencySpec(median_ms=0, p99_ms=0)
    assert SandboxConfig.from_dict(config.to_dict()) == config
    assert SandboxConfig.from_json(json.dumps(config.to_dict())) == config


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"quotas": {"email": 0}}, "quotas.email"),
        ({"quotas": {"email": 2.5}}, "quotas.email"),
        ({"quotas": ["email"]}, "quotas"),
        ({"rate_limit": 1.5}, "rate_limit"),
        ({"server_error": "often"}, "server_error"),
        ({"timeout": True}, "timeout"),
        ({"rate_limit": 0.6, "lost_response": 0.6}, "rate_limit"),
        ({"retry_after_date_share": 0.7, "retry_after_missing_share": 0.7},
         "retry_after_date_share"),
        ({"latency": {"email": {"median_ms": -1}}}, "latency.email.median_ms"),
        ({"latency": {"email": {"p50": 3}}}, "latency.email.p50"),
        ({"latency": {"email": "fast"}}, "latency.email"),
        ({"reject_addresses": "@invalid.example"}, "reject_addresses"),
        ({"fail_addresses": [""]}, "fail_addresses"),
        ({"dedupe": "yes"}, "dedupe"),
        ({"hang_s": 0}, "hang_s"),
        ({"quota": {"email": 1}}, "quota"),
    ],
)
def test_bad_config_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SandboxConfig.from_dict(data)
    assert caught.value.field == field


def test_bad_json_config_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SandboxConfig.from_json("{not json")
    assert caught.value.field == "config"


# ---------------------------------------------------------------- quota


def test_quota_counts_every_request_in_its_one_second_window() -> None:
    core, now = make(quotas={"email": 3})
    answers = [send(core, f"k{i}") for i in range(5)]

    assert [a.kind for a in answers] == [AnswerKind.ACCEPTED] * 3 + [AnswerKind.REFUSED_QUOTA] * 2
    refused = answers[3]
    assert refused.status == 429
    assert refused.retry_after == "1"  # 0.75 s to the next window, rounded up
    assert refused.receipt is None

    now.t += 1.0  # the next window starts fresh
    assert send(core, "k3").kind is AnswerKind.ACCEPTED

    email = core.stats()["channels"]["email"]
    window = int(T0)
    assert email["requests_per_window"] == {window: 5, window + 1: 1}
    assert email["accepted_per_window"] == {window: 3, window + 1: 1}
    assert email["refused_quota"] == 2
    assert email["max_rate_1s"] == 5
    assert email["quota_violations"] == 1
    assert email["accepted"] == 4


def test_refused_requests_still_use_up_the_window() -> None:
    # A client hammering with retries inside one second keeps being refused.
    core, _ = make(quotas={"email": 2})
    for i in range(4):
        send(core, f"k{i}")
    assert send(core, "k0").kind is AnswerKind.REFUSED_QUOTA
    assert core.stats()["channels"]["email"]["requests"] == 5


def test_quotas_are_per_channel() -> None:
    core, _ = make(quotas={"email": 1, "sms": 1})
    assert send(core, "e1").kind is AnswerKind.ACCEPTED
    assert core.handle("sms", "s1", "+15551234567").kind is AnswerKind.ACCEPTED
    assert send(core, "e2").kind is AnswerKind.REFUSED_QUOTA
    stats = core.stats()
    assert stats["channels"]["sms"]["quota_violations"] == 0
    assert stats["channels"]["email"]["quota_violations"] == 1
    assert stats["total"]["requests_per_window"] == {int(T0): 3}


def test_unknown_channel_is_not_found_and_counted_apart() -> None:
    core, _ = make()
    answer = core.handle("pigeon", "k", "ada@example.com")
    assert (answer.kind, answer.status) == (AnswerKind.UNKNOWN_CHANNEL, 404)
    stats = core.stats()
    assert stats["total"]["unknown_channel"] == 1
    assert stats["total"]["requests"] == 0


# ---------------------------------------------------------------- injected faults


def test_injected_rate_limit_uses_the_configured_retry_after() -> None:
    core, _ = make(rate_limit=1.0, retry_after_s=3)
    answer = send(core, "k")
    assert (answer.kind, answer.status, answer.retry_after) == (
        AnswerKind.REFUSED_INJECTED, 429, "3")
    assert core.stats()["channels"]["email"]["refused_injected"] == 1
    assert core.lookup("k") is None


def test_injected_rate_limit_can_announce_an_http_date() -> None:
    core, now = make(rate_limit=1.0, retry_after_s=2, retry_after_date_share=1.0)
    header = send(core, "k").retry_after
    assert header is not None and header.endswith("GMT")
    when = parsedate_to_datetime(header).timestamp()
    # Whole seconds, rounded up so that a client never comes back before the delay.
    assert now.t + 2 <= when < now.t + 3


def test_injected_rate_limit_can_omit_retry_after() -> None:
    core, _ = make(rate_limit=1.0, retry_after_missing_share=1.0)
    answer = send(core, "k")
    assert answer.status == 429
    assert answer.retry_after is None


def test_retry_after_formats_are_mixed_by_share() -> None:
    core, _ = make(quotas={"email": 10_000}, rate_limit=1.0,
                   retry_after_date_share=0.3, retry_after_missing_share=0.2)
    headers = [send(core, f"k{i}").retry_after for i in range(1000)]
    missing = sum(h is None for h in headers)
    dates = sum(h is not None and h.endswith("GMT") for h in headers)
    seconds = sum(h == "1" for h in headers)
    assert missing + dates + seconds == 1000
    assert 150 < missing < 250
    assert 250 < dates < 350


def test_server_error_is_not_an_acceptance() -> None:
    core, _ = make(server_error=1.0)
    answer = send(core, "k")
    assert (answer.kind, answer.status, answer.receipt) == (AnswerKind.SERVER_ERROR, 503, None)
    email = core.stats()["channels"]["email"]
    assert (email["server_errors"], email["accepted"]) == (1, 0)


def test_timeout_is_never_answered_nor_accepted() -> None:
    core, _ = make(timeout=1.0)
    answer = send(core, "k")
    assert (answer.kind, answer.status, answer.receipt) == (AnswerKind.TIMEOUT, None, None)
    assert core.lookup("k") is None
    email = core.stats()["channels"]["email"]
    assert (email["timeouts"], email["accepted"]) == (1, 0)


def test_lost_response_is_accepted_but_not_answered() -> None:
    core, _ = make(lost_response=1.0)
    answer = send(core, "k")
    assert answer.kind is AnswerKind.LOST_RESPONSE
    assert answer.status is None
    assert answer.receipt is not None
    assert core.lookup("k") == ("email", answer.receipt)
    email = core.stats()["channels"]["email"]
    assert (email["lost_responses"], email["accepted"], email["accepted_keys"]) == (1, 1, 1)


def test_lost_response_of_a_duplicate_keeps_the_first_receipt() -> None:
    core, _ = make()
    first = send(core, "k")
    core.configure(SandboxConfig(lost_response=1.0))
    again = send(core, "k")
    assert again.kind is AnswerKind.LOST_RESPONSE
    assert again.receipt == first.receipt
    email = core.stats()["channels"]["email"]
    assert (email["accepted"], email["deduplicated"], email["lost_responses"]) == (1, 1, 1)


def test_fault_probabilities_hold_over_many_requests() -> None:
    core, _ = make(quotas={"email": 100_000}, rate_limit=0.1, server_error=0.1,
                   timeout=0.05, lost_response=0.05)
    for i in range(4000):
        send(core, f"k{i}")
    email = core.stats()["channels"]["email"]
    assert 300 < email["refused_injected"] < 500
    assert 300 < email["server_errors"] < 500
    assert 130 < email["timeouts"] < 270
    assert 130 < email["lost_responses"] < 270
    # Everything neither refused nor timed out was accepted, lost replies included.
    assert email["accepted"] == 4000 - email["refused_injected"] - email["server_errors"] - (
        email["timeouts"])


def test_same_seed_same_story() -> None:
    def story(seed: int) -> list[tuple[AnswerKind, str | None]]:
        core, _ = make(seed=seed, quotas={"email": 10_000}, rate_limit=0.2, server_error=0.2,
                       lost_response=0.2)
        return [(a.kind, a.receipt) for a in (send(core, f"k{i}") for i in range(200))]

    assert story(1) == story(1)
    assert story(1) != story(2)


# ---------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("channel", "to", "kind"),
    [
        ("email", "ada@example.com", AnswerKind.ACCEPTED),
        ("email", "bob@invalid.example", AnswerKind.REJECTED),
        ("email", "BOB@INVALID.EXAMPLE", AnswerKind.REJECTED),
        ("email", "blocked@example.com", AnswerKind.REJECTED),
        ("email", "not-an-address", AnswerKind.REJECTED),
        ("email", "two@@example.com", AnswerKind.REJECTED),
        ("sms", "+15551234567", AnswerKind.ACCEPTED),
        ("sms", "+15550009999", AnswerKind.REJECTED),
        ("sms", "5551234567", AnswerKind.REJECTED),
        ("email", "flaky@example.com", AnswerKind.SERVER_ERROR),
    ],
)
def test_addresses_are_judged(channel: str, to: str, kind: AnswerKind) -> None:
    core, _ = make(reject_addresses=["@invalid.example", "blocked@example.com", "+1555000*"],
                   fail_addresses=["flaky@example.com"])
    answer = core.handle(channel, "k", to)
    assert answer.kind is kind
    if kind is AnswerKind.REJECTED:
        assert answer.status == 422
        assert answer.error and ("malformed" in answer.error or "rejected" in answer.error)


def test_fail_addresses_fail_every_time() -> None:
    core, _ = make(fail_addresses=["@down.example"])
    answers = [send(core, "k", to="x@down.example") for _ in range(5)]
    assert {a.status for a in answers} == {503}
    assert core.stats()["channels"]["email"]["server_errors"] == 5
    assert core.lookup("k") is None


def test_stopped_numbers_are_refused_as_a_stop_every_time() -> None:
    core, _ = make(stopped_addresses=["+15550009999"])
    answers = [send(core, f"k{n}", to="+15550009999", channel="sms") for n in range(3)]
    other = send(core, "fine", to="+15550001111", channel="sms")

    assert {(a.status, a.stopped) for a in answers} == {(422, True)}
    assert (other.accepted, other.stopped) == (True, False)
    assert core.stats()["channels"]["sms"]["rejected"] == 3
    assert SandboxConfig.from_dict(core.config.to_dict()) == core.config


def test_missing_key_or_address_is_a_bad_request() -> None:
    core, _ = make()
    no_key = core.handle("email", None, "ada@example.com")
    no_to = core.handle("email", "k", None)
    bad_body = core.handle("email", "k", "ada@example.com", problem="data: must be an object")
    assert [a.status for a in (no_key, no_to, bad_body)] == [400, 400, 400]
    assert no_key.error is not None and "Idempotency-Key" in no_key.error
    assert bad_body.error == "data: must be an object"
    email = core.stats()["channels"]["email"]
    assert (email["bad_requests"], email["requests"], email["accepted"]) == (3, 3, 0)


# ---------------------------------------------------------------- dedupe


def test_dedupe_answers_a_known_key_with_the_same_receipt() -> None:
    core, _ = make()
    first = send(core, "k")
    again = send(core, "k")
    assert (first.kind, first.status) == (AnswerKind.ACCEPTED, 202)
    assert (again.kind, again.status) == (AnswerKind.DEDUPLICATED, 200)
    assert again.receipt == first.receipt
    email = core.stats()["channels"]["email"]
    assert (email["accepted"], email["accepted_keys"], email["deduplicated"]) == (1, 1, 1)
    assert (email["accepted_twice"], email["keys_accepted_twice"]) == (0, 0)


def test_without_dedupe_a_second_send_is_a_second_message() -> None:
    core, _ = make(dedupe=False)
    first = send(core, "k")
    again = send(core, "k")
    third = send(core, "k")
    assert {first.kind, again.kind, third.kind} == {AnswerKind.ACCEPTED}
    assert len({first.receipt, again.receipt, third.receipt}) == 3
    assert core.lookup("k") == ("email", first.receipt)
    email = core.stats()["channels"]["email"]
    assert (email["accepted"], email["accepted_keys"], email["accepted_twice"]) == (3, 1, 2)
    assert email["keys_accepted_twice"] == 1
    assert email["keys_accepted_twice_sample"] == ["k"]
    assert core.stats()["total"]["accepted_twice"] == 2


def test_dedupe_is_per_channel() -> None:
    core, _ = make()
    email = core.handle("email", "k", "ada@example.com")
    sms = core.handle("sms", "k", "+15551234567")
    assert sms.kind is AnswerKind.ACCEPTED
    assert core.lookup("k", "email") == ("email", email.receipt)
    assert core.lookup("k", "sms") == ("sms", sms.receipt)
    assert core.lookup("other") is None


# ---------------------------------------------------------------- latency


def test_latency_is_lognormal_with_the_configured_median_and_p99() -> None:
    core, _ = make(quotas={"email": 100_000}, latency={"email": {"median_ms": 5, "p99_ms": 40}})
    samples = sorted(send(core, f"k{i}").latency_s for i in range(4000))
    assert statistics.median(samples) == pytest.approx(0.005, rel=0.1)
    assert samples[int(0.99 * len(samples))] == pytest.approx(0.040, rel=0.25)
    assert core.handle("sms", "s", "+15551234567").latency_s == 0.0


def test_constant_latency_and_none() -> None:
    assert LatencySpec(median_ms=7, p99_ms=7).sample_s(random.Random(1)) == 0.007
    assert LatencySpec().sample_s(random.Random(1)) == 0.0


# ---------------------------------------------------------------- stats, reset, memory


def test_stats_are_json_and_totals_add_up() -> None:
    core, now = make(quotas={"email": 2, "sms": 5})
    for i in range(3):
        send(core, f"e{i}")
        core.handle("sms", f"s{i}", "+15551234567")
    now.t += 1
    send(core, "e9")
    stats = json.loads(json.dumps(core.stats()))
    total = stats["total"]
    assert total["requests"] == 7
    assert total["accepted"] == 2 + 3 + 1
    assert total["refused_quota"] == 1
    assert total["quota_violations"] == 1
    assert total["max_rate_1s"] == 6
    assert total["accepted_per_window"] == {str(int(T0)): 5, str(int(T0) + 1): 1}
    assert stats["channels"]["sms"]["quota"] == 5
    assert stats["config"]["quotas"] == {"email": 2, "sms": 5}


def test_reset_forgets_counts_and_keys_but_keeps_config() -> None:
    core, _ = make(quotas={"email": 1})
    first = send(core, "k")
    core.reset()
    assert core.stats()["total"]["requests"] == 0
    assert core.lookup("k") is None
    again = send(core, "k")
    assert again.kind is AnswerKind.ACCEPTED
    assert again.receipt == first.receipt  # the random streams restart from the seed
    assert core.config.quotas["email"] == 1


def test_configure_keeps_counts_and_accepted_keys() -> None:
    core, _ = make()
    first = send(core, "k")
    core.configure(SandboxConfig(server_error=1.0))
    assert send(core, "k2").status == 503
    assert core.lookup("k") == ("email", first.receipt)
    assert core.stats()["channels"]["email"]["requests"] == 2


def test_series_keep_a_bounded_number_of_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counts_module, "SERIES_WINDOWS", 3)
    core, now = make(quotas={"email": 1})
    for i in range(5):
        send(core, f"a{i}")
        send(core, f"b{i}")  # over quota: one violation per window
        now.t += 1
    email = core.stats()["channels"]["email"]
    assert sorted(email["requests_per_window"]) == [int(T0) + 2, int(T0) + 3, int(T0) + 4]
    # Running figures cover every window, pruned or not.
    assert email["quota_violations"] == 5
    assert email["max_rate_1s"] == 2


# ---------------------------------------------------------------- a request of many messages


def test_a_request_of_many_messages_counts_once_against_the_quota() -> None:
    core, now = make(quotas={"email": 2})
    messages = [(f"k{i}", f"r{i}@example.com", None) for i in range(50)]
    first = core.handle_request("email", messages)
    second = core.handle_request("email", [(f"j{i}", f"s{i}@example.com", None)
                                           for i in range(50)])
    third = core.handle_request("email", [("late", "late@example.com", None)])

    assert all(a.kind is AnswerKind.ACCEPTED for a in first + second)
    assert len({a.receipt for a in first + second}) == 100
    # the third request of the second is over the quota of 2 requests: refused whole
    assert third[0].kind is AnswerKind.REFUSED_QUOTA and third[0].receipt is None
    stats = core.stats()["channels"]["email"]
    assert (stats["requests"], stats["accepted"]) == (3, 100)
    now.t += 1
    assert core.handle_request("email", [("late", "late@example.com", None)])[0].accepted


def test_each_message_of_a_request_is_refused_or_accepted_on_its_own() -> None:
    core, _ = make(reject_addresses=["bad@example.com"])
    answers = core.handle_request("email", [("a", "ok@example.com", None),
                                            ("b", "bad@example.com", None),
                                            ("c", None, "The `to` field is missing."),
                                            ("d", "fine@example.com", None)])
    assert [a.kind for a in answers] == [AnswerKind.ACCEPTED, AnswerKind.REJECTED,
                                         AnswerKind.BAD_REQUEST, AnswerKind.ACCEPTED]
    assert answers[2].error == "The `to` field is missing."


def test_a_lost_answer_loses_the_reply_to_every_message_of_the_request() -> None:
    core, _ = make(lost_response=1.0)
    answers = core.handle_request("email", [("a", "a@example.com", None),
                                            ("b", "b@example.com", None)])
    assert [a.kind for a in answers] == [AnswerKind.LOST_RESPONSE] * 2
    assert all(a.receipt is not None and a.status is None for a in answers)
    assert core.lookup("a", "email") is not None and core.lookup("b", "email") is not None


def test_the_series_constants_moved_to_counts_and_still_read_from_core() -> None:
    with pytest.warns(DeprecationWarning, match="tidings.sandbox.counts.SERIES_WINDOWS"):
        from tidings.sandbox import core

        assert core.SERIES_WINDOWS == counts_module.SERIES_WINDOWS  # type: ignore[attr-defined]
