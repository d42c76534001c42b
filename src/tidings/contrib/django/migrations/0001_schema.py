"""tidings' tables: the store's own migrations (``tidings.contrib.django.schema``)."""

from django.db import migrations

from tidings.contrib.django.schema import migrate_operation


class Migration(migrations.Migration):
    """The store's migrations, applied once; reversing it leaves the tables."""

    # Django's own shape for a migration: class attributes it reads.
    initial = True
    dependencies = []  # noqa: RUF012
    operations = [migrations.RunPython(  # noqa: RUF012
        migrate_operation, migrations.RunPython.noop, elidable=False)]
