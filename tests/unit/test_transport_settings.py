"""The setting ``transport``: the store's own queue or a broker URL, checked up front."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError
from tidings.runtime import build_runtime
from tidings.transports.open import open_transport, redact_url, split_prefix, transport_kind


@pytest.mark.parametrize(("value", "kind"), [
    ("sql", "sql"),
    ("redis://127.0.0.1:6379/0", "redis"),
    ("redis://:s3cret@redis.internal", "redis"),
    ("rediss://user:pw@redis.internal:6380/2?prefix=fleet-a", "redis"),
    ("amqp://guest:guest@127.0.0.1:5672/", "amqp"),
    ("amqps://u:p@[::1]:5671/notify?prefix=x.y", "amqp"),
])
def test_the_store_queue_and_broker_urls_are_accepted(value: str, kind: str) -> None:
    assert transport_kind(value) == kind
    assert Settings.parse({"transport": value}).transport == value


def test_the_default_is_the_store_queue() -> None:
    assert Settings.parse({}).transport == "sql"


@pytest.mark.parametrize(("value", "says"), [
    ("kafka://broker:9092", "is not a transport"),
    ("redis", "is not a transport"),
    ("redis://", "names no host"),
    ("redis://host:99999/0", "not a valid redis URL"),
    ("redis://host/zero", "database number"),
    ("amqp://host/?heartbeat=5", "unknown option 'heartbeat'"),
    ("redis://host/0?prefix=a b", "prefix must be"),
    ("", "is not a transport"),
])
def test_a_bad_transport_is_refused_naming_the_field(value: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"transport": value})
    assert caught.value.field == "transport"
    assert says in caught.value.message


@given(st.text(alphabet=st.characters(categories=["L", "N"]), min_size=4, max_size=20))
def test_a_password_is_never_echoed(text: str) -> None:
    password = f"pw{text}"  # "pw" appears nowhere else in these URLs or their errors
    for url in (f"kafka://user:{password}@host", f"redis://:{password}@/0",
                f"amqp://user:{password}@host:99999/", f"redis://:{password}@h/x?y=1"):
        with pytest.raises(ConfigurationError) as caught:
            Settings.parse({"transport": url})
        assert password not in str(caught.value), url
        assert "***" in caught.value.message


def test_redaction_keeps_everything_but_the_password() -> None:
    assert redact_url("amqp://guest:pw@h:5672/v?prefix=p") == "amqp://guest:***@h:5672/v?prefix=p"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def test_the_prefix_option_is_split_off_for_the_client() -> None:
    assert split_prefix("redis://h:6379/0?prefix=fleet") == ("redis://h:6379/0", "fleet")
    assert split_prefix("redis://h:6379/0") == ("redis://h:6379/0", "tidings")


async def test_sql_without_a_store_queue_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as caught:
        await open_transport("sql")
    assert caught.value.field == "transport"


async def test_the_runtime_opens_the_store_queue_for_sql(tmp_path: object) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path}/t.db", "transport": "sql"})
    async with await build_runtime(settings) as runtime:
        assert runtime.enqueue_in_store
        assert runtime.transport.name == "sql"
