"""``manage.py tidings_worker``, ``tidings_scheduler`` and ``tidings_reconcile``: the same
code as ``tidings worker``, ``tidings scheduler`` and ``tidings reconcile``
(``tidings.processes.commands``), on the settings of ``settings.TIDINGS``."""
