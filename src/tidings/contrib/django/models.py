"""tidings' intents and their events, as Django reads them for the admin (read-only).

Unmanaged models over the store's own tables (``intents``, ``events``): Django never
creates, alters or writes them (tidings' migrations own them, ``schema.py``), and the
admin (``admin.py``) only reads. They are read through Django's database, so the admin
needs the store on it, its tables on the connection's ``search_path``. Only the columns
an operator reads are named; the address and the template data are left out, as the
dashboard leaves them (the recipient is shown by its surrogate).
"""

from __future__ import annotations

from django.db import models


class Intent(models.Model):
    """One delivery of the ledger (``tidings.core.model.Intent``)."""

    key: models.TextField[str, str] = models.TextField(primary_key=True)
    channel: models.TextField[str, str] = models.TextField()
    recipient_id: models.TextField[str, str] = models.TextField()
    template: models.TextField[str, str] = models.TextField()
    campaign: models.TextField[str | None, str | None] = models.TextField(null=True)
    state: models.TextField[str, str] = models.TextField()
    due_at: models.FloatField[float, float] = models.FloatField()
    created_at: models.FloatField[float, float] = models.FloatField()
    updated_at: models.FloatField[float, float] = models.FloatField()
    enqueued_at: models.FloatField[float | None, float | None] = models.FloatField(null=True)
    accepted_at: models.FloatField[float | None, float | None] = models.FloatField(null=True)
    finished_at: models.FloatField[float | None, float | None] = models.FloatField(null=True)
    attempts: models.IntegerField[int, int] = models.IntegerField()
    receipt: models.TextField[str | None, str | None] = models.TextField(null=True)
    disposition: models.TextField[str | None, str | None] = models.TextField(null=True)
    reason: models.TextField[str | None, str | None] = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "intents"
        ordering = ("-updated_at",)
        default_permissions = ("view",)

    def __str__(self) -> str:
        return self.key


class Event(models.Model):
    """One entry of an intent's timeline (the append-only ``events`` table)."""

    id: models.BigIntegerField[int, int] = models.BigIntegerField(primary_key=True)
    key: models.TextField[str, str] = models.TextField()
    channel: models.TextField[str, str] = models.TextField()
    type: models.TextField[str, str] = models.TextField()
    at: models.FloatField[float, float] = models.FloatField()
    state: models.TextField[str | None, str | None] = models.TextField(null=True)
    attempt: models.IntegerField[int | None, int | None] = models.IntegerField(null=True)
    worker: models.TextField[str | None, str | None] = models.TextField(null=True)
    provider_request_id: models.TextField[str | None, str | None] = models.TextField(null=True)
    detail: models.TextField[str | None, str | None] = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "events"
        ordering = ("at", "id")
        default_permissions = ("view",)

    def __str__(self) -> str:
        return f"{self.key} {self.type}"
