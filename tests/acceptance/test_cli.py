"""The command line as a user runs it: real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidings.stores.queries import migrations

TIDINGS = [sys.executable, "-m", "tidings"]
TERMINAL = ("accepted", "rejected", "dead", "cancelled", "expired")


def run(*args: str, timeout: float = 60, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TIDINGS, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=cwd)


def test_help_lists_every_command() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("init", "demo", "db", "scheduler", "worker", "reconcile", "replay", "cancel",
                    "inspect", "status", "sandbox"):
        assert command in result.stdout


def test_db_migrate_then_status_on_a_fresh_file(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    first = run("db", "migrate", "--store", store, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["applied"] == [m.version for m in migrations("sqlite")]
    again = run("db", "migrate", "--store", store, "--json")
    assert json.loads(again.stdout)["applied"] == []
    status = run("status", "--store", store, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["channels"] == {}


def test_a_bad_setting_names_its_field(tmp_path: Path) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text('store = "sqlite:///x.db"\n[channels.email]\nquota = "fast"\n')
    result = run("status", "--config", str(config))
    assert result.returncode == 2
    assert "channels.email.quota" in result.stderr


def test_inspect_of_an_unknown_key_is_a_clear_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    run("db", "migrate", "--store", store)
    result = run("inspect", "no-such-key", "--store", store)
    assert result.returncode != 0
    assert "no intent has key 'no-such-key'" in result.stderr


@pytest.mark.slow
def test_demo_keeps_its_contract(tmp_path: Path) -> None:
    """A small demo end to end: processes, faults, a kill; judged by the sandbox's counts."""
    result = run("demo", "--recipients", "3000", "--json", "--db", str(tmp_path / "demo.db"),
                 timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["invariants"] == {"lost": 0, "duplicate_sends": 0, "quota_violations": 0}
    assert set(report["channels"]) == {"email", "sms"}
    for name, channel in report["channels"].items():
        assert channel["eligible"] > 0, name
        assert sum(channel[k] for k in TERMINAL) == channel["eligible"], name
        assert channel["provider_accepted"] == channel["accepted"], name
        assert channel["provider_duplicate_accepts"] == 0, name
        assert channel["max_rate_1s"] <= channel["quota_per_s"], name
    assert report["channels"]["email"]["dead"] >= 1  # the flaky addresses spent their budget
    assert report["channels"]["email"]["duplicates_suppressed"] >= 1
    assert report["injected"]["retried_pass_new_intents"] == 0
    assert "worker_killed" in report["injected"]
    assert (tmp_path / "sandbox-stats.json").exists()


def test_admission_pause_and_resume_a_channel(tmp_path: Path) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(f'store = "sqlite:///{tmp_path / "s.db"}"\n[channels.email]\n'
                      'provider = { kind = "sandbox-twin" }\n')
    stale = run("admission", "pause", "--channel", "email", "--config", str(config))
    assert stale.returncode == 2 and "new database" in stale.stderr
    assert f"run `tidings db migrate --config {config}`" in stale.stderr
    assert run("db", "migrate", "--config", str(config)).returncode == 0
    paused = run("admission", "pause", "--channel", "email", "--reason", "provider incident",
                 "--config", str(config), "--json")
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout)["paused"] is True
    resumed = run("admission", "resume", "--channel", "email", "--config", str(config), "--json")
    assert json.loads(resumed.stdout)["paused"] is False
    unknown = run("admission", "pause", "--channel", "fax", "--config", str(config))
    assert unknown.returncode == 2 and "unknown channel 'fax'" in unknown.stderr


