"""The operator's command line as an on-call engineer runs it: real processes on a real
file, every command with ``--json``, and what each prints without it."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from support.cli_process import TIDINGS, migrated, ok_json, run
from tidings.config.settings import Settings
from tidings.core.pacing import PaceLimits
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.stores.base import Change, ClaimKind

QUERY = ("SELECT id, email, phone FROM customers"
         " WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit")




@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A settings file: email and sms channels and a daily digest over a SQL audience of
    three customers, on a migrated store."""
    crm = tmp_path / "crm.db"
    with sqlite3.connect(crm) as conn:
        conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT, phone TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", [
            ("cust_1", "a@example.com", "+15550001"), ("cust_2", "b@example.com", None),
            ("cust_3", "c@example.com", None)])
    path = tmp_path / "tidings.toml"
    path.write_text(f'''
store = "sqlite:///{tmp_path / 'ops.db'}"
[channels.email]
provider = {{ kind = "sandbox-twin" }}
quota = "20/s"
[channels.sms]
provider = {{ kind = "sandbox-twin" }}
quota = "2/s"
[campaigns.digest]
cron = "0 9 * * *"
timezone = "UTC"
channels = ["email", "sms"]
template = "digest"
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}
''')
    migrated(path)
    return path


def given_a_dead_letter(config: Path) -> str:
    """Admit the digest of 2026-08-10 and dead-letter cust_1's email; returns its key."""
    async def go() -> str:
        runtime = await build_runtime(Settings.load(config))
        async with runtime:
            now = runtime.clock.now()
            await runtime.scheduler().replay("digest", "2026-08-10", now=now,
                                             expires_at=now + 3600)
            key = "digest/2026-08-10/cust_1/email/v1"
            received = await runtime.transport.receive("email", max_messages=10,
                                                       visibility_s=60, now=now)
            [message] = [m for m in received if m.message_id == key]
            [claim] = await runtime.store.intent_claim_many([key], owner="w", lease_s=30,
                                                            now=now)
            assert claim.kind is ClaimKind.CLAIMED
            await runtime.store.intent_apply_many([Change(
                key=key, from_state=State.CLAIMED, to_state=State.DEAD, event="dead",
                lease_token=claim.token, reason="retry budget spent")], now=now)
            await runtime.transport.dead_letter("email", [(message.receipt, "budget spent")],
                                                now=now)
            return key
    return asyncio.run(go())


def test_help_lists_the_operator_commands() -> None:
    result = run("--help")
    for command in ("api", "token", "dlq", "plan", "status", "inspect", "admission"):
        assert command in result.stdout


def test_token_create_list_revoke(config: Path) -> None:
    created = ok_json("token", "create", "--scope", "operator", "--scope", "viewer",
                      "--name", "on-call", "--config", str(config))
    assert created["token"].startswith(f"tid_{created['id']}_")
    assert created["scopes"] == ["operator", "viewer"]

    listed = ok_json("token", "list", "--config", str(config))
    assert [t["id"] for t in listed["tokens"]] == [created["id"]]
    assert created["token"] not in json.dumps(listed)  # the secret is shown once only

    revoked = ok_json("token", "revoke", created["id"], "--config", str(config))
    assert revoked["revoked"] is True
    bad = run("token", "create", "--scope", "admin", "--config", str(config))
    assert bad.returncode == 2 and "scope: unknown scope 'admin'" in bad.stderr


def test_a_token_created_with_an_expiry_shows_it_in_the_list(config: Path) -> None:
    created = ok_json("token", "create", "--scope", "trigger", "--name", "cron",
                      "--expires-in", "30d", "--config", str(config))
    assert created["expires_at"] == created["created_at"] + 30 * 86400
    forever = ok_json("token", "create", "--scope", "viewer", "--config", str(config))
    assert forever["expires_at"] is None

    listed = {t["id"]: t for t in ok_json("token", "list", "--config", str(config))["tokens"]}
    assert listed[created["id"]]["expires_at"] == created["expires_at"]
    assert listed[created["id"]]["expired"] is False
    assert listed[forever["id"]]["expires_at"] is None
    table = run("token", "list", "--config", str(config))
    assert table.returncode == 0 and "expires" in table.stdout and "never" in table.stdout

    for bad in ("30 days", "0s", "-1h", "36501d"):
        refused = run("token", "create", "--scope", "viewer", "--expires-in", bad,
                      "--config", str(config))
        assert refused.returncode == 2, refused.stderr
        assert "--expires-in" in refused.stderr, refused.stderr


