"""The example shop's settings: one PostgreSQL database (``$DATABASE_URL``) for Django's
tables and, through ``TIDINGS``, tidings' store."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MIDDLEWARE = [  # for the admin (its read-only view of tidings' intents: /admin/)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages",
    "tidings.contrib.django", "orders",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shop")
_url = urlsplit(DATABASE_URL)
DATABASES = {
    "default": {
        # With psycopg (3) installed, Django's postgresql backend runs on it: the
        # connection a notify joins.
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "OPTIONS": dict(parse_qsl(_url.query)),  # e.g. options=-csearch_path=shop
    },
}

# tidings' settings inline (a path to a tidings.toml works too, or both: "config": path).
TIDINGS = {
    "store": os.environ.get("TIDINGS_STORE", DATABASE_URL),
    "channels": {
        "email": {"provider": {"kind": "sandbox",
                               "url": os.environ.get("SANDBOX_URL", "http://127.0.0.1:8025")}},
    },
}
