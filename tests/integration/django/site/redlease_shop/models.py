from django.db import models

from redlease.contrib.django.fencing import FenceField


class Counter(models.Model):
    value = models.IntegerField(default=0)

    class Meta:
        app_label = "redlease_shop"


class SpecialCounter(Counter):
    """A proxy: its rows are Counter's rows, and so are their locks."""

    class Meta:
        proxy = True
        app_label = "redlease_shop"


class Order(models.Model):
    """The row of docs/django.md's ``model_lock`` recipe (``redlease_site.recipes``)."""

    total = models.IntegerField(default=0)

    class Meta:
        app_label = "redlease_shop"


class Stock(models.Model):
    """A row written with fenced updates."""

    qty = models.IntegerField(default=0)
    fence = FenceField()

    class Meta:
        app_label = "redlease_shop"
