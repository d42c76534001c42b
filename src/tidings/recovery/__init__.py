"""Recovery: what makes the pipeline whole again after a crash, a lost message or a
send whose answer never came.

The reconciler's sweeps, webhook evidence that settles uncertain sends, provider
reports recorded beside ``accepted``, and retention (what is pruned, and when).
Imports the core, config, the ports, admission and delivery; never operate or a face.
"""