def test_dlq_list_and_redrive(config: Path) -> None:
    key = given_a_dead_letter(config)

    listed = ok_json("dlq", "list", "--channel", "email", "--config", str(config))
    [letter] = listed["dead_letters"]
    assert (letter["key"], letter["intent_state"]) == (key, "dead")

    redriven = ok_json("dlq", "redrive", "--channel", "email", "--id", letter["id"],
                       "--config", str(config))
    assert redriven["redriven"] == [{"id": letter["id"], "key": key, "state_before": "dead",
                                     "reopened": True}]
    assert ok_json("dlq", "list", "--channel", "email", "--config", str(config)) == {
        "channel": "email", "dead_letters": []}
    timeline = ok_json("inspect", key, "--config", str(config))
    [delivery] = timeline["deliveries"]
    assert delivery["answers"]["state"] == "retryable"
    assert delivery["events"][-1]["type"] == "redriven"

    unknown = run("dlq", "list", "--channel", "fax", "--config", str(config))
    assert unknown.returncode == 2 and "unknown channel 'fax'" in unknown.stderr


def test_plan_and_status_share_the_numbers(config: Path) -> None:
    given_a_dead_letter(config)

    plan = ok_json("plan", "--config", str(config))
    status = ok_json("status", "--config", str(config))

    [email] = [x for x in plan["lines"] if x["channel"] == "email" and x["campaign"] is None]
    assert email["backlog"] == status["channels"]["email"]["backlog"] == 2
    paced = PaceLimits(quota_per_s=20).paced_per_s  # the pacer aims just under the quota
    assert paced is not None and paced < 20
    assert (email["rate_source"], email["rate_per_s"]) == ("configured", pytest.approx(paced))
    assert email["drain_s"] == pytest.approx(2 / paced, abs=1e-3)
    assert email["deadline_in_s"] is not None and email["verdict"] in ("ok", "at_risk")
    assert status["channels"]["email"]["dead"] == 1
    assert status["channels"]["email"]["dead_letters"] == 1
    assert status["campaigns"]["digest"]["latest_occurrence"]["kind"] == "replay"


def test_inspect_by_recipient(config: Path) -> None:
    given_a_dead_letter(config)

    found = ok_json("inspect", "--recipient", "cust_1", "--config", str(config))

    assert sorted(d["key"] for d in found["deliveries"]) == [
        "digest/2026-08-10/cust_1/email/v1", "digest/2026-08-10/cust_1/sms/v1"]
    assert "a@example.com" not in json.dumps(found)


@pytest.mark.parametrize("date", ["0001-01-01", "9999-12-31"])
def test_replay_of_a_date_outside_the_supported_range_is_a_clean_refusal(
        config: Path, date: str) -> None:
    result = run("replay", "digest", date, "--config", str(config))

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"date: '{date}' is outside the supported dates (1970-01-02 to 9998-12-31)" \
        in result.stderr


def text(*args: str) -> str:
    """A command's default output, on an 80-column pipe."""
    result = subprocess.run([*TIDINGS, *args], capture_output=True, text=True, timeout=60,
                            check=False, env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)  # text unless --json is given
    assert "…" not in result.stdout
    return result.stdout


