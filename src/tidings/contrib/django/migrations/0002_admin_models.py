"""The admin's unmanaged models over tidings' tables: Django's state only, no SQL."""

from django.db import migrations, models


class Migration(migrations.Migration):
    """Intent and Event, read-only views of the store's tables (``models.py``)."""

    dependencies = [("tidings", "0001_schema")]  # noqa: RUF012
    operations = [  # noqa: RUF012
        migrations.CreateModel(
            name="Intent",
            fields=[
                ("key", models.TextField(primary_key=True, serialize=False)),
                ("channel", models.TextField()),
                ("recipient_id", models.TextField()),
                ("template", models.TextField()),
                ("campaign", models.TextField(null=True)),
                ("state", models.TextField()),
                ("due_at", models.FloatField()),
                ("created_at", models.FloatField()),
                ("updated_at", models.FloatField()),
                ("enqueued_at", models.FloatField(null=True)),
                ("accepted_at", models.FloatField(null=True)),
                ("finished_at", models.FloatField(null=True)),
                ("attempts", models.IntegerField()),
                ("receipt", models.TextField(null=True)),
                ("disposition", models.TextField(null=True)),
                ("reason", models.TextField(null=True)),
            ],
            options={"db_table": "intents", "ordering": ("-updated_at",),
                     "default_permissions": ("view",), "managed": False},
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("key", models.TextField()),
                ("channel", models.TextField()),
                ("type", models.TextField()),
                ("at", models.FloatField()),
                ("state", models.TextField(null=True)),
                ("attempt", models.IntegerField(null=True)),
                ("worker", models.TextField(null=True)),
                ("provider_request_id", models.TextField(null=True)),
                ("detail", models.TextField(null=True)),
            ],
            options={"db_table": "events", "ordering": ("at", "id"),
                     "default_permissions": ("view",), "managed": False},
        ),
    ]
