"""Digests waiting for their windows show in ``GET /v1/status`` (and so ``tidings status
--json``), in the status line the CLI prints, on the dashboard's overview and in
``/metrics``; and go once admitted."""

from __future__ import annotations

from pathlib import Path

from apikit import T0, open_api
from test_api_ui import HTML, session

from tidings import Digest
from tidings.cli import textout
from tidings.operate.readmodel import DigestStatus


async def test_pending_digests_show_in_status_and_metrics_until_admitted(
        tmp_path: Path) -> None:
    async with open_api(tmp_path, members=0, base_url="https://tidings.test") as api:
        for n in range(3):
            await api.runtime.notify(
                key=f"c{n}", recipient={"id": "cust-1", "email": "a@example.com"},
                channels=["email"], template="weekly-digest-v3", data={"n": n},
                digest=Digest(key="comments:cust-1", window_s=300))
        api.clock.advance(120)

        status = (await api.client.get("/v1/status", headers=api.auth("viewer"))).json()
        metrics = (await api.client.get("/metrics", headers=api.auth("viewer"))).text

        assert status["digests"] == {"windows": 1, "items": 3, "oldest_age_s": 120.0}
        assert "tidings_digest_windows_pending 1.0" in metrics
        assert "tidings_digest_items_pending 3.0" in metrics
        assert "tidings_digest_oldest_window_age_seconds 120.0" in metrics
        await session(api, "viewer")
        page = (await api.client.get("/ui", headers=HTML)).text
        assert 'data-digests="1:3"' in page
        assert "1 window open or closing" in " ".join(page.split())

        api.clock.advance(180)
        closed = await api.runtime.close_digests()
        assert (closed.windows, closed.admitted) == (1, 1)
        status = (await api.client.get("/v1/status", headers=api.auth("viewer"))).json()
        assert status["digests"] == {"windows": 0, "items": 0, "oldest_age_s": None}
        assert "data-digests" not in (await api.client.get("/ui", headers=HTML)).text
        assert api.clock.now() == T0 + 300


def test_the_status_line_says_what_waits_and_nothing_when_none() -> None:
    assert textout.digests(DigestStatus()) is None
    line = textout.digests(DigestStatus(windows=2, items=7, oldest_age_s=95.4))
    assert line == "digests: 2 window(s) open or closing, 7 item(s); oldest opened 95 s ago"
