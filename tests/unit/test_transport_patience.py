"""A broker that cannot be reached is tried again for the patience the composition root
gives (services ride out a restart; a command someone waits on answers in seconds), and
the error names the broker without its password and how long it was tried."""

from __future__ import annotations

import socket

import pytest

from tidings.core.errors import TransportError
from tidings.transports.open import open_transport


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("scheme", ["redis://:sekret@127.0.0.1:{port}/0",
                                    "amqp://guest:sekret@127.0.0.1:{port}/"])
async def test_an_unreachable_broker_is_refused_after_the_patience_given(scheme: str) -> None:
    url = scheme.format(port=_closed_port())
    with pytest.raises(TransportError) as caught:
        await open_transport(url, patience_s=0.3)
    assert "tried for 0.3 s" in str(caught.value)
    assert "sekret" not in str(caught.value)
