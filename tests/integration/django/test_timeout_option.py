"""``@exclusive`` speaks the library's wait vocabulary (issue 32): ``timeout=`` (seconds; 0 one
try, the default here; None as long as it takes), and a misspelt option such as ``wait=`` is an
``InvalidArgumentError`` (and a ``TypeError``) naming it and listing the options."""

from __future__ import annotations

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

import redlease
from redlease import InvalidArgumentError
from redlease.contrib.django import exclusive


@pytest.mark.parametrize("misspelt", ["wait", "timout", "blocking"])
def test_a_misspelt_option_is_named_with_the_valid_ones(misspelt: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        exclusive("r:{pk}", **{misspelt: 5})  # type: ignore[arg-type]  # wrong on purpose
    assert isinstance(raised.value, TypeError)
    message = str(raised.value)
    assert f"unknown option {misspelt!r}" in message
    assert "the options are lease, on_busy, on_lost, timeout" in message


def test_timeout_waits_then_answers_the_busy_status(configured: str) -> None:
    @exclusive("report:{pk}", timeout=0.3, on_busy=423)
    def build(request: object, pk: int) -> HttpResponse:
        return HttpResponse("built")

    request = RequestFactory().post("/reports/1/build")
    with redlease.Client.from_url(configured) as other:
        with other.lock("report:1").hold(lease=60):
            assert build(request, pk=1).status_code == 423
        assert build(request, pk=1).status_code == 200


def test_timeout_none_waits_as_long_as_it_takes(configured: str) -> None:
    @exclusive("report:{pk}", timeout=None, on_busy="raise")
    def build(pk: int) -> str:
        return "built"

    assert build(pk=2) == "built"
