"""``tidings api`` as a real process (uvicorn on a free port), driven over real HTTP the
way an external cron, a publisher and an on-call engineer do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from support.api_process import api_server, create_token
from support.cli_process import migrated
from support.crm import QUERY, write_crm
from tidings.api import sign

SECRET = "acceptance-secret"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    crm = write_crm(tmp_path / "crm.db")
    path = tmp_path / "tidings.toml"
    # Every minute, so an occurrence is always due whenever the test runs.
    path.write_text(f'''
store = "sqlite:///{tmp_path / 'api.db'}"
[channels.email]
provider = {{ kind = "sandbox-twin" }}
quota = "50/s"
[campaigns.digest]
cron = "* * * * *"
channels = ["email"]
template = "digest"
version = 2
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}
[campaigns.reminder]
cron = "* * * * *"
channels = ["email"]
template = "reminder"
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}
[api.queues.digest]
campaign = "digest"
''')
    migrated(path)
    return path


@pytest.fixture
def tokens(config: Path) -> dict[str, str]:
    return {scope: create_token(config, scope) for scope in ("publish", "viewer")}


@pytest.fixture
def server(config: Path, tokens: dict[str, str]) -> Iterator[str]:
    with api_server(config, {"TIDINGS_TRIGGER_SECRETS": f"{SECRET},older-secret"}) as base:
        yield base


@pytest.mark.slow
def test_a_cron_a_publisher_and_an_operator_over_real_http(
    server: str, tokens: dict[str, str]
) -> None:
    with httpx.Client(base_url=server, timeout=10) as http:
        # The external cron: a signed trigger, answered at once with the counts.
        body = b'{"campaign":"digest"}'
        ts = int(time.time())
        headers = {"X-Tidings-Timestamp": str(ts), "Content-Type": "application/json",
                   "X-Tidings-Signature": sign(SECRET, timestamp=ts, method="POST",
                                               target="/v1/trigger/digest", body=body)}
        started = time.monotonic()
        triggered = http.post("/v1/trigger/digest", content=body, headers=headers)
        assert time.monotonic() - started < 5
        assert triggered.status_code == 200, triggered.text
        assert triggered.json()["pass"]["admitted"] == 30
        assert triggered.json()["more"] is False
        replayed = http.post("/v1/trigger/digest", content=body, headers=headers)
        assert replayed.status_code == 409

        # A publisher written against a managed queue API.
        today = datetime.now(UTC).date().isoformat()
        publish = {"Authorization": f"Bearer {tokens['publish']}", "Idempotency-Key": "evt-1",
                   "Content-Type": "application/json"}
        message = {"queue": "digest", "payload": {"customer_id": "cust_007",
                                                  "schedule_day": today, "template": "digest-v2"}}
        first = http.post("/v1/queue/publish", json=message, headers=publish)
        again = http.post("/v1/queue/publish", json=message, headers=publish)
        other = http.post("/v1/queue/publish", headers=publish,
                          json={**message, "payload": {**message["payload"],
                                                       "customer_id": "cust_008"}})
        assert first.status_code == again.status_code == 202, first.text
        assert first.json() == again.json()
        assert first.json()["keys"] == [f"digest/{today}/cust_007/email/v2"]
        assert other.status_code == 409

        # The on-call engineer.
        viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
        status = http.get("/v1/status", headers=viewer).json()
        assert status["channels"]["email"]["total"] == 31
        assert status["campaigns"]["digest"]["latest_occurrence"]["status"] == "done"
        assert http.get("/v1/status").status_code == 401
        metrics = http.get("/metrics", headers=viewer).text
        assert 'tidings_trigger_success_total{campaign="digest"} 1.0' in metrics
        assert 'tidings_publish_rejections_total{reason="idempotency_conflict"} 1.0' in metrics
        assert http.get("/openapi.json").json()["info"]["title"] == "tidings"


def signed_for(path: str, body: bytes = b"") -> dict[str, str]:
    ts = int(time.time())
    return {"X-Tidings-Timestamp": str(ts), "X-Tidings-Signature": sign(
        SECRET, timestamp=ts, method="POST", target=path, body=body)}


@pytest.mark.slow
def test_a_signature_opens_only_the_campaign_it_was_made_for(
    server: str, tokens: dict[str, str]
) -> None:
    with httpx.Client(base_url=server, timeout=10) as http:
        # Signed for the reminder, sent to the digest: refused, nothing admitted.
        crossed = http.post("/v1/trigger/digest", headers=signed_for("/v1/trigger/reminder"))
        assert crossed.status_code == 401, crossed.text
        assert crossed.json()["field"] == "header.X-Tidings-Signature"
        viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
        assert http.get("/v1/status", headers=viewer).json()["channels"]["email"]["total"] == 0

        # The same signature on the campaign it names opens it, once.
        headers = signed_for("/v1/trigger/reminder")
        opened = http.post("/v1/trigger/reminder", headers=headers)
        assert opened.status_code == 200, opened.text
        assert opened.json()["campaign"] == "reminder"
        assert opened.json()["pass"]["admitted"] == 30
        assert http.post("/v1/trigger/reminder", headers=headers).status_code == 409
        status = http.get("/v1/status", headers=viewer).json()
        assert status["campaigns"]["reminder"]["total"] == 30
        assert status["campaigns"]["digest"]["total"] == 0


@pytest.mark.slow
def test_a_token_past_its_expiry_is_refused_by_the_api(config: Path) -> None:
    hour = create_token(config, "viewer", name="short", expires_in="1h")
    month = create_token(config, "viewer", name="long", expires_in="30d")
    # The same store served two hours later (the API's clock runs ahead), no sleeping.
    later = config.with_name("later.toml")
    later.write_text("clock_offset_s = 7200.0\n" + config.read_text())

    with api_server(later, {}) as base, httpx.Client(base_url=base, timeout=10) as http:
        refused = http.get("/v1/status", headers={"Authorization": f"Bearer {hour}"})
        assert refused.status_code == 401, refused.text
        assert refused.json()["field"] == "header.Authorization"
        assert f"token tid_{hour.split('_')[1]} expired at " in refused.json()["message"]
        valid = http.get("/v1/status", headers={"Authorization": f"Bearer {month}"})
        assert valid.status_code == 200, valid.text
