from django.db import models


class Counter(models.Model):
    value = models.IntegerField(default=0)

    class Meta:
        app_label = "redlease_shop"


class SpecialCounter(Counter):
    """A proxy: its rows are Counter's rows, and so are their locks."""

    class Meta:
        proxy = True
        app_label = "redlease_shop"
