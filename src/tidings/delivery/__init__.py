"""Delivery: a received message becomes one provider call and one recorded outcome.

The worker (receive → claim → compose → pace → send → settle → ack), the pacer shared
by every process of a channel, composition (preferences, addresses, templates), the
uncertain-send policies and the group commit of outcomes. Imports the core, config,
the ports and admission; never recovery, operate or a face.
"""
