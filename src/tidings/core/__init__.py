"""The core: value types, states and their transitions, outcomes, claims, pacing and
retry arithmetic, keys, errors, the clock, cron, logs.

Pure rules and the types every other part speaks. It imports nothing of tidings outside
``tidings.core``; everything else may import it.
"""
