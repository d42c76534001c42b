"""``tidings.core.logs``: one format for every logger, and nothing personal or secret in it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import structlog

from support.logcapture import json_logs, lines, restored_logging
from tidings.core.errors import ConfigurationError
from tidings.core.logs import (
    Redactor,
    configure_logging,
    default_format,
    from_env,
    scrub_text,
    sensitive,
)

TOKEN = "tid_0123456789ab_" + "S" * 43


@pytest.fixture
def restore_logging() -> Iterator[None]:
    with restored_logging():
        yield


# ---------------------------------------------------------------- the processor


def redacted(**event: Any) -> dict[str, Any]:
    return dict(Redactor()(None, "info", dict(event)))


def test_fields_named_like_an_address_or_a_credential_are_dropped() -> None:
    out = redacted(event="send", key="k1", email="ada@example.com", to="+15551234567",
                   Authorization="Bearer abc", smtp_password="pw", auth_token="t",
                   to_address="ada@example.com", recipient="r_0011223344556677", attempt=2)

    assert out == {"event": "send", "key": "k1", "recipient": "r_0011223344556677",
                   "attempt": 2}


def test_sensitive_fields_are_dropped_at_any_depth() -> None:
    out = redacted(event="x", request={"phone": "+15551234567", "template": "t/v1",
                                       "headers": [{"token": "t", "accept": "json"}]})

    assert out["request"] == {"template": "t/v1", "headers": [{"accept": "json"}]}


@pytest.mark.parametrize("name", ["address", "TO", "Email", "phone", "password", "token",
                                  "secret", "authorization", "api_key", "client_secret"])
def test_sensitive_names(name: str) -> None:
    assert sensitive(name)


@pytest.mark.parametrize("name", ["key", "recipient", "message_id", "provider_request_id",
                                  "reason", "worker", "route", "status"])
def test_the_fields_an_engineer_needs_are_kept(name: str) -> None:
    assert not sensitive(name)


def test_email_and_phone_shaped_text_in_a_message_is_scrubbed() -> None:
    out = redacted(event="550 5.1.1 <ada.lovelace+news@example.co.uk>: user unknown; "
                         "also tried +1 (555) 123-4567",
                   reason="The 'To' number +15551234567 is not valid")

    assert out["event"] == "550 5.1.1 <[address]>: user unknown; also tried [number]"
    assert out["reason"] == "The 'To' number [number] is not valid"


def test_token_secrets_bearer_credentials_and_url_passwords_are_scrubbed() -> None:
    text = scrub_text(f"token {TOKEN} sent as Bearer {TOKEN}, db "
                      "postgresql://tidings:hunter2@db.internal:5432/tidings")

    assert "S" * 43 not in text and "hunter2" not in text
    assert "tid_0123456789ab_[secret]" in text  # the id still names the token
    assert "Bearer [secret]" in text
    assert "postgresql://tidings:[secret]@db.internal:5432/tidings" in text


def test_plain_text_is_left_alone() -> None:
    text = ("admitted 5000 of weekly-digest/2026-08-14 at 2026-08-14T09:00:01Z (+3 pages); "
            "basic authentication is off")
    assert scrub_text(text) == text


# ---------------------------------------------------------------- the formats


def test_json_is_one_object_per_line_with_time_level_logger_and_fields(
    restore_logging: None,
) -> None:
    stream = json_logs()
    log = logging.getLogger("tidings.worker")

    log.info("send", extra={"key": "digest/2026-08-14/cust_1/email/v3", "channel": "email",
                            "recipient": "r_00aa", "message_id": "m1",
                            "provider_request_id": "req_1", "attempt": 1,
                            "outcome": "rate_limited", "reason": "HTTP 429",
                            "worker": "w1", "email": "ada@example.com"})
    log.debug("multi\nline message for bob@example.com")

    first, second = lines(stream)
    assert list(first)[:4] == ["timestamp", "level", "logger", "event"]
    assert first["level"] == "info" and first["logger"] == "tidings.worker"
    assert first["event"] == "send"
    assert datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00")).tzinfo
    assert {k: first[k] for k in ("key", "channel", "recipient", "message_id",
                                  "provider_request_id", "attempt", "outcome", "reason",
                                  "worker")} == {
        "key": "digest/2026-08-14/cust_1/email/v3", "channel": "email", "recipient": "r_00aa",
        "message_id": "m1", "provider_request_id": "req_1", "attempt": 1,
        "outcome": "rate_limited", "reason": "HTTP 429", "worker": "w1"}
    assert "email" not in first
    assert second["event"] == "multi\nline message for [address]"


def test_tracebacks_are_rendered_and_scrubbed(restore_logging: None) -> None:
    stream = json_logs()
    try:
        raise ValueError("no such mailbox: ada@example.com")
    except ValueError:
        logging.getLogger("tidings.api").exception("failed")

    (line,) = lines(stream)
    assert line["level"] == "error"
    assert "ValueError: no such mailbox: [address]" in line["exception"]
    assert "ada@example.com" not in json.dumps(line)


def test_third_party_and_structlog_loggers_share_the_format(restore_logging: None) -> None:
    stream = json_logs("info")

    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.",
                                               extra={"color_message": "\x1b[31mInvalid"})
    structlog.get_logger("tidings.demo").info("hello %s", "ada@example.com", attempt=3)

    uvicorn, native = lines(stream)
    assert uvicorn["logger"] == "uvicorn.error" and uvicorn["level"] == "warning"
    assert "color_message" not in uvicorn
    assert native["logger"] == "tidings.demo"
    assert native["event"] == "hello [address]" and native["attempt"] == 3


def test_level_filters_and_reconfiguring_replaces_the_handler(restore_logging: None) -> None:
    first = json_logs("warning")
    logging.getLogger("tidings.worker").info("not shown")
    second = io.StringIO()
    configure_logging("console", "info", stream=second)
    logging.getLogger("tidings.worker").info("shown", extra={"key": "k1"})
    logging.getLogger("tidings.worker").debug("not shown either")

    assert first.getvalue() == ""
    (line,) = second.getvalue().splitlines()
    assert "shown" in line and "key=k1" in line and "[tidings.worker]" in line
    assert "\x1b[" not in line  # no colours into something that is not a terminal


def test_chatty_http_client_loggers_stay_quiet_at_info(restore_logging: None) -> None:
    stream = json_logs("info")
    logging.getLogger("httpx").info('HTTP Request: POST https://api.example "HTTP/1.1 202"')
    assert stream.getvalue() == ""


def test_the_default_format_is_json_off_a_terminal() -> None:
    assert default_format(io.StringIO()) == "json"


def test_environment_settings_are_checked_and_name_the_variable() -> None:
    assert from_env({}) == (None, "info")
    assert from_env({"TIDINGS_LOG_FORMAT": "JSON", "TIDINGS_LOG_LEVEL": "Debug"}) == (
        "json", "debug")
    with pytest.raises(ConfigurationError) as bad:
        from_env({"TIDINGS_LOG_FORMAT": "xml"})
    assert bad.value.field == "TIDINGS_LOG_FORMAT"
    with pytest.raises(ConfigurationError) as loud:
        from_env({"TIDINGS_LOG_LEVEL": "verbose"})
    assert loud.value.field == "TIDINGS_LOG_LEVEL"
