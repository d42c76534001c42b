"""Store conformance: recipient preferences (opt-out, quiet hours) per channel.

Runs unchanged on every store backend (see conftest.py). Given / when / then.
"""

from __future__ import annotations

from typing import Any

from tidings.core.preferences import Preference
from tidings.stores.base import Store

T0 = 1_000_000.0


def pref(recipient_id: str, channel: str = "email", **fields: Any) -> Preference:
    return Preference(recipient_id=recipient_id, channel=channel, **fields)


async def test_a_preference_set_is_read_back_whole(store: Store) -> None:
    quiet = pref("cust_1", "sms", quiet_start="22:00", quiet_end="07:30",
                 timezone="America/New_York")
    out = pref("cust_1", "email", opted_out=True)

    await store.preference_set(quiet, now=T0)
    await store.preference_set(out, now=T0)

    found = await store.preferences_for([("cust_1", "sms"), ("cust_1", "email")])
    assert found == {("cust_1", "sms"): quiet, ("cust_1", "email"): out}


async def test_setting_again_replaces_the_whole_preference(store: Store) -> None:
    await store.preference_set(pref("cust_1", opted_out=True, quiet_start="21:00",
                                    quiet_end="06:00", timezone="Europe/Berlin"), now=T0)
    replacement = pref("cust_1", opted_out=False)

    await store.preference_set(replacement, now=T0 + 1)

    assert await store.preferences_for([("cust_1", "email")]) == {("cust_1", "email"):
                                                                  replacement}


async def test_only_the_exact_recipient_and_channel_pair_matches(store: Store) -> None:
    await store.preference_set(pref("a", "email", opted_out=True), now=T0)
    await store.preference_set(pref("b", "sms", opted_out=True), now=T0)

    found = await store.preferences_for([("a", "sms"), ("b", "email"), ("c", "email")])

    assert found == {}


async def test_a_batch_read_answers_many_pairs_and_skips_unknown_ones(store: Store) -> None:
    for i in range(0, 300, 3):
        await store.preference_set(pref(f"r{i:04d}", opted_out=i % 2 == 0), now=T0)
    wanted = [(f"r{i:04d}", "email") for i in range(300)]

    found = await store.preferences_for(wanted)

    assert sorted(found) == [(f"r{i:04d}", "email") for i in range(0, 300, 3)]
    assert all(p.opted_out == (int(r[1:]) % 2 == 0) for (r, _), p in found.items())


async def test_repeated_pairs_and_an_empty_batch_are_fine(store: Store) -> None:
    await store.preference_set(pref("a", opted_out=True), now=T0)

    assert await store.preferences_for([]) == {}
    found = await store.preferences_for([("a", "email"), ("a", "email")])
    assert list(found) == [("a", "email")]


async def test_ids_that_look_like_numbers_or_carry_quotes_round_trip(store: Store) -> None:
    odd = ["00123", "1e5", "O'Brien", 'say "hi"', "ünï", "[1,2]"]
    for rid in odd:
        await store.preference_set(pref(rid, quiet_start="23:00", quiet_end="06:00"), now=T0)

    found = await store.preferences_for([(rid, "email") for rid in odd])

    assert sorted(r for r, _ in found) == sorted(odd)
    assert all(p.recipient_id == r for (r, _), p in found.items())


async def test_delete_forgets_a_preference_once(store: Store) -> None:
    await store.preference_set(pref("a", opted_out=True), now=T0)
    await store.preference_set(pref("a", "sms", opted_out=True), now=T0)

    assert await store.preference_delete("a", "email") is True
    assert await store.preference_delete("a", "email") is False
    assert await store.preferences_for([("a", "email"), ("a", "sms")]) == {
        ("a", "sms"): pref("a", "sms", opted_out=True)}