def test_every_command_prints_text_unless_asked_for_json(config: Path) -> None:
    c = ("--config", str(config))
    assert "schema is current" in text("db", "migrate", *c)
    assert "admission paused for campaign 'digest'" in text(
        "admission", "pause", "--campaign", "digest", "--reason", "incident", *c)
    assert "admission resumed" in text("admission", "resume", "--campaign", "digest", *c)
    refused = run("replay", "digest", "2026-08-11", *c)
    assert refused.returncode == 2 and "freshness deadline passed" in refused.stderr
    assert text("replay", "digest", "2026-08-11", "--expires-in", "6h", *c).startswith(
        "replayed digest 2026-08-11: 3 members, 4 intents admitted (4 sendable)")
    assert text("cancel", "digest/2026-08-11/cust_2/email/v1", *c) == (
        "digest/2026-08-11/cust_2/email/v1: cancelled\n")
    again = run("cancel", "digest/2026-08-11/cust_2/email/v1", *c)  # cancelled: still so
    assert again.returncode == 0
    ok_json("bulk", "dead-letter", "--campaign", "digest", "--channel", "email", *c)
    late = run("cancel", "digest/2026-08-11/cust_1/email/v1", *c)  # dead: too late
    assert late.returncode == 1 and "dead, too late to cancel" in late.stdout
    years = run("replay", "digest", "2026-08-12", "--expires-in", "400d", *c)
    assert years.returncode == 2 and "longer than 366 days" in years.stderr
    assert text("reconcile", *c).startswith("reconciled: ")
    token = ok_json("token", "create", "--scope", "viewer", *c)
    assert text("token", "revoke", token["id"], *c).startswith(f"revoked token {token['id']}")


def test_inspect_and_dlq_list_show_the_same_local_times(config: Path) -> None:
    from tidings.cli.textout import when

    key = given_a_dead_letter(config)
    [letter] = ok_json("dlq", "list", "--channel", "email", "--config", str(config))[
        "dead_letters"]
    [delivery] = ok_json("inspect", key, "--config", str(config))["deliveries"]
    dead_event = delivery["events"][-1]

    listed = text("dlq", "list", "--channel", "email", "--config", str(config))
    inspected = text("inspect", key, "--config", str(config))
    assert when(letter["dead_at"]) in listed
    assert when(dead_event["at"]) in inspected
    assert "reason     retry budget spent" in inspected
    assert f"recipient  {delivery['intent']['recipient_surrogate']}" in inspected


def test_retention_run_says_what_it_prunes_and_status_shows_the_ledger_span(
        config: Path) -> None:
    given_a_dead_letter(config)  # a dead intent and three pending ones, all from now
    c = ("--config", str(config))

    dry = ok_json("retention", "run", "--dry-run", *c)
    assert set(dry) >= {"pruned", "oldest_kept", "bound_days"}
    assert dry["pruned"]["intents"] == 0 and dry["bound_days"] == 30
    assert dry["oldest_kept"] is not None
    assert text("retention", "run", *c).startswith(
        "pruned 0 intents, 0 events, 0 occurrences (finished more than 30 days ago); "
        "oldest intent kept: ")

    status = ok_json("status", *c)
    ledger = status["ledger"]
    assert ledger["oldest_intent_at"] == dry["oldest_kept"] <= ledger["newest_intent_at"]
    assert ledger["retention_days"] == 30 and ledger["next_prune_at"] > ledger["newest_intent_at"]
    assert "ledger: intents from " in text("status", *c)
    assert "next prune " in text("status", *c)


def test_hold_release_and_bulk_actions_from_the_command_line(config: Path) -> None:
    c = ("--config", str(config))
    assert ok_json("replay", "digest", "2026-08-11", "--expires-in", "6h", *c)["admitted"] == 4
    held = ok_json("hold", "--campaign", "digest", "--reason", "incident", *c)
    assert held["held"] and held["by"].startswith("cli:")
    assert "was already held" in text("hold", "--campaign", "digest", "--by", "ops:bo", *c)
    unknown = run("hold", "--campaign", "nope", *c)
    assert unknown.returncode != 0 and "unknown campaign 'nope'" in unknown.stderr
    status = ok_json("status", *c)
    assert [(h["name"], h["reason"]) for h in status["holds"]["active"]] == [
        ("digest", "incident")]
    assert "delivery held: campaign 'digest'" in text("status", *c)

    dry = ok_json("bulk", "dead-letter", "--campaign", "digest", "--channel", "sms",
                  "--dry-run", "--by", "ops:bo", *c)
    assert (dry["selected"], dry["changed"], dry["dry_run"]) == ({"enqueued": 1}, 0, True)
    assert text("bulk", "delay", "--campaign", "digest", "--channel", "email", "--until",
                "2h", "--state", "enqueued", *c).startswith("delay: selected 3 enqueued; 3 "
                                                            "changed (by cli:")
    refused = run("bulk", "cancel", "--campaign", "digest", "--state", "accepted", *c)
    assert refused.returncode != 0 and "cancel moves only" in refused.stderr
    zero = run("bulk", "cancel", "--campaign", "digest", "--older-than", "0s", *c)
    assert zero.returncode != 0 and "older_than" in zero.stderr
    assert "Traceback" not in zero.stderr
    cancelled = ok_json("bulk", "cancel", "--campaign", "digest", "--older-than", "1h", *c)
    assert (cancelled["selected"], cancelled["changed"]) == (
        {"enqueued": 1, "retryable": 3}, 4)

    released = ok_json("release", "--campaign", "digest", *c)
    assert (released["was_held"], released["republished"]) == (True, 0)
    assert ok_json("status", *c)["holds"]["active"] == []


