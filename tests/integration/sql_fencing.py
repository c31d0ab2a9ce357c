"""The read-modify-write run of the fenced SQL tests (SQLAlchemy and Django): holders of one
lock, each adding 1 to a counter row under the lock, some paused past their lease between the
read and the write until a newer holder claimed the row."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from redlease import Client, LeaseLostError, StaleTokenError

LEASE = 1.0  # short, so that a paused holder's lease runs out while the others wait
WORKERS = 3
ROUNDS = 5
PAUSED_ROUNDS = {1, 3}  # each worker pauses past its lease in these rounds


@dataclass
class Tally:
    accepted: int = 0
    refused: int = 0
    overlaps: int = 0  # paused holders whose row a newer holder claimed during the pause
    errors: list[BaseException] = field(default_factory=list)
    mutex: threading.Lock = field(default_factory=threading.Lock)


def run_read_modify_write(
    client: Client,
    name: str,
    *,
    claim_and_read: Callable[[int], int],
    write: Callable[[int, int], None],
    fence_of_row: Callable[[], int],
) -> Tally:
    """``WORKERS`` threads x ``ROUNDS`` increments under the lock ``name``.

    Each round: take the lock (lease ``LEASE``), claim and read the row (one transaction),
    then write the value + 1 (another transaction) with the hold's token. In the paused
    rounds the holder waits, between the two, until a newer token claimed the row (its lease
    ran out and another holder got the lock), or until every other worker is done."""
    tally = Tally()
    done = [0]

    def worker() -> None:
        lock = client.lock(name)
        for round_ in range(ROUNDS):
            assert lock.acquire(lease=LEASE, timeout=120)
            token = lock.fencing_token
            assert token is not None
            try:
                value = claim_and_read(token)
                if round_ in PAUSED_ROUNDS:
                    deadline = time.monotonic() + 60
                    while fence_of_row() <= token and time.monotonic() < deadline:
                        with tally.mutex:
                            if done[0] == WORKERS - 1:
                                break  # nobody left to take the lock over
                        time.sleep(0.01)
                    if fence_of_row() > token:
                        with tally.mutex:
                            tally.overlaps += 1
                write(token, value + 1)
                with tally.mutex:
                    tally.accepted += 1
            except StaleTokenError:
                with tally.mutex:
                    tally.refused += 1
            finally:
                with contextlib.suppress(LeaseLostError):
                    lock.release()
        with tally.mutex:
            done[0] += 1

    def guarded() -> None:
        try:
            worker()
        except BaseException as exc:
            with tally.mutex:
                tally.errors.append(exc)
            with tally.mutex:
                done[0] += 1

    threads = [threading.Thread(target=guarded) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a worker did not finish in 300 s"
    assert not tally.errors, tally.errors
    return tally
