"""The read model: what status, plan and timelines answer, and its one JSON shape (the
one ``GET /v1/status`` and ``tidings status --json`` print)."""

from __future__ import annotations

import json
from dataclasses import fields

from tidings.core.model import Event, Intent, QueueDepth
from tidings.core.pacing import PaceLimits
from tidings.core.states import State
from tidings.delivery.uncertain import Policy, UncertainPolicy
from tidings.operate import operations, readmodel
from tidings.operate.readmodel import HoldsReport, IntentView, as_dict, to_json
from tidings.stores.base import IntentSummary, Switch

NOW = 50_000.0
COUNTS = ["total", "backlog", "scheduled", "oldest_age_s", "in_flight", "retryable",
          "uncertain", "accepted", "accepted_in_time", "expired", "dead", "rejected",
          "cancelled", "overdue", "send_rate_per_s", "sli", "suppressed",
          "throttled"]
DRAIN = ["backlog", "channel_backlog", "observed_rate_per_s", "configured_rate_per_s",
         "rate_per_s", "rate_source", "drain_s", "deadline_in_s", "freshness_deadline_s",
         "expected_late", "verdict"]


def summary(**counts: object) -> IntentSummary:
    base: dict[str, object] = dict(
        campaign="digest", channel="email", total=4, backlog=2, scheduled=1, claimed=0,
        retryable=0, uncertain=0, accepted=2, accepted_in_time=2, accepted_recent=2,
        expired=0, dead=0, rejected=0, cancelled=0, overdue=0, oldest_due_at=NOW - 30,
        earliest_expiry=NOW + 3600)
    base.update(counts)
    return IntentSummary(**base)  # type: ignore[arg-type]


def status() -> readmodel.Status:
    snap = operations.Snapshot(
        now=NOW, window_s=100.0, summaries=(summary(), summary(campaign=None, total=1)),
        queues={"email": QueueDepth(ready=2, delayed=0, in_flight=0, dead=1, oldest_age_s=3)},
        events={"email": {"claimed": 3}},
        switches=(Switch(scope="campaign", name="digest", paused=True, changed_at=NOW - 5,
                         reason="guardrail: bounce rate 0.2 over 0.05"),),
        holds=HoldsReport(active=(readmodel.ActiveHold(
            scope="channel", name="sms", since=NOW - 9, by="ops", reason=None, parked=0),)))
    policy = UncertainPolicy(mode=Policy.RESEND, deduplicates=True, dedupe_window_s=None)
    return operations.status(
        snap, campaigns={"digest": ("email",)}, channels=["email"],
        limits={"email": PaceLimits(quota_per_s=10)}, freshness={"digest": 7200.0},
        uncertain={"email": readmodel.UncertainSends(policy=policy, uncertain=1, held=0,
                                                     awaiting_operator=0)})


def test_a_status_row_is_its_counts_then_its_own_fields_in_order() -> None:
    out = json.loads(json.dumps(to_json(status())))

    assert list(out) == ["now", "window_s", "channels", "campaigns", "one_off",
                         "guardrails_tripped", "holds", "ledger", "digests"]
    email = out["channels"]["email"]
    assert list(email) == [
        *COUNTS, "paused", "paused_reason", "queue", "attempts", "rate_limited", "retries",
        "duplicates_suppressed", "dead_letters", "drain", "uncertain_sends", "providers"]
    # the row names its channel: its drain does not repeat it
    assert list(email["drain"]) == DRAIN
    assert list(out["campaigns"]["digest"]) == [
        *COUNTS, "declared", "paused", "paused_reason", "latest_occurrence", "channels"]
    assert list(out["campaigns"]["digest"]["channels"]["email"]) == [*COUNTS, "drain"]
    assert list(out["one_off"]["email"]) == COUNTS
    assert out["holds"] == {"active": [{"scope": "channel", "name": "sms", "since": NOW - 9,
                                        "by": "ops", "reason": None, "parked": 0}],
                            "expired_while_held": 0}


def test_an_uncertain_policy_shows_as_it_describes_itself() -> None:
    sends = status().channels["email"].uncertain_sends
    assert sends is not None

    # a resend policy's window is shown even when None (the provider keeps it for ever)
    assert as_dict(sends) == {**sends.policy.describe(), "uncertain": 1, "held": 0,
                              "awaiting_operator": 0}
    assert as_dict(sends)["dedupe_window_s"] is None


def test_attributes_and_json_agree() -> None:
    s = status()
    out = as_dict(s)
    email = s.channels["email"]

    # the channel adds up the campaign's intents and the one-off ones: 2 + 2 due
    assert out["channels"]["email"]["backlog"] == email.counts.backlog == 4
    assert email.drain is not None
    assert out["channels"]["email"]["drain"]["verdict"] == email.drain.verdict
    assert out["campaigns"]["digest"]["paused"] is s.campaigns["digest"].paused is True


def test_an_intent_view_is_every_intent_field_but_the_address() -> None:
    shown = [f.name for f in fields(IntentView)]
    assert shown == [f.name for f in fields(Intent) if f.name != "address"] + [
        "recipient_surrogate"]


def test_a_delivery_never_carries_the_address_and_shows_states_as_text() -> None:
    intent = Intent(key="k:email", channel="email", recipient_id="cust_9",
                    address="secret@example.com", template="t", data="{}", campaign=None,
                    occurrence=None, state=State.ACCEPTED, due_at=1.0, expires_at=None,
                    created_at=1.0, updated_at=2.0, selected_at=1.0, enqueued_at=1.5,
                    accepted_at=2.0, finished_at=2.0, attempts=1, failures=0,
                    lease_owner=None, lease_token=1, lease_expires_at=None,
                    next_attempt_at=None, receipt="rcpt", provider_request_id=None,
                    disposition="accepted", reason=None, cancel_requested=False)
    delivery = readmodel.Delivery(
        key=intent.key, answers=operations.answers(intent), intent=operations.intent_view(intent),
        events=(Event(key=intent.key, channel="email", type="accepted", at=2.0),))

    text = json.dumps(to_json(delivery))

    assert "secret@example.com" not in text
    out = json.loads(text)
    assert out["answers"]["state"] == out["intent"]["state"] == "accepted"
    assert out["answers"]["accepted"] is True and out["answers"]["selected_at"] == 1.0
    assert out["events"] == [{"key": "k:email", "channel": "email", "type": "accepted",
                              "at": 2.0, "state": None, "attempt": None, "worker": None,
                              "message_id": None, "provider_request_id": None,
                              "detail": None}]
