"""``tidings uncertain list|resolve`` as an on-call engineer runs them: real processes on
a real file, with ``--json``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.cli_process import migrated, ok_json, run
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.stores.base import Change, ClaimKind


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tidings.toml"
    path.write_text(f'store = "sqlite:///{tmp_path / "ops.db"}"\n'
                    '[channels.email]\nuncertain = "hold"\nhold_s = 60\n'
                    'provider = { kind = "sandbox-twin" }\n')
    migrated(path)
    return path


def given_held(config: Path, *keys: str) -> None:
    """Sends of ``keys`` whose answers were lost, held by the reconciler."""
    async def go() -> None:
        runtime = await build_runtime(Settings.load(config))
        async with runtime:
            now = runtime.clock.now() - 3600  # an hour ago: past hold_s
            await runtime.notify_many([NotifyRequest(
                key=k, recipient={"id": k, "email": f"{k}@example.com"}, channels=["email"],
                template="t/v1") for k in keys])
            for key in keys:
                [claim] = await runtime.store.intent_claim_many(
                    [f"{key}:email"], owner="w", lease_s=30, now=now)
                assert claim.kind is ClaimKind.CLAIMED
                await runtime.store.intent_apply_many([Change(
                    key=f"{key}:email", from_state=State.CLAIMED, to_state=State.UNCERTAIN,
                    event="uncertain", lease_token=claim.token, reason="no answer")], now=now)
            result = await runtime.reconciler().run_pass(now=now + 2)
            assert result.uncertain_held == len(keys)
    asyncio.run(go())


def test_list_then_resolve_by_key_and_by_selection(config: Path) -> None:
    given_held(config, "a", "b", "c")

    listed = ok_json("uncertain", "list", "--config", str(config))
    assert [r["key"] for r in listed["uncertain"]] == ["a:email", "b:email", "c:email"]
    assert all(r["state"] == "held" and r["awaiting_operator"] for r in listed["uncertain"])
    status = ok_json("status", "--config", str(config))
    assert status["channels"]["email"]["uncertain_sends"]["awaiting_operator"] == 3

    one = ok_json("uncertain", "resolve", "a:email", "--as", "accepted", "--by", "ana",
                  "--note", "in the inbox", "--config", str(config))
    assert one["by"] == "ana" and [r["state"] for r in one["resolved"]] == ["accepted"]
    rest = ok_json("uncertain", "resolve", "--channel", "email", "--older-than", "30m",
                   "--as", "failed", "--by", "ana", "--config", str(config))
    assert sorted(r["key"] for r in rest["resolved"]) == ["b:email", "c:email"]

    timeline = ok_json("inspect", "a:email", "--config", str(config))
    [delivery] = timeline["deliveries"]
    assert delivery["events"][-1]["type"] == "operator_accepted"
    assert delivery["events"][-1]["worker"] == "operator:ana"
    assert ok_json("uncertain", "list", "--config", str(config)) == {"uncertain": []}


def test_bad_arguments_are_refused_naming_them(config: Path) -> None:
    nothing = run("uncertain", "resolve", "--as", "resend", "--config", str(config))
    assert nothing.returncode == 2 and "KEY" in nothing.stderr
    undecided = run("uncertain", "resolve", "--channel", "email", "--config", str(config))
    assert undecided.returncode == 2 and "Missing option '--as'" in undecided.stderr
    age = run("uncertain", "list", "--older-than", "soon", "--config", str(config))
    assert age.returncode == 2 and "--older-than" in age.stderr
    fax = run("uncertain", "list", "--channel", "fax", "--config", str(config))
    assert fax.returncode == 2 and "unknown channel 'fax'" in fax.stderr
    typo = run("uncertain", "resolve", "nope:email", "--as", "accepted", "--config",
               str(config))
    assert typo.returncode == 2 and "skipped nope:email: no intent has this key" in typo.stderr
