"""Settings as data: the frozen models read from ``tidings.toml`` and the environment,
each validating its own fields and naming the one that is wrong.

Imports ``tidings.core`` only. Checks that need another part (retention against the
stores' partitions, a provider's own rules) run where the runtime is composed
(``tidings.runtime``), not here.
"""
