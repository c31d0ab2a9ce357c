"""The recipes of docs/django.md that update data, as written there (their source read from
the page by tests/integration/recipes.py and run here), behind views the server tests call."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from redlease_shop.models import Order

from redlease.contrib.django import model_lock

_spec = importlib.util.spec_from_file_location(
    "redlease_test_recipes", Path(__file__).resolve().parents[3] / "recipes.py"
)
assert _spec is not None and _spec.loader is not None
_recipes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recipes)

pay = _recipes.recipe("django.md", "pay", {"Order": Order, "model_lock": model_lock})


def pay_view(request: HttpRequest, pk: int) -> HttpResponse:
    pay(pk, 1)
    return HttpResponse("paid")
