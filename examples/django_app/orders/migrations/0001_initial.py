"""The orders and their lines (with the quantity CHECK)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = ()
    operations = (
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("customer_id", models.CharField(max_length=64)),
                ("email", models.CharField(max_length=254)),
            ],
        ),
        migrations.CreateModel(
            name="OrderLine",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("sku", models.CharField(max_length=64)),
                ("quantity", models.IntegerField()),
                ("order", models.ForeignKey(on_delete=models.CASCADE, related_name="lines",
                                            to="orders.order")),
            ],
            options={
                "constraints": [models.CheckConstraint(condition=models.Q(quantity__gt=0),
                                                       name="quantity_positive")],
            },
        ),
    )
