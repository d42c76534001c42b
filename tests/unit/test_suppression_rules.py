"""The suppression list's pure rules: one normalised form per address, which reports and
refusals suppress, and when soft bounces add up."""

from __future__ import annotations

import random

import pytest

from tidings.core.addresses import checked_address, normalize_address
from tidings.core.errors import InvalidInput
from tidings.core.outcomes import RECIPIENT_STOPPED, Permanent
from tidings.core.policy import RetryPolicy
from tidings.core.states import decide
from tidings.core.suppression import (
    STRIKE,
    Reason,
    SuppressionRules,
    audit_key,
    from_refusal,
    from_report,
)


@pytest.mark.parametrize(("kind", "typed", "normal"), [
    ("email", "Ann.Lee@Example.COM", "ann.lee@example.com"),
    ("email", "  ann@example.com\n", "ann@example.com"),
    ("email", "Zoë@Exämple.com", "zoë@exämple.com"),
    ("email", "Zoe\u0308@example.com", "zoë@example.com"),  # NFC: one form of ë
    ("sms", "+1 (555) 000-1111", "+15550001111"),
    ("sms", "0049 30 1234 5678", "+493012345678"),
    ("sms", "+44.20.7946.0958", "+442079460958"),
])
def test_an_address_has_one_normalised_form(kind: str, typed: str, normal: str) -> None:
    assert normalize_address(kind, typed) == normal
    assert normalize_address(kind, normal) == normal


def test_an_operators_address_is_checked_and_refused_naming_the_field() -> None:
    assert checked_address("sms", "+1 555 000 1111", "address") == "+15550001111"
    assert checked_address("email", "Ops@Mailhost", "address") == "ops@mailhost"
    with pytest.raises(InvalidInput) as bad:
        checked_address("email", "not-an-address", "rows[3].address")
    assert bad.value.field == "rows[3].address"
    with pytest.raises(InvalidInput) as short:
        checked_address("sms", "+1 555", "address")
    assert "E.164" in short.value.message
    with pytest.raises(InvalidInput) as kind:
        checked_address("fax", "+15550001111", "address")
    assert kind.value.field == "kind"
    with pytest.raises(InvalidInput):
        checked_address("email", "   ", "address")


@pytest.mark.parametrize(("report", "bounce", "does"), [
    ("bounced", "hard", Reason.HARD_BOUNCE),
    ("bounced", None, Reason.HARD_BOUNCE),  # unclassed: the provider gave up on it
    ("bounced", "soft", STRIKE),
    ("bounced", "other", None),
    ("complained", None, Reason.COMPLAINT),
    ("delivered", None, None),
    ("failed", None, None),
])
def test_what_a_report_does_to_its_address(report: str, bounce: str | None,
                                           does: object) -> None:
    assert from_report(report, bounce) == does


def test_only_a_stop_refusal_suppresses() -> None:
    policy = RetryPolicy(max_failures=3, base_s=1.0, cap_s=10.0)
    stop = decide(Permanent(reason="HTTP 400: Twilio error 21610", code=RECIPIENT_STOPPED),
                  failures=0, policy=policy, now=0.0, rng=random.Random(0))
    bad = decide(Permanent(reason="HTTP 400: bad number"), failures=0, policy=policy,
                 now=0.0, rng=random.Random(0))

    assert (from_refusal(stop.code), from_refusal(bad.code)) == (Reason.SMS_STOP, None)
    assert stop.to.value == "rejected"  # the send itself is refused as any other


def test_soft_bounces_suppress_at_the_limit_and_never_with_zero() -> None:
    rules = SuppressionRules(soft_bounce_limit=3)
    assert [rules.soft_bounces_suppress(n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    assert not SuppressionRules(soft_bounce_limit=0).soft_bounces_suppress(100)


def test_a_channel_without_a_kind_is_addressed_as_the_runtime_addresses_it() -> None:
    rules = SuppressionRules(kinds={"texts": "sms"})
    assert [rules.kind_of(c) for c in ("texts", "sms", "email", "news")] == [
        "sms", "sms", "email", "email"]


def test_an_audit_key_names_the_surrogate_never_the_address() -> None:
    assert audit_key("email", "r_0123456789abcdef") == "suppression/email/r_0123456789abcdef"
