"""Doors from the code teams already write: notify inside an application's own database
transaction, from its ORM or framework (``contrib.sqlalchemy``, ``contrib.django``).

Each module imports its framework only when imported itself; tidings needs none of
them. They sit above every stage and call the runtime's public methods.
"""