def test_settings_are_found_and_their_paths_are_relative_to_their_folder(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    config = home / "tidings.toml"
    config.write_text('store = "sqlite:///tidings.db"\n[channels.email]\n'
                      'provider = { kind = "sandbox-twin" }\n')

    new = run("status", "--config", str(config), cwd=elsewhere)
    assert new.returncode == 2
    assert "new database" in new.stderr and "out of date" not in new.stderr
    assert f"run `tidings db migrate --config {config}`" in new.stderr
    assert not (elsewhere / "tidings.db").exists()
    assert not (home / "tidings.db").exists()  # a command that reads creates no file

    # Beside the file, no option at all: ./tidings.toml is read, and the scheduler (a
    # process that owns the database) creates the schema of a new one.
    once = run("scheduler", "--once", cwd=home)
    assert once.returncode == 0, once.stderr
    status = run("status", "--json", cwd=home)
    assert status.returncode == 0, status.stderr
    assert list(json.loads(status.stdout)["channels"]) == ["email"]
    from_env = subprocess.run([*TIDINGS, "status", "--json"], capture_output=True, text=True,
                              timeout=60, check=False, cwd=elsewhere,
                              env={**os.environ, "TIDINGS_CONFIG": str(config)})
    assert from_env.returncode == 0, from_env.stderr


def test_a_worker_without_settings_says_none_were_read_and_creates_nothing(
        tmp_path: Path) -> None:
    result = run("worker", "--channel", "email", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown channel 'email'; declared: none" in result.stderr
    assert "no settings file was read" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_what_a_user_gets_wrong_on_the_command_line_is_one_line_and_exit_2(
        tmp_path: Path) -> None:
    import socket

    (tmp_path / "a-file").write_text("")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, says in [
            (["sandbox", "--config", str(tmp_path / "nope.json")], "config: cannot read"),
            (["sandbox", "--port", str(port)], f"cannot listen on 127.0.0.1:{port}"),
            (["api", "--host", "127.0.0.1", "--port", str(port), "--store",
              f"sqlite:///{tmp_path / 'api.db'}"], f"cannot listen on 127.0.0.1:{port}"),
            (["sandbox", "--port", "99999"], "--port"),
            (["init", str(tmp_path / "a-file")], "cannot write"),
            (["demo", "--recipients", "100", "--db", str(tmp_path)], "is a folder"),
            (["status", "--config", str(tmp_path)], "is a folder, not a settings file"),
        ]:
            result = subprocess.run([*TIDINGS, *args], capture_output=True, text=True,
                                    timeout=60, check=False, cwd=tmp_path)
            assert (result.returncode, "Traceback" in result.stderr) == (2, False), \
                (args, result.stderr[-800:])
            assert says in result.stderr, (args, result.stderr[-800:])


def test_a_scheduler_refuses_an_audience_it_cannot_read_before_admitting(
        tmp_path: Path) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(
        'store = "sqlite:///tidings.db"\n[channels.email]\nprovider = { kind = "sandbox-twin" }\n'
        '[campaigns.digest]\ncron = "* * * * *"\nchannels = ["email"]\ntemplate = "t"\n'
        'audience = { sql = { url = "sqlite:///customers.db", query = "SELECT id FROM c '
        'WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit" } }\n')
    result = run("scheduler", "--once", "--config", str(config))
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert "campaigns.digest.audience.sql.url" in result.stderr
    assert "no such file" in result.stderr
    assert "occurrence opened" not in result.stderr
    assert not (tmp_path / "customers.db").exists()  # opened read-only, never created


async def test_status_says_which_provider_of_a_channel_is_out(tmp_path: Path) -> None:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    # given a channel with a fallback, whose first provider a worker said is out
    config = tmp_path / "tidings.toml"
    config.write_text(f'''store = "sqlite:///{tmp_path / 'cli.db'}"
[channels.email]
provider = {{ kind = "sandbox", url = "http://127.0.0.1:9" }}
fallbacks = [{{ kind = "sandbox", url = "http://127.0.0.1:10" }}]
''')
    runtime = await build_runtime(Settings.load(config))
    try:
        await runtime.provider_said("email", "sandbox", True, 1_800_000_000.0,
                                    "request not sent: ConnectError")
    finally:
        await runtime.close()

    # when an operator asks for status, as text and as JSON
    text = run("status", "--config", str(config))
    as_json = run("status", "--config", str(config), "--json")

    # then both name the provider, that it is out, since when and why
    assert text.returncode == 0, text.stderr
    assert "providers (failover)" in text.stdout and "ConnectError" in text.stdout
    [said] = json.loads(as_json.stdout)["channels"]["email"]["providers"]
    assert (said["name"], said["out"], said["since"]) == (
        "sandbox", True, "2027-01-15T08:00:00Z")
