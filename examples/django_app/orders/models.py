"""An order and its lines; a line's quantity must be positive (a CHECK in the table)."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    id = models.BigIntegerField(primary_key=True)
    customer_id = models.CharField(max_length=64)
    email = models.CharField(max_length=254)


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    sku = models.CharField(max_length=64)
    quantity = models.IntegerField()

    class Meta:
        constraints = (models.CheckConstraint(condition=models.Q(quantity__gt=0),
                                              name="quantity_positive"),)
