"""Unsubscribe tokens: a signed token names its recipient, address, channel and campaign,
and nothing else verifies. The property test feeds 10,000 forged, altered,
cross-campaign and replayed tokens to the recording step (``operate.unsubscribe``) on a
real store and judges by what the store then holds: only the subjects of tokens we
signed are opted out and suppressed, nothing else changes."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.core.model import address_kind
from tidings.core.preferences import Preference
from tidings.core.suppression import Reason
from tidings.core.unsubscribe import (
    MAX_TOKEN_CHARS,
    Subject,
    payload,
    secrets_from,
    sign,
    verify,
)
from tidings.delivery.unsubscribe import UnsubscribeLinks
from tidings.operate.unsubscribe import one_click
from tidings.stores.sqlite import SqliteStore

SECRET = b"unsubscribe-secret-current"
OLD = b"unsubscribe-secret-previous"
ADA = Subject(recipient_id="cust_1042", address="Ada@Example.com", channel="email",
              campaign="weekly-digest")
LINKS = UnsubscribeLinks(base_url="https://notify.example.com", secrets=(SECRET,))
NOW = 1_786_698_005.0


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_a_token_round_trips_and_is_url_safe() -> None:
    token = sign(ADA, SECRET)
    assert verify(token, [SECRET]) == ADA
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789-_.")
    notify = Subject(recipient_id="r", address="+15550100", channel="sms")
    assert verify(sign(notify, SECRET), [SECRET]) == notify


def test_any_of_the_secrets_verifies_and_no_other() -> None:
    old = sign(ADA, OLD)
    assert verify(old, [SECRET, OLD]) == ADA
    assert verify(old, [SECRET]) is None
    assert verify(old, []) is None
    assert verify(old, [b""]) is None
    with pytest.raises(ValueError):
        sign(ADA, b"")


def test_the_secrets_variable_takes_a_rotation() -> None:
    assert secrets_from(" new , old ,") == [b"new", b"old"]
    assert secrets_from(None) == [] == secrets_from(" , ")


def test_a_token_is_bound_to_each_field() -> None:
    token = sign(ADA, SECRET)
    mac = token.split(".")[1]
    for changed in (Subject(recipient_id="cust_1043", address=ADA.address, channel="email",
                            campaign=ADA.campaign),
                    Subject(recipient_id=ADA.recipient_id, address="eve@example.com",
                            channel="email", campaign=ADA.campaign),
                    Subject(recipient_id=ADA.recipient_id, address=ADA.address,
                            channel="sms", campaign=ADA.campaign),
                    Subject(recipient_id=ADA.recipient_id, address=ADA.address,
                            channel="email", campaign="other")):
        # The payload of another subject under this token's MAC: refused.
        assert verify(f"{b64(payload(changed))}.{mac}", [SECRET]) is None


@pytest.mark.parametrize("token", [
    "", ".", "a.b", "a.b.c", "no-dot", "é.é", "\x00.\x00", "x" * (MAX_TOKEN_CHARS + 1),
    # Signed, but not a payload of ours.
    *(f"{b64(raw)}.{sign(ADA, SECRET).split('.')[1]}" for raw in (b"", b"[]", b"{}")),
])
def test_junk_is_refused_without_raising(token: str) -> None:
    assert verify(token, [SECRET]) is None


def test_signed_bytes_that_are_not_the_canonical_payload_are_refused() -> None:
    import hashlib
    import hmac

    from tidings.core import unsubscribe

    for body in (json.dumps(["u1", "r", "a@example.com", "email", ""]).encode(),  # spaces
                 b'["u2","r","a@example.com","email",""]',  # another version
                 b'["u1","","a@example.com","email",""]',  # no recipient
                 b'["u1","r","a@example.com","email",1]'):  # not text
        mac = hmac.new(SECRET, unsubscribe._LABEL + body, hashlib.sha256).digest()
        assert verify(f"{b64(body)}.{b64(mac)}", [SECRET]) is None


@given(st.text(max_size=300))
def test_no_text_makes_verify_raise(text: str) -> None:
    assert verify(text, [SECRET]) is None


# ---------------------------------------------------------------- judged by the store

RECIPIENTS = ("cust_1", "cust_2", "cust_3")
CHANNELS = ("email", "sms")
CAMPAIGNS = ("weekly-digest", "launch", "")
POOL = [Subject(recipient_id=r, channel=c, campaign=k,
                address=f"{r}@example.com" if c == "email" else f"+1555000{r[-1]}")
        for r in RECIPIENTS for c in CHANNELS for k in CAMPAIGNS]
TOKENS_PER_EXAMPLE = 100
EXAMPLES = 100
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ "


def _altered(rng: random.Random, token: str) -> str:
    how = rng.choice(["replace", "insert", "delete", "truncate", "swap-parts", "pad"])
    at = rng.randrange(len(token))
    if how == "replace":
        return token[:at] + rng.choice(ALPHABET.replace(token[at], "")) + token[at + 1:]
    if how == "insert":
        return token[:at] + rng.choice(ALPHABET) + token[at:]
    if how == "delete":
        return token[:at] + token[at + 1:]
    if how == "truncate":
        return token[:at]
    if how == "pad":
        return token + "=" * rng.randint(1, 3)
    head, tail = token.split(".")
    return f"{tail}.{head}"


def token_case(rng: random.Random, signed: list[Subject]) -> tuple[str, str, Subject | None]:
    """(kind, token, the subject it may unsubscribe or None)."""
    kind = rng.choice(["valid", "replayed", "forged", "altered", "cross-campaign"])
    target = rng.choice(POOL)
    if kind in ("valid", "replayed"):
        subject = rng.choice(signed)
        return kind, sign(subject, SECRET), subject
    if kind == "forged":
        how = rng.choice(["other-secret", "random-mac", "random-text"])
        if how == "other-secret":
            # Another secret (no NUL: HMAC pads a short key with NULs, so a secret and
            # itself with NULs appended are one key).
            other = bytes(rng.randint(1, 255) for _ in range(rng.randint(1, 40)))
            return kind, sign(target, other if other != SECRET else b"x"), None
        if how == "random-mac":
            return kind, f"{b64(payload(target))}.{b64(rng.randbytes(32))}", None
        return kind, "".join(rng.choices(ALPHABET, k=rng.randint(0, 200))), None
    if kind == "altered":
        return kind, _altered(rng, sign(rng.choice(signed), SECRET)), None
    # cross-campaign: a signed token's MAC under the payload of another campaign
    subject = rng.choice(signed)
    other = rng.choice([c for c in CAMPAIGNS if c != subject.campaign])
    moved = Subject(recipient_id=subject.recipient_id, address=subject.address,
                    channel=subject.channel, campaign=other)
    return kind, f"{b64(payload(moved))}.{sign(subject, SECRET).split('.')[1]}", None


async def _migrated(path: Path) -> Path:
    """A migrated, empty store at ``path``, closed: each example starts from a copy."""
    store = await SqliteStore.open(f"sqlite:///{path}")
    try:
        await store.migrate(now=NOW)
    finally:
        await store.close()
    return path


async def _run(path: Path, cases: list[tuple[str, str, Subject | None]],
               template: Path) -> None:
    shutil.copyfile(template, path)  # a fresh store, as migrated, without migrating again
    store = await SqliteStore.open(f"sqlite:///{path}")
    try:
        assert await store.migrate(now=NOW) == []  # nothing pending: the copy is whole
        wrong = []
        for kind, token, expected in cases:
            done = await one_click(store, LINKS, token, channels=CHANNELS,
                                   kind_of=lambda c: address_kind(c, None), now=NOW)
            got = None if done is None else done.subject
            if got != expected:
                wrong.append((kind, token, got))
        assert wrong == []
        signed = {s for _, _, s in cases if s is not None}
        pairs = [(s.recipient_id, s.channel) for s in POOL]
        preferences = await store.preferences_for(pairs)
        assert {p for p, pref in preferences.items() if pref.opted_out} == {
            (s.recipient_id, s.channel) for s in signed}
        listed = await store.suppression_list(limit=1000)
        assert {(s.address, s.kind) for s in listed} == {
            (s.address.lower(), address_kind(s.channel, None)) for s in signed}
        assert {s.reason for s in listed} <= {Reason.UNSUBSCRIBE}
    finally:
        await store.close()


def test_ten_thousand_hostile_tokens_change_no_preference_they_do_not_name(
        tmp_path: Path) -> None:
    seen: dict[str, int] = {}
    template = asyncio.run(_migrated(tmp_path / "template.db"))

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(POOL), min_size=1, max_size=4, unique=True),
           st.randoms(use_true_random=False))
    def check(signed: list[Subject], rng: random.Random) -> None:
        cases = [token_case(rng, signed) for _ in range(TOKENS_PER_EXAMPLE)]
        # Every valid token is then replayed once more, at the end.
        cases += [("replayed", t, s) for k, t, s in cases if k == "valid"]
        for kind, _, _ in cases:
            seen[kind] = seen.get(kind, 0) + 1
        n = sum(seen.values())
        asyncio.run(_run(tmp_path / f"store-{n}.db", cases, template))

    check()
    assert sum(seen.values()) >= 10_000, seen
    assert min(seen.values()) > 500, seen  # every kind well represented


async def test_quiet_hours_are_kept_and_a_replay_adds_nothing(tmp_path: Path) -> None:
    store = await SqliteStore.open(f"sqlite:///{tmp_path / 's.db'}")
    try:
        await store.migrate(now=NOW)
        await store.preference_set(Preference(recipient_id=ADA.recipient_id, channel="email",
                                              quiet_start="22:00", quiet_end="07:00",
                                              timezone="Europe/London"), now=NOW)
        token = sign(ADA, SECRET)
        args = {"channels": ["email"], "kind_of": lambda c: "email", "now": NOW}
        first = await one_click(store, LINKS, token, **args)  # type: ignore[arg-type]
        again = await one_click(store, LINKS, token, **args)  # type: ignore[arg-type]
        unknown_channel = await one_click(  # a channel no longer declared
            store, LINKS, sign(Subject(recipient_id="r", address="r@example.com",
                                       channel="fax"), SECRET), **args)  # type: ignore[arg-type]
        assert first is not None and first.newly_suppressed
        assert again is not None and not again.newly_suppressed
        assert unknown_channel is None
        pref = (await store.preferences_for([(ADA.recipient_id, "email")]))[
            (ADA.recipient_id, "email")]
        assert (pref.opted_out, pref.quiet_start, pref.timezone) == (True, "22:00",
                                                                      "Europe/London")
        [entry] = await store.suppression_list()
        assert (entry.address, entry.kind, entry.reason, entry.source) == (
            "ada@example.com", "email", Reason.UNSUBSCRIBE, "unsubscribe:weekly-digest")
    finally:
        await store.close()


@pytest.mark.parametrize("length", [65, 700, 1_600, 2_000, 10_000])
def test_a_long_recipient_id_is_carried_by_its_digest_and_the_intents_key(length: int) -> None:
    """A 1,600-character id made a 2,235-character token, over the route's own 2,048: the
    id is carried by its digest (and the intent's key, to find it again), so the token's
    length no longer grows with it."""
    long_id = "c" * length
    subject = Subject(recipient_id=long_id, address="ada@example.com", channel="email",
                      campaign="weekly-digest", key="order-4821:email")
    token = sign(subject, SECRET)
    assert len(token) < 400 < MAX_TOKEN_CHARS
    found = verify(token, [SECRET])
    assert found is not None
    assert (found.recipient_id, found.key, found.address) == (
        "", "order-4821:email", "ada@example.com")
    assert found.names(long_id) and not found.names(long_id + "c")
    assert json.loads(payload(found))[0] == "u2"
    assert verify(sign(found, SECRET), [SECRET]) == found  # one canonical form
    assert verify(token, [OLD]) is None


def test_an_id_up_to_the_limit_is_carried_whole_as_before() -> None:
    subject = Subject(recipient_id="c" * 64, address="ada@example.com", channel="email")
    found = verify(sign(subject, SECRET), [SECRET])
    assert found == subject and json.loads(payload(subject))[0] == "u1"


async def test_a_long_ids_link_opts_out_the_recipient_its_intent_names(tmp_path: Path) -> None:
    from tidings.core.model import IntentDraft

    long_id = "x" * 2_000
    store = await SqliteStore.open(f"sqlite:///{tmp_path / 'u.db'}")
    try:
        await store.migrate(now=NOW)
        await store.intent_admit([IntentDraft(
            key="order-1:email", channel="email", recipient_id=long_id,
            address="ada@example.com", template="t", data="{}", due_at=NOW)], now=NOW)
        subject = Subject(recipient_id=long_id, address="ada@example.com", channel="email",
                          key="order-1:email")
        done = await one_click(store, LINKS, LINKS.token(subject), channels=["email"],
                               kind_of=lambda c: address_kind(c, None), now=NOW)
        assert done is not None and done.newly_suppressed
        [preference] = (await store.preferences_for([(long_id, "email")])).values()
        assert (preference.recipient_id, preference.opted_out) == (long_id, True)
        # A token whose digest names another id than its intent's opts nobody out, and
        # suppresses the address it names all the same.
        other = Subject(recipient_id="y" * 2_000, address="bob@example.com", channel="email",
                        key="order-1:email")
        done = await one_click(store, LINKS, LINKS.token(other), channels=["email"],
                               kind_of=lambda c: address_kind(c, None), now=NOW)
        assert done is not None and done.newly_suppressed
        assert await store.preferences_for([("y" * 2_000, "email")]) == {}
    finally:
        await store.close()
