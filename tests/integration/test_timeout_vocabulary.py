"""One name for the wait (issue 32): ``timeout`` in ``Client.exclusive``, ``redlease.exclusive``,
FastAPI's ``exclusive()`` and Celery's ``exclusive={...}`` (Django's ``@exclusive``: its own test in
tests/integration/django). A misspelt option, such as another library's ``wait=``, is an
``InvalidArgumentError`` (also a ``TypeError``, as Python's own error is) that names it and
lists the valid ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import redlease
from redlease import InvalidArgumentError


def check(call: Callable[[], Any], misspelt: str, options: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        call()
    assert isinstance(raised.value, TypeError)
    message = str(raised.value)
    assert f"unknown option {misspelt!r}" in message, message
    assert f"the options are {options}" in message, message
    if misspelt == "wait":
        assert "timeout=" in message  # says what the wait is called here


@pytest.mark.parametrize("misspelt", ["wait", "timout"])
def test_client_exclusive(server: Any, misspelt: str) -> None:
    with redlease.Client.from_url(server.url) as client:
        check(
            lambda: client.exclusive("r:{pk}", **{misspelt: 5}),  # type: ignore[call-overload]  # on purpose
            misspelt,
            "lease, on_busy, timeout",
        )


async def test_async_client_exclusive(server: Any) -> None:
    async with redlease.AsyncClient.from_url(server.url) as client:
        check(
            lambda: client.exclusive("r:{pk}", wait=5),  # type: ignore[call-overload]  # on purpose
            "wait",
            "lease, on_busy, timeout",
        )


def test_module_exclusive() -> None:
    check(
        lambda: redlease.exclusive("r:{pk}", client=lambda: None, wait=5),  # type: ignore[call-overload]  # on purpose
        "wait",
        "client, lease, on_busy, timeout",
    )


def test_fastapi_exclusive() -> None:
    pytest.importorskip("fastapi")
    from redlease.contrib.fastapi import exclusive

    check(
        lambda: exclusive("order:{order_id}", wait=2),  # type: ignore[arg-type]  # on purpose
        "wait",
        "fair, lease, on_busy, on_lost, retry_after, timeout",
    )


def test_celery_exclusive_keys() -> None:
    pytest.importorskip("celery")
    from celery import Celery

    from redlease.contrib.celery import ExclusiveTask

    app = Celery("vocabulary", set_as_current=False)

    @app.task(base=ExclusiveTask, exclusive={"key": "k:{n}", "wait": 5}, name="v.wait")
    def task(n: int) -> None: ...

    check(
        lambda: task.name,
        "wait",
        "countdown, key, on_busy, on_lost, queued_for, retries, stage, timeout",
    )
