"""A lease permit handed to another process (``LeaseSemaphore.disown``): the client that took
it forgets it (no renewal, no record kept) and another client releases it by its id. This is
how ``redlease.contrib.celery`` carries a task's reservation from the producer to the worker.
Real server; sync and asyncio."""

from __future__ import annotations

import time

from redlease import InvalidArgumentError


def records(side, client) -> int:
    """Permits the client keeps a record of (what ``disown`` must empty: a producer hands
    over one permit per task it sends, for as long as it lives)."""
    return len(client._permit_keeper.get().table)


async def test_a_disowned_permit_is_released_by_another_client(side, server, name):
    producer = side.client(server.url)
    worker = side.client(server.url)
    taken = producer.lease_semaphore(name)
    assert await side(taken.try_set_permits(1))
    permit = await side(taken.acquire(timeout=0, lease=30))
    assert permit is not None and records(side, producer) == 1
    assert taken.disown(permit) is True
    assert records(side, producer) == 0
    assert taken.disown(permit) is False  # not this client's any more
    assert await side(taken.available()) == 0  # still held on the server

    await side(worker.lease_semaphore(name).release(permit))  # by its id, from elsewhere
    assert await side(taken.available()) == 1
    assert records(side, worker) == 0
    try:
        await side(worker.lease_semaphore(name).release(permit))
    except InvalidArgumentError:
        pass  # released once only
    else:
        raise AssertionError("a permit released twice")


async def test_a_disowned_permit_is_no_longer_renewed(side, server, name):
    """Taken without a lease (renewed by the watchdog every third of 1 s), then disowned: it
    ends one lease later, and a waiter elsewhere gets it. Without ``disown`` the watchdog
    would keep it for good."""
    producer = side.client(server.url, watchdog_timeout=1)
    sem = producer.lease_semaphore(name)
    assert await side(sem.try_set_permits(1))
    permit = await side(sem.acquire(timeout=0))
    assert permit is not None
    sem.disown(permit)
    started = time.monotonic()
    other = side.client(server.url).lease_semaphore(name)
    got = await side(other.acquire(timeout=10, lease=5))
    waited = time.monotonic() - started
    assert got is not None, "the disowned permit was still renewed after 10 s"
    # one lease, and slack for a loaded machine (a permit still renewed: not within 10 s)
    assert waited < 1 + 5.0, waited
