"""One module per system under test; each module's docstring is its production settings.

A module is imported by that system's worker processes (``celery -A systems.celery``,
``dramatiq systems.dramatiq``, …) and run as ``python -m systems.<name> enqueue --n N``
by the driver to produce jobs. The driver itself never imports them: what it needs to
start and kill a system is in ``bench/peers/catalog.py``.
"""
