"""Django migrations of the tidings app: the store's own, applied by ``manage.py migrate``."""
