"""What an on-call engineer finds in the logs: each settled intent with its key, recipient
surrogate, message id, provider request id, attempt, outcome and worker, loud enough
when it matters, and never the address.

Runs the real log set-up (``tidings.core.logs``, JSON) over the scenario harness: the
sandbox twin on a fake clock, no sleeping.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from support.logcapture import json_logs, lines, restored_logging
from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.core.cron import Schedule
from tidings.core.logs import log_time
from tidings.core.model import Recipient
from tidings.core.surrogate import surrogate

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

OK, REJECTED, FAILING = "ada@example.com", "bob@refuses.example", "cyd@flaky.example"
RETRY = {"retry": {"max_failures": 2, "base_s": 0.1, "cap_s": 0.2}}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    with restored_logging():
        yield


def sends(logged: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The "send" lines by (key, outcome); the last one wins."""
    return {(line["key"], line["outcome"]): line for line in logged if line["event"] == "send"}


async def test_each_outcome_is_logged_with_its_fields_at_its_level(
    make_harness: HarnessFactory,
) -> None:
    h = await make_harness(sandbox={"reject_addresses": [REJECTED],
                                    "fail_addresses": [FAILING]}, settings=RETRY)
    stream = json_logs("debug")
    ok = await h.notify("ok-1", OK)
    rejected = await h.notify("bad-1", REJECTED)
    failing = await h.notify("flaky-1", FAILING)

    await h.drive(h.worker("w1"))

    logged = lines(stream)
    found = sends(logged)
    accepted = found[(ok, "accepted")]
    assert accepted["level"] == "debug"
    assert accepted["logger"] == "tidings.worker"
    assert accepted["channel"] == "email" and accepted["worker"] == "w1"
    assert accepted["recipient"] == surrogate("ok-1") and accepted["attempt"] == 1
    assert accepted["message_id"] and accepted["provider_request_id"].startswith("req_")
    refused = found[(rejected, "rejected")]
    assert refused["level"] == "info" and "HTTP 422" in refused["reason"]
    assert found[(failing, "transient_failure")]["level"] == "debug"
    dead = found[(failing, "dead")]
    assert dead["level"] == "warning" and dead["attempt"] == 2
    assert dead["reason"].startswith("retry budget spent after 2 transient failures")
    assert any(line["event"] == "commit" and line["applied"] >= 1 for line in logged)
    text = stream.getvalue()
    for address in (OK, REJECTED, FAILING):
        assert address not in text


async def test_a_429_is_logged_at_info_with_the_retry_time(h: Harness) -> None:
    stream = json_logs("info")
    key = await h.notify("limited-1", OK)
    h.configure(rate_limit=1.0, retry_after_s=3)

    await h.run_once(h.worker("w1"))

    (line,) = [x for x in lines(stream) if x["event"] == "send"]
    assert (line["level"], line["key"], line["outcome"]) == ("info", key, "rate_limited")
    assert line["retry_at"] == pytest.approx(h.clock.now() + 3, abs=1)
    assert line["reason"] and line["provider_request_id"]


async def test_accepted_sends_cost_nothing_in_the_logs_at_info(h: Harness) -> None:
    stream = json_logs("info")
    await h.notify("quiet-1", OK)

    await h.drive(h.worker("w1"))

    assert [x for x in lines(stream) if x["logger"] == "tidings.worker"] == []


async def test_the_reconciler_logs_each_kind_of_repair_with_its_count(h: Harness) -> None:
    stream = json_logs("info")
    key = await h.notify("lost-1", OK)
    h.configure(lost_response=1.0)
    await h.run_once(h.worker("w1"))
    h.configure()
    h.clock.advance(2.0)

    await h.reconcile()

    logged = lines(stream)
    assert sends(logged)[(key, "uncertain")]["level"] == "info"
    (repair,) = [x for x in logged if x["event"] == "reconciled"]
    assert (repair["action"], repair["count"]) == ("uncertain_accepted", 1)
    assert repair["logger"] == "tidings.reconciler"


async def test_the_scheduler_logs_the_occurrence_and_its_pages(
    make_harness: HarnessFactory,
) -> None:
    people = [Recipient(id=f"cust_{i:02d}", email=f"c{i}@example.com") for i in range(1, 8)]
    campaign = Campaign(name="digest", schedule=Schedule("* * * * *", "UTC"),
                        channels=("email",), template="digest", version=1,
                        audience=GeneratorAudience(lambda: iter(people)))
    h = await make_harness(campaigns=[campaign], settings={"scheduler": {"page_size": 5}})
    stream = json_logs("info")

    await h.rt.scheduler().run_pass(now=h.clock.now())

    logged = [x for x in lines(stream) if x["logger"] == "tidings.scheduler"]
    assert [x["event"] for x in logged] == ["occurrence opened", "page admitted",
                                            "page admitted", "occurrence finished"]
    assert [x["admitted"] for x in logged if x["event"] == "page admitted"] == [5, 2]
    finished = logged[-1]
    assert (finished["members"], finished["admitted"], finished["skipped"]) == (7, 7, 0)
    assert finished["next_at"] == log_time(campaign.schedule.next_after(h.clock.now()).logical_at)
    assert logged[0]["occurrence"].startswith("digest/") and logged[0]["kind"] == "scheduled"
    assert "@example.com" not in stream.getvalue()
