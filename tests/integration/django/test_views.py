"""``exclusive`` views through Django's test clients, on a real private server: two requests at
once through real threads (one answers the busy status), N concurrent read-modify-writes of
one row (no update lost), async views (the event loop's AsyncClient), class-based views."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from django.test import AsyncClient as DjangoAsyncClient
from django.test import Client as DjangoClient
from redlease_shop.models import Counter
from redlease_site import views

import redlease
from redlease import InvalidArgumentError, LeaseLostError, LockTimeoutError
from redlease.contrib.django import exclusive, get_client, lock

WAIT = 30.0


@pytest.fixture
def pk() -> Iterator[int]:
    key = random.randrange(10**9)
    views.ENTERED[key], views.LEAVE[key] = threading.Event(), threading.Event()
    yield key
    views.LEAVE[key].set()


def _in_thread(path: str) -> tuple[threading.Thread, list[int]]:
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(DjangoClient().get(path).status_code))
    thread.start()
    return thread, answers


def test_a_second_request_gets_the_busy_status(configured: str, pk: int) -> None:
    first, answers = _in_thread(f"/hold/{pk}")
    assert views.ENTERED[pk].wait(WAIT)
    second, other = _in_thread(f"/hold/{pk}")  # a real thread, as a second worker thread
    second.join(WAIT)
    assert other == [423]
    response = DjangoClient().get(f"/json/{pk}")  # on_busy: a view of its own
    assert (response.status_code, response.json(), response["Retry-After"]) == (
        503,
        {"busy": pk},
        "1",
    )
    views.LEAVE[pk].set()
    first.join(WAIT)
    assert answers == [200]
    # on_busy="raise": the error reaches Django (the test client re-raises it); checked with
    # no other request under way, as the test client's exception signal is process-wide
    with lock(f"hold:{pk}"):
        busy = ThreadPoolExecutor(1).submit(DjangoClient().get, f"/raise/{pk}")
        with pytest.raises(LockTimeoutError) as raised:
            busy.result(WAIT)
    assert raised.value.name == f"hold:{pk}"
    assert DjangoClient().get(f"/raise/{pk}").status_code == 200  # free again


@pytest.mark.parametrize("on_lost", ["log", "raise"])
def test_a_forced_release_before_the_view_ends(
    configured: str, tables: None, pk: int, on_lost: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator force-releases a view's lock while it runs; the view then does its work (a
    row committed) and returns. ``on_lost="log"`` (the default): the response is the view's,
    the loss logged at WARNING; ``"raise"``: ``LeaseLostError`` reaches Django (a 500, or a
    middleware). Either way the client's listeners hear it once (what metrics count)."""
    heard: list[redlease.LockEvent] = []

    def listener(event: redlease.LockEvent) -> None:
        if event.kind == "lease_lost" and event.name == f"lost:{pk}":
            heard.append(event)

    get_client().add_listener(listener)
    try:
        with caplog.at_level(logging.WARNING, logger="redlease.contrib.django"):
            answer = ThreadPoolExecutor(1).submit(DjangoClient().get, f"/lost/{on_lost}/{pk}")
            assert views.ENTERED[pk].wait(WAIT)
            with redlease.Client.from_url(configured) as admin:
                assert admin.lock(f"lost:{pk}").force_release()
            views.LEAVE[pk].set()
            if on_lost == "log":
                response = answer.result(WAIT)
                assert response.status_code == 200
                assert Counter.objects.filter(pk=response.json()["row"], value=pk).exists()
                (record,) = [
                    r
                    for r in caplog.records
                    if r.name == "redlease.contrib.django" and f"'lost:{pk}'" in r.getMessage()
                ]
                assert record.levelno == logging.WARNING
                assert "response is kept" in record.getMessage()
            else:
                with pytest.raises(LeaseLostError) as raised:
                    answer.result(WAIT)
                assert raised.value.name == f"lost:{pk}"
                assert Counter.objects.filter(value=pk).count() == 1  # the work was done
    finally:
        get_client().remove_listener(listener)
    assert len(heard) == 1 and heard[0].cause in ("forced", "unknown")


def test_no_update_lost_under_concurrent_requests(configured: str, tables: None) -> None:
    row = Counter.objects.create()
    n = 24
    with ThreadPoolExecutor(8) as pool:
        answers = pool.map(lambda _: DjangoClient().get(f"/count/{row.pk}"), range(n))
        codes = [answer.status_code for answer in answers]
    assert codes == [200] * n
    row.refresh_from_db()
    assert row.value == n


def test_rest_framework_view(configured: str, pk: int) -> None:
    pytest.importorskip("rest_framework")
    answer = DjangoClient().get(f"/api/{pk}")
    assert (answer.status_code, answer.json()) == (200, {"pk": pk, "user": "AnonymousUser"})
    with lock(f"hold:{pk}"):  # DRF's Request wraps Django's: the view answers its status
        busy = ThreadPoolExecutor(1).submit(DjangoClient().get, f"/api/{pk}").result(WAIT)
    assert busy.status_code == 423


def test_class_based_view_and_names_from_the_url(configured: str, pk: int) -> None:
    assert DjangoClient().get(f"/report/{pk}").content == f"report {pk}".encode()
    with lock(f"report:{pk}"):  # the same name, taken from outside the view
        busy = DjangoClient()
        answer = ThreadPoolExecutor(1).submit(lambda: busy.get(f"/report/{pk}").status_code)
        assert answer.result(WAIT) == 409