def test_plan_forecasts_a_campaign_before_it_is_enabled(config: Path) -> None:
    # the digest's SQL audience counts three customers; no channel has sent anything yet,
    # so the per-worker rate is the operator's
    forecast = ok_json("plan", "--campaign", "digest", "--workers", "2",
                       "--rate-per-worker", "50", "--config", str(config))
    lines = {x["channel"]: x for x in forecast["channels"]}
    assert set(lines) == {"email", "sms"}
    email, sms = lines["email"], lines["sms"]
    assert email["rate_source"] == sms["rate_source"] == "given"
    for line, quota in ((email, 20), (sms, 2)):
        paced = PaceLimits(quota_per_s=quota).paced_per_s
        assert paced is not None
        f = line["forecast"]
        assert (f["recipients"], f["workers"], f["per_worker_per_s"]) == (3, 2, 50.0)
        # 2 workers x 50/s would outrun either quota: the pacer binds
        assert (f["bound"], f["rate_per_s"]) == ("quota", pytest.approx(paced))
        assert f["drain_s"] == pytest.approx(3 / paced)
        assert (f["freshness_s"], f["verdict"], f["late"]) == (86400.0, "ok", 0)

    # without a rate and with nothing sent lately it says what is missing
    refused = run("plan", "--campaign", "digest", "--config", str(config))
    assert refused.returncode == 2 and "per-worker send rate" in refused.stderr, refused.stderr
    unknown = run("plan", "--campaign", "weekly", "--config", str(config))
    assert unknown.returncode == 2 and "no campaign 'weekly'" in unknown.stderr
    # and prints a table without --json
    table = run("plan", "--campaign", "digest", "--rate-per-worker", "50", "--config",
                str(config))
    assert table.returncode == 0 and "plan --campaign digest" in table.stdout, table.stdout


def test_api_processes_share_one_port_and_stop_together(config: Path) -> None:
    import re
    import signal

    import httpx

    created = ok_json("token", "create", "--scope", "viewer", "--config", str(config))
    process = subprocess.Popen([*TIDINGS, "api", "--config", str(config), "--port", "0",
                                "--processes", "2"], text=True, stderr=subprocess.PIPE)
    with process:
        assert process.stderr is not None
        ports: list[str] = []
        while len(ports) < 2:  # each process says where it listens (among its log lines)
            line = process.stderr.readline()
            assert line, "tidings api --processes 2 stopped before both listened"
            ports += re.findall(r"listening on http://127\.0\.0\.1:(\d+)", line)
        assert len(set(ports)) == 1, ports  # two processes, one port
        port = ports[0]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            answers = [client.get("/v1/status", headers={
                "Authorization": f"Bearer {created['token']}"}) for _ in range(20)]
        assert {a.status_code for a in answers} == {200}
        process.send_signal(signal.SIGTERM)
        process.stderr.read()
        assert process.wait(timeout=60) == 0


def test_text_that_looks_like_markup_is_printed_as_it_is(config: Path) -> None:
    # A hold reason and a key are the user's text: "[/]" once failed the printing with
    # rich's MarkupError, and ":email:" turned into an envelope.
    c = ("--config", str(config))
    ok_json("hold", "--campaign", "digest", "--reason", "see [/] and [bold]x[/bold]", *c)
    assert "(see [/] and [bold]x[/bold])" in text("status", *c)
    missing = run("inspect", "a[/]b:email:sms", *c)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "a[/]b:email:sms" in missing.stderr
