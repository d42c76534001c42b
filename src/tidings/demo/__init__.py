"""``tidings demo``: the whole pipeline on SQLite against the sandbox, with faults on."""
