"""Admission: what becomes an intent, and when it is published.

Campaigns and their audiences, the scheduler's bounded passes over an occurrence,
``notify()``'s intake, the outbox relay that publishes what a broker transport needs,
and rollouts of a campaign version. Imports the core, config and the ports
(``stores``, ``transports``); never delivery, recovery, operate or a face.
"""
