"""Django's management commands of tidings (``manage.py tidings_worker`` …)."""
