"""Views protected by ``exclusive``; the tests drive them with Django's test clients."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from redlease_shop.models import Counter

from redlease import Client
from redlease.contrib.django import exclusive, get_async_client, get_client

WAIT = 30.0
ENTERED: dict[int, threading.Event] = {}
LEAVE: dict[int, threading.Event] = {}
ASYNC_ENTERED: dict[int, asyncio.Event] = {}
ASYNC_LEAVE: dict[int, asyncio.Event] = {}
ASYNC_COUNTS: dict[int, int] = {}


@exclusive("hold:{pk}", on_busy=423)
def hold(request: HttpRequest, pk: int) -> HttpResponse:
    """Holds the lock until the test sets ``LEAVE[pk]``."""
    ENTERED[pk].set()
    LEAVE[pk].wait(WAIT)
    return HttpResponse("done")


@exclusive("counter:{pk}", timeout=WAIT)
def count(request: HttpRequest, pk: int) -> HttpResponse:
    """A read-modify-write of a row: without the lock, concurrent requests lose updates."""
    row = Counter.objects.get(pk=pk)
    time.sleep(0.002)  # widens the window between the read and the write
    row.value += 1
    row.save(update_fields=["value"])
    return JsonResponse({"value": row.value})


@exclusive("hold:{pk}", on_busy="raise")
def raising(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse("done")


def busy_json(request: HttpRequest, pk: int) -> HttpResponse:
    return JsonResponse({"busy": pk}, status=503, headers={"Retry-After": "1"})


@exclusive("hold:{pk}", on_busy=busy_json)
def json_busy(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse("done")


@exclusive("async:{pk}")
async def async_hold(request: HttpRequest, pk: int) -> HttpResponse:
    ASYNC_ENTERED[pk].set()
    await asyncio.wait_for(ASYNC_LEAVE[pk].wait(), WAIT)
    return HttpResponse("done")


@exclusive("async-counter:{pk}", timeout=WAIT)
async def async_count(request: HttpRequest, pk: int) -> HttpResponse:
    value = ASYNC_COUNTS.get(pk, 0)
    await asyncio.sleep(0.001)  # another request's turn, between the read and the write
    ASYNC_COUNTS[pk] = value + 1
    return JsonResponse({"value": value + 1})


@exclusive("async-quick:{pk}")
async def async_quick(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse("done")


def _work_after_leave(pk: int) -> HttpResponse:
    """Waits for ``LEAVE[pk]`` (the test force-releases the lock meanwhile), then does its
    work: a row written and committed."""
    ENTERED[pk].set()
    LEAVE[pk].wait(WAIT)
    row = Counter.objects.create(value=pk)
    return JsonResponse({"row": row.pk})


@exclusive("lost:{pk}")
def lost_log(request: HttpRequest, pk: int) -> HttpResponse:
    return _work_after_leave(pk)


@exclusive("lost:{pk}", on_lost="raise")
def lost_raise(request: HttpRequest, pk: int) -> HttpResponse:
    return _work_after_leave(pk)


@exclusive("async-lost:{pk}")
async def async_lost(request: HttpRequest, pk: int) -> HttpResponse:
    """An operator (another client) force-releases the lock while the view runs."""

    def force() -> bool:
        with Client.from_url(settings.REDLEASE["URL"]) as admin:
            return admin.lock(f"async-lost:{pk}").force_release()

    assert await asyncio.to_thread(force)
    return HttpResponse("done")


class Report(View):
    @method_decorator(exclusive("report:{pk}", on_busy=409))
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(f"report {pk}")


def whoami(request: HttpRequest) -> HttpResponse:
    """This process and its redlease client's id."""
    return JsonResponse({"pid": os.getpid(), "client": get_client().id})


async def async_whoami(request: HttpRequest) -> HttpResponse:
    """This process and its event loop's redlease client's id."""
    return JsonResponse({"pid": os.getpid(), "client": get_async_client().id})


try:  # Django REST framework, when installed: a handler method decorated directly
    from rest_framework.renderers import JSONRenderer
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView
except ImportError:  # pragma: no cover
    Api = None
else:

    class Api(APIView):  # type: ignore[no-redef]
        authentication_classes: list[Any] = []
        permission_classes: list[Any] = []
        renderer_classes = [JSONRenderer]

        @exclusive("hold:{pk}", on_busy=423)
        def get(self, request: Request, pk: int) -> Response:
            return Response({"pk": pk, "user": str(request.user)})
