"""What ``providers.redaction.scrub`` leaves alone: URLs with a user are no address."""

from __future__ import annotations

import pytest

from tidings.core.redaction import scrub


@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:5432/tidings",
                                 "redis://:***@cache:6379/0",
                                 "amqp://guest:***@127.0.0.1:5672/"])
def test_a_url_with_a_user_is_no_address_to_scrub(url: str) -> None:
    # service logs name the store and broker: the host must survive the scrub
    assert scrub(f"store {url} ready") == f"store {url} ready"
