"""describe_raised: an exception as a reason the ledger may keep."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.keys import storable
from tidings.core.redaction import MAX_REASON_CHARS
from tidings.delivery.raised import describe_raised
from tidings.providers.faults import InjectedFault

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=400)


def test_the_type_is_named_with_its_module_and_the_message_kept() -> None:
    assert describe_raised(RuntimeError("pool closed")) == "RuntimeError: pool closed"
    assert describe_raised(InjectedFault("Too many connections")) == (
        "tidings.providers.faults.InjectedFault: Too many connections")
    assert describe_raised(KeyError()) == "KeyError"


def test_a_message_that_cannot_be_read_still_names_the_type() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    assert describe_raised(Broken()).endswith("Broken: (its message could not be read)")


def test_credentials_in_a_message_are_replaced() -> None:
    text = describe_raised(ConnectionError(
        "redis://default:hunter2@cache:6379 refused; Authorization: Bearer abc.def.ghi"))
    assert "hunter2" not in text and "abc.def.ghi" not in text


@given(before=ANY_TEXT, after=ANY_TEXT,
       address=st.sampled_from(["ada@example.com", "+15551234567", "Grace.Hopper@Navy.mil"]))
def test_no_address_ever_and_always_storable_and_bounded(
        before: str, after: str, address: str) -> None:
    text = describe_raised(OSError(f"{before}{address}{after}"), address=address)
    assert address.lower() not in text.lower()
    assert "5551234567" not in text
    assert storable(text)
    assert len(text) <= MAX_REASON_CHARS
    assert text.startswith("OSError")