async def test_async_views_one_answers_busy(configured: str, pk: int) -> None:
    views.ASYNC_ENTERED[pk], views.ASYNC_LEAVE[pk] = asyncio.Event(), asyncio.Event()
    client = DjangoAsyncClient()
    first = asyncio.ensure_future(client.get(f"/async/hold/{pk}"))
    await asyncio.wait_for(views.ASYNC_ENTERED[pk].wait(), WAIT)
    second = await client.get(f"/async/hold/{pk}")
    assert second.status_code == 409
    views.ASYNC_LEAVE[pk].set()
    assert (await asyncio.wait_for(first, WAIT)).status_code == 200


async def test_async_view_keeps_its_response_after_a_forced_release(
    configured: str, pk: int
) -> None:
    """The async path of ``@exclusive``: the hold force-released while the view ran, its
    response stands (``on_lost="log"``, the default)."""
    response = await DjangoAsyncClient().get(f"/async/lost/{pk}")
    assert (response.status_code, response.content) == (200, b"done")


async def test_async_views_no_update_lost(configured: str, pk: int) -> None:
    client = DjangoAsyncClient()
    n = 30
    answers = await asyncio.wait_for(
        asyncio.gather(*(client.get(f"/async/count/{pk}") for _ in range(n))), WAIT
    )
    assert sorted(a.json()["value"] for a in answers) == list(range(1, n + 1))
    assert views.ASYNC_COUNTS[pk] == n


def _connections(raw: redis.Redis) -> int:
    return len(raw.client_list())


def test_async_view_under_wsgi_closes_its_loops_client(
    configured: str, raw: redis.Redis, pk: int
) -> None:
    """Under WSGI each async view runs in an event loop of its own (``async_to_sync``): the
    loop's client closes with the loop, so requests leave no connection behind."""
    client = DjangoClient()
    assert client.get(f"/async/quick/{pk}").status_code == 200
    before = _connections(raw)
    for _ in range(6):
        assert client.get(f"/async/quick/{pk}").status_code == 200
    deadline = 50
    while _connections(raw) > before + 1 and deadline:  # the server sees closes promptly
        deadline -= 1
        threading.Event().wait(0.1)
    assert _connections(raw) <= before + 1


def test_exclusive_on_functions_and_checks(configured: str, pk: int) -> None:
    calls: list[int] = []

    @exclusive("job:{n}", on_busy="skip")
    def job(n: int) -> int:
        calls.append(n)
        return n

    assert job(pk) == pk
    with lock(f"job:{pk}"):
        # the holder is this thread: another thread finds the lock busy and skips
        assert ThreadPoolExecutor(1).submit(job, pk).result(WAIT) is None
    assert calls == [pk]

    @exclusive("job2:{n}")  # a status on a call that is not a view: raises
    def job2(n: int) -> None:
        return None

    with lock(f"job2:{pk}"), pytest.raises(LockTimeoutError):
        ThreadPoolExecutor(1).submit(job2, pk).result(WAIT)

    with pytest.raises(InvalidArgumentError, match="has no parameter named"):
        exclusive("x:{missing}")(lambda request, pk: None)
    with pytest.raises(InvalidArgumentError, match="on_busy"):
        exclusive("x", on_busy=200.5)  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(InvalidArgumentError, match="timeout=-1"):
        exclusive("x", timeout=-1)
    with pytest.raises(InvalidArgumentError, match="on_lost='ignore'; give 'log' or 'raise'"):
        exclusive("x", on_lost="ignore")
    assert get_client() is get_client()  # one client per process


def test_locked_is_the_former_name_of_exclusive() -> None:
    # ``locked`` is the query (``Lock.locked()``): the decorator's former name is gone, and
    # an import of it says what it is called now
    import redlease.contrib.django as integration

    renamed = r"redlease\.contrib\.django\.locked was renamed redlease\.contrib\.django\.exclusive"
    with pytest.raises(ImportError):
        from redlease.contrib.django import locked  # noqa: F401
    with pytest.raises(AttributeError, match=renamed):
        integration.locked  # noqa: B018
    assert "locked" not in integration.__all__ and "exclusive" in integration.__all__


def test_exclusive_management_command(configured: str, pk: int) -> None:
    """A command's ``handle``: the name from its options; busy with a status or ``"raise"``
    is a ``CommandError`` (one line, exit status 1 under manage.py), ``"skip"`` ends quietly."""
    from django.core.management import call_command
    from django.core.management.base import BaseCommand, CommandError

    ran: list[str] = []

    def command(on_busy: int | str | None) -> BaseCommand:
        class Command(BaseCommand):
            def add_arguments(self, parser: Any) -> None:
                parser.add_argument("--source", default="shop")

            @exclusive("import:{source}", on_busy=on_busy)
            def handle(self, *args: Any, **options: Any) -> None:
                ran.append(options["source"])

        return Command()

    call_command(command(None), source=f"s{pk}")
    assert ran == [f"s{pk}"]
    with lock(f"import:s{pk}"):
        for on_busy in (None, 423, "raise"):
            busy = ThreadPoolExecutor(1).submit(call_command, command(on_busy), source=f"s{pk}")
            with pytest.raises(CommandError, match=f"lock 'import:s{pk}' is busy"):
                busy.result(WAIT)
        skip = ThreadPoolExecutor(1).submit(call_command, command("skip"), source=f"s{pk}")
        assert skip.result(WAIT) is None
    assert ran == [f"s{pk}"]
