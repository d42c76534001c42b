"""Settings refuse what cannot work, naming the field: durations are finite and above
zero (or zero where zero means none), URLs have a scheme and a host."""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tidings.config import providers as provider_config
from tidings.config import settings as settings_module
from tidings.config.settings import Settings
from tidings.core.durations import LeaseSeconds, Seconds, SecondsOrZero
from tidings.core.errors import ConfigurationError

#: Every duration field, as a dotted path into a settings mapping.
DURATIONS = [
    "worker.lease_s", "worker.visibility_s", "worker.reconcile_every_s",
    "reconciler.lost_after_s", "retry.base_s", "retry.cap_s", "retry.rate_limit_floor_s",
    "retry.rate_limit_cap_s", "scheduler.interval_s", "scheduler.relay_lease_s",
    "api.trigger_tolerance_s", "api.paused_retry_after_s", "api.idempotency_ttl_s",
    "api.rate_window_s", "webhooks.sendgrid.tolerance_s", "webhooks.generic.tolerance_s",
]
ZERO_MEANS_NONE = ["reconciler.uncertain_after_s", "scheduler.relay_horizon_s",
                   "api.trigger_early_s", "api.metrics_cache_s"]
CHANNEL = {"quota": "10/s"}
CAMPAIGN = {"cron": "0 9 * * *", "channels": ["email"], "template": "t",
            "audience": {"sql": {"url": "sqlite:///crm.db", "query": "SELECT 1"}}}


def nested(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: nested(rest, value) if rest else value}


def refusal(data: dict[str, Any]) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as raised:
        Settings.parse(data)
    return raised.value


@pytest.mark.parametrize("path", DURATIONS)
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, 0.0, -1, -1e-9])
def test_a_duration_that_is_not_finite_and_positive_is_refused_naming_it(
        path: str, value: float) -> None:
    error = refusal(nested(path, value))

    assert error.field == path


@pytest.mark.parametrize("path", ZERO_MEANS_NONE)
@pytest.mark.parametrize("value", [math.inf, math.nan, -1])
def test_a_duration_where_zero_means_none_still_refuses_the_rest(path: str, value: float
                                                                 ) -> None:
    assert refusal(nested(path, value)).field == path
    Settings.parse(nested(path, 0))


@pytest.mark.parametrize(("section", "field", "value"), [
    ("channel", "min_interval_s", math.inf), ("channel", "min_interval_s", -0.5),
    ("channel", "provider.timeout_s", math.nan), ("channel", "provider.timeout_s", 0),
    ("campaign", "expires_after_s", math.inf), ("campaign", "expires_after_s", 0),
    ("campaign", "grace_s", math.nan), ("campaign", "grace_s", -1),
])
def test_channel_and_campaign_durations_name_their_path(section: str, field: str,
                                                        value: float) -> None:
    if section == "channel":
        data = {"channels": {"email": {**CHANNEL, **nested(field, value)}}}
        where = f"channels.email.{field}"
    else:
        data = {"channels": {"email": CHANNEL},
                "campaigns": {"digest": {**CAMPAIGN, field: value}}}
        where = f"campaigns.digest.{field}"

    assert refusal(data).field == where


def test_infinity_written_in_toml_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "tidings.toml"
    path.write_text("[worker]\nlease_s = inf\n[reconciler]\nlost_after_s = 60\n")

    with pytest.raises(ConfigurationError) as raised:
        Settings.load(path, env={})

    assert raised.value.field == "worker.lease_s"
    assert "finite" in raised.value.message


@given(st.floats(min_value=1e-6, max_value=1e9))
def test_every_finite_positive_duration_is_kept(seconds: float) -> None:
    worker = Settings.parse({"worker": {"reconcile_every_s": seconds,
                                        "lease_s": max(1.0, seconds)}}).worker
    assert (worker.reconcile_every_s, worker.lease_s) == (seconds, max(1.0, seconds))


