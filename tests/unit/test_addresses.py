"""Address checks at send time: syntax only, and never the address in the reason."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.addresses import check_address


@pytest.mark.parametrize("address", [
    "user@example.com", "first.last+tag@sub.example.co.uk", "o'brien@example.ie",
    "jöhn.dœ@exämple.com", "user@xn--bcher-kva.example", "user@invalid.example",
])
def test_a_deliverable_looking_email_address_passes(address: str) -> None:
    assert check_address("email", address) is None


@pytest.mark.parametrize(("address", "says"), [
    ("", "empty"),
    ("alice.example.com", "@-sign"),
    ("alice@@example.com", "invalid characters: '@'"),
    ("alice..smith@example.com", "two periods"),
    ("alice@example", "period"),
    ("Alice <alice@example.com>", "angle brackets"),
    ("alice smith@example.com", "invalid characters"),
    ("alice@localhost", "period"),
    ("alice@mail.test", "special-use"),
    ("alice@-example.com", "hyphen"),
])
def test_a_bad_email_address_is_rejected_with_a_reason(address: str, says: str) -> None:
    reason = check_address("email", address)

    assert reason is not None and says in reason


def test_test_domains_accept_test_set_up_addresses_only_when_asked() -> None:
    for address in ("alice@mail.test", "alice@mailhost"):
        assert check_address("email", address) is not None
        assert check_address("email", address, test_domains=True) is None


@pytest.mark.parametrize("address", ["+15550001", "+4915100000002", "+861234567890123"])
def test_an_e164_phone_number_passes(address: str) -> None:
    assert check_address("sms", address) is None


@pytest.mark.parametrize(("address", "says"), [
    ("", "empty"),
    ("4915100000002", "start with '+'"),
    ("+49 151 0000 0002", "only digits"),
    ("+49-151-00000002", "only digits"),
    ("+٤٩١٥١٠٠٠٠٠٠٠٢", "only digits"),
    ("+0491510000000", "never starts with 0"),
    ("+1555000", "7 digits"),
    ("+1234567890123456", "16 digits"),
])
def test_a_phone_number_not_in_e164_form_is_rejected(address: str, says: str) -> None:
    reason = check_address("sms", address)

    assert reason is not None and says in reason


def test_an_unknown_channel_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="push"):
        check_address("push", "x")


TOKEN = "zqxjv"  # stands for the identifying part of an address
noise = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@given(before=noise, after=noise, domain=st.from_regex(r"[a-z0-9\-.\u00e0-\u00ff]{0,12}",
                                                       fullmatch=True))
def test_a_reason_never_quotes_the_local_part(before: str, after: str, domain: str) -> None:
    reason = check_address("email", f"{before}{TOKEN}{after}@{domain}")

    assert reason is None or TOKEN not in reason


@given(local=noise, before=st.from_regex(r"[a-z0-9\-.]{0,8}", fullmatch=True),
       after=st.from_regex(r"[a-z0-9\-.\u00e0-\u00ff]{0,8}", fullmatch=True))
def test_a_reason_never_quotes_the_domain(local: str, before: str, after: str) -> None:
    reason = check_address("email", f"{local}@{before}{TOKEN}{after}")

    assert reason is None or TOKEN not in reason


PHONE_REASONS = {
    "phone number is empty",
    "phone number is not in E.164 form: it must start with '+' and the country code",
    "phone number is not in E.164 form: only digits may follow the '+'",
    "phone number is not in E.164 form: a country code never starts with 0",
    "phone number is not in E.164 form: it has N digits, 8 to 15 are allowed",
}


@given(number=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
                      max_size=20))
def test_a_phone_reason_never_quotes_the_number(number: str) -> None:
    reason = check_address("sms", number)

    # The reason is the rule broken, not the number: the same as for another number
    # that breaks the rule alike (a short input like "ph" can still be a word of it).
    if reason is not None:
        assert re.sub(r"\d+ digits", "N digits", reason) in PHONE_REASONS, reason
