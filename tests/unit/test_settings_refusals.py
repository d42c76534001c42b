"""Settings a user got wrong are a ConfigurationError naming the field (the CLI's exit
code 2 and one line), never a traceback: tables written as lists, a boolean or a
string where a number goes (read strictly, as TOML types them), a floor above its
cap, a clock moved out of the calendar, a settings path that is a folder or not text,
a CA bundle that is not there, a campaign template no channel has; and times beyond
the supported dates (a replay's new deadline) are refused before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidings.cli.textout import when
from tidings.config.providers import SmtpProviderSettings
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.runtime import build_runtime, campaigns_from

T0 = 1_780_000_000.0
QUERY = ("SELECT id, email FROM customers WHERE (:after IS NULL OR id > :after) "
         "ORDER BY id LIMIT :limit")


@pytest.mark.parametrize(("data", "field", "says"), [
    ({"channels": ["email"]}, "channels", "dictionary"),
    ({"campaigns": 5}, "campaigns", "dictionary"),
    ({"retry": {"base_s": 100, "cap_s": 1}}, "retry", "base_s (100) must not exceed cap_s"),
    ({"retry": {"rate_limit_floor_s": 100, "rate_limit_cap_s": 1}}, "retry",
     "rate_limit_floor_s"),
    ({"channels": {"a/b": {}}}, "channels", "'a/b' cannot name a channel"),
    ({"channels": {" ": {}}}, "channels", "cannot name a channel"),
    ({"campaigns": {"": {"cron": "0 9 * * *"}}}, "campaigns", "cannot name a campaign"),
    ({"worker": {"batch_size": True}}, "worker.batch_size", "valid integer"),
    ({"worker": {"batch_size": "200"}}, "worker.batch_size", "valid integer"),
    ({"worker": {"lease_s": "30"}}, "worker.lease_s", "valid number"),
    ({"channels": {"email": {"provider": {"kind": "smtp", "host": "mail.test",
                                          "from_address": "a@b.test", "port": "25"}}}},
     "channels.email.provider.port", "valid integer"),
    ({"clock_offset_s": 1e300}, "clock_offset_s", "less than"),
    ({"clock_offset_s": -1e12}, "clock_offset_s", "greater than"),
    ({"channels": {"email": {"provider": {
        "kind": "smtp", "host": "mail.test", "from_address": "a@b.test",
        "ca_file": "/no/such/bundle.pem"}}}}, "channels.email.provider.ca_file", "not a file"),
    ({"channels": {"email": {"provider": {"kind": "sendgridx"}}}},
     "channels.email.provider.kind", "unknown provider kind 'sendgridx'; use one of http,"),
])
def test_a_setting_got_wrong_is_refused_naming_the_field(
        data: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse(data)
    assert (caught.value.field, says in caught.value.message) == (field, True), caught.value


@pytest.mark.parametrize(("sql", "field", "says"), [
    ({"url": "sqlite:///x.db", "query": QUERY, "limit": 5}, "campaigns.d.audience.sql",
     "unknown key(s) limit"),
    ({"url": "sqlite:///x.db"}, "campaigns.d.audience.sql.query", "is required"),
    ({"url": "x.db", "query": QUERY}, "campaigns.d.audience.sql.url", "not a database URL"),
])
def test_an_audience_got_wrong_names_its_campaign_field(sql: dict[str, Any], field: str,
                                                        says: str) -> None:
    settings = Settings.parse({"campaigns": {"d": {
        "cron": "0 9 * * *", "channels": [], "template": "t", "audience": {"sql": sql}}}})
    with pytest.raises(ConfigurationError) as caught:
        campaigns_from(settings)
    assert (caught.value.field, says in caught.value.message) == (field, True), caught.value


def test_a_settings_path_that_is_a_folder_or_no_text_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe")
    for path, says in ((tmp_path, "is a folder"), (binary, "is not UTF-8 text")):
        with pytest.raises(ConfigurationError) as caught:
            Settings.load(path)
        assert (caught.value.field, says in caught.value.message) == ("config", True)


def test_a_relative_ca_bundle_is_read_from_the_settings_folder(tmp_path: Path) -> None:
    (tmp_path / "relay-ca.pem").write_text("not checked here\n")
    (tmp_path / "tidings.toml").write_text(
        '[channels.email]\nprovider = { kind = "smtp", host = "mail.test", '
        'from_address = "a@b.test", ca_file = "relay-ca.pem" }\n')
    spec = Settings.load(tmp_path / "tidings.toml").channels["email"].provider
    assert isinstance(spec, SmtpProviderSettings)
    assert spec.ca_file == str(tmp_path / "relay-ca.pem")


def _project(tmp_path: Path, *, template: str, version: int) -> Settings:
    folder = tmp_path / "templates" / "digest" / "v1"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Digest")
    (folder / "body.txt").write_text("Hello")
    return Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"kind": "email", "templates": str(tmp_path / "templates"),
                               "provider": {"kind": "sandbox-twin"}}},
        "campaigns": {"digest": {
            "cron": "0 9 * * MON", "channels": ["email"], "template": template,
            "version": version, "audience": {"sql": {
                "url": f"sqlite:///{tmp_path / 'crm.db'}", "query": QUERY}}}}})


@pytest.mark.parametrize(("template", "version", "field"), [
    ("nope", 1, "campaigns.digest.template"),
    ("digest", 7, "campaigns.digest.version"),
])
async def test_a_campaign_template_its_channel_does_not_have_is_refused_at_start(
        tmp_path: Path, template: str, version: int, field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await build_runtime(_project(tmp_path, template=template, version=version),
                            clock=FakeClock(T0))
    assert caught.value.field == field
    assert "not found in channels.email.templates" in caught.value.message
    assert not (tmp_path / "t.db").exists()  # refused before the store was opened


async def test_a_replay_deadline_past_the_supported_dates_is_refused(tmp_path: Path) -> None:
    rt = await build_runtime(_project(tmp_path, template="digest", version=1),
                             clock=FakeClock(T0))
    try:
        with pytest.raises(InvalidInput) as caught:
            await rt.scheduler().plan_replay("digest", "2026-05-25", now=T0,
                                             expires_at=T0 + 1e12)
        assert caught.value.field == "expires_in"
    finally:
        await rt.close()


@pytest.mark.parametrize("at", [1e12, -1e12, 1e300])
def test_a_time_no_calendar_shows_is_printed_as_epoch_seconds(at: float) -> None:
    assert when(at).endswith("(epoch seconds)")