@pytest.mark.parametrize("field", ["lease_s", "visibility_s"])
def test_a_lease_or_visibility_under_a_second_is_refused(field: str) -> None:
    # Shorter than a send's round trip, every message would be released or handed out
    # again while in hand, for ever.
    with pytest.raises(ConfigurationError) as raised:
        Settings.parse({"worker": {field: 0.001}})
    assert raised.value.field == f"worker.{field}"


def test_the_clock_offset_may_be_negative_but_not_infinite() -> None:
    assert Settings.parse({"clock_offset_s": -30}).clock_offset_s == -30
    assert refusal({"clock_offset_s": math.inf}).field == "clock_offset_s"


def test_every_duration_field_uses_the_shared_type() -> None:
    models = {m for module in (settings_module, provider_config) for m in vars(module).values()
              if isinstance(m, type) and issubclass(m, BaseModel)}
    allowed = (Seconds, SecondsOrZero, LeaseSeconds, Seconds | None, SecondsOrZero | None)
    checked = []
    for model in models:
        hints = typing.get_type_hints(model, include_extras=True)
        for name in model.model_fields:
            if not name.endswith("_s") or (model, name) == (Settings, "clock_offset_s"):
                continue  # the clock offset is not a duration: any finite sign
            assert hints[name] in allowed, f"{model.__name__}.{name} is {hints[name]}"
            checked.append(f"{model.__name__}.{name}")
    assert {"WorkerSettings.lease_s", "WorkerSettings.visibility_s",
            "ReconcilerSettings.lost_after_s", "SmtpProviderSettings.timeout_s"} <= set(checked)


# ---------------------------------------------------------------- URLs


@pytest.mark.parametrize("url", ["not a url", "http://", "https:///path", "ftp://host/x",
                                 "//host/x", "host.example.com/send", "http://exa mple.com",
                                 "http://host:port/x", "https://host/\nx", ""])
def test_a_provider_url_that_is_not_a_url_is_refused_at_load(url: str) -> None:
    sandbox = refusal({"channels": {"email": {"provider": {"kind": "sandbox", "url": url}}}})
    http = refusal({"channels": {"email": {"provider": {
        "kind": "http", "url": url, "body": {"to": "to"}}}}})
    webhook = refusal({"webhooks": {"public_url": url}})

    assert sandbox.field == "channels.email.provider.url"
    assert http.field == "channels.email.provider.url"
    assert webhook.field == "webhooks.public_url"
    assert "http:// or https:// URL with a host" in sandbox.message


@pytest.mark.parametrize(("kind", "field", "extra"), [
    ("twilio", "base_url", {"account_sid": "AC1", "from_number": "+15550001111"}),
    ("twilio", "status_callback", {"account_sid": "AC1", "from_number": "+15550001111"}),
    ("sendgrid", "base_url", {"from_address": "news@tidings.test"}),
    ("postmark", "base_url", {"from_address": "news@tidings.test"}),
])
def test_every_provider_url_field_is_checked(kind: str, field: str, extra: dict[str, Any]
                                             ) -> None:
    error = refusal({"channels": {"email": {"provider": {
        "kind": kind, field: "not a url", **extra}}}})

    assert error.field == f"channels.email.provider.{field}"


def test_a_url_with_a_password_is_not_quoted_back() -> None:
    error = refusal({"channels": {"email": {"provider": {
        "kind": "sandbox", "url": "ftp://user:hunter2@host/"}}}})

    assert "hunter2" not in str(error)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8025", "https://api.example.com/v3/send",
                                 "http://localhost", "https://[::1]:8443/x?y=1"])
def test_real_urls_are_kept_as_written(url: str) -> None:
    settings = Settings.parse({"channels": {"email": {"provider": {"kind": "sandbox",
                                                                   "url": url}}}})

    assert settings.channels["email"].provider.url == url  # type: ignore[union-attr]


def test_a_campaign_that_names_a_channel_twice_is_refused_naming_the_repeat() -> None:
    raised = refusal({"store": "sqlite:///x.db", "channels": {"email": {}},
                      "campaigns": {"weekly": {**CAMPAIGN,
                                               "channels": ["email", "email"]}}})
    assert raised.field == "campaigns.weekly.channels[1]"
    assert "repeats channel 'email' (channels[0])" in raised.message
