"""One name rule for every primitive (``arguments.name``): a non-empty str, valid text, whose
braces, if any, form a hash tag; the error names the kind of primitive. Nothing connects."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio

from redlease import AsyncClient, Client, InvalidArgumentError

BAD = ["", "a{b", "a}b", "{}x", "\udc80", 3, None]
GOOD = ["orders", "x{t}", "{t}y", "a}b{t}"]

FACTORIES = [
    ("lock", "lock"),
    ("fair_lock", "lock"),
    ("rw_lock", "lock"),
    ("spin_lock", "lock"),
    ("semaphore", "semaphore"),
    ("lease_semaphore", "lease semaphore"),
    ("latch", "latch"),
    ("election", "election"),
]


@pytest.fixture(params=["sync", "asyncio"])
def client(request: pytest.FixtureRequest) -> Any:
    if request.param == "sync":
        return Client(redis.Redis())
    return AsyncClient(redis.asyncio.Redis())


@pytest.mark.parametrize(("factory", "what"), FACTORIES)
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_every_primitive_refuses_a_bad_name_naming_itself(client, factory, what, bad) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^{what} name"):
        getattr(client, factory)(bad)


@pytest.mark.parametrize(("factory", "what"), FACTORIES)
@pytest.mark.parametrize("good", GOOD)
def test_every_primitive_takes_a_good_name(client, factory, what, good) -> None:
    assert getattr(client, factory)(good).name == good
