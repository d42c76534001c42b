"""The example's tests: tidings.testing's pytest plug-in, with the app's own client.

Run them: ``DATABASE_URL=postgresql://… pytest examples/fastapi_sqlalchemy`` (a database
the tests may write to; they skip without one)."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

import tidings

with warnings.catch_warnings():
    # Some starlette releases warn about the httpx they test with: not the shop's concern.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the example's app.py

pytest_plugins = ["tidings.testing.pytest_plugin"]


@pytest.fixture
def app() -> FastAPI:
    url = os.environ.get("DATABASE_URL")
    if not url:
        pytest.skip("set DATABASE_URL to a PostgreSQL database the tests may write to")
    from app import create_app

    return create_app(url)


@pytest.fixture
def http(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:  # runs the lifespan: tables made, client closed after
        yield client


@pytest.fixture
def tidings_client(app: FastAPI, http: TestClient) -> tidings.Client:
    """The plug-in's fixtures (tidings_outbox, tidings_eager) on the app's own client."""
    client: tidings.Client = app.state.tidings
    return client
