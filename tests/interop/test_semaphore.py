"""The counting semaphore shared with Redisson (issue #13 items 1 and 6): the count key is
Redisson's, changed by Redisson's scripts as a Java service would (raw commands with the same
effect: INCRBY for ``addPermits``/``release``, DEL + SET for ``delete`` + ``trySetPermits``,
SET 0 for ``drainPermits``)."""

from __future__ import annotations

import redis


async def test_drain_takes_what_is_free_and_redisson_sees_it(side, server, name):
    raw = redis.Redis.from_url(server.url)
    sem = side.client(server.url).semaphore(name)
    assert await side(sem.drain_permits()) == 0  # never set: nothing to take
    assert await side(sem.try_set_permits(5))
    assert await side(sem.acquire(2))
    assert await side(sem.drain_permits()) == 3
    assert int(raw.get(name)) == 0  # what Redisson's availablePermits() reads
    raw.incrby(name, 1)  # a Java service's release(1)
    assert await side(sem.drain_permits()) == 1
    await side(sem.release(5))  # everything back: 2 taken + 3 + 1 drained, less the Java one
    assert int(raw.get(name)) == 5
    raw.close()


async def test_redisson_changes_to_the_count_are_followed_and_lose_no_permit(side, server, name):
    """Redisson's ``addPermits``, ``release`` (no upper bound) and ``delete`` +
    ``trySetPermits`` change only the count key: redlease follows the count, never refuses a
    valid call, and never loses a permit (issue #13 item 1)."""
    raw = redis.Redis.from_url(server.url)
    client = side.client(server.url)
    sem = client.semaphore(name)
    assert await side(sem.try_set_permits(1))
    raw.incrby(name, 1)  # Redisson's addPermits(1): the count is 2
    assert await side(sem.acquire(2))  # all of them, though redlease set only 1
    await side(sem.release(1))
    await side(sem.release(1))
    assert int(raw.get(name)) == 2  # no permit lost
    await side(sem.release(1))  # Redisson's testReleaseWithoutPermits: more than taken
    assert int(raw.get(name)) == 3
    assert (await side(sem.statistics())).permits == 3
    raw.delete(name)  # Redisson's delete(), then trySetPermits(10)
    raw.set(name, 10)
    assert await side(sem.acquire(5))  # more than the 3 redlease knew of
    await side(sem.release(5))
    assert int(raw.get(name)) == 10
    raw.close()
