"""Java waiters are never starved behind redlease's line (issue #13 item 3): a Redisson
``tryLock`` (driven by Redisson's own scripts, ``redlease.peers.RedissonLock``) gets the lock
while redlease threads keep handing it on to each other, and the line keeps its order."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from redlease import Client
from redlease.peers import RedissonLock

CAP = 200_000  # redlease acquisitions at most, whatever happens
DEADLINE = 90.0  # seconds at most, whatever happens


def _busy_line(url: str, name: str, stop: threading.Event, counts: list[int]) -> list[Client]:
    """Two redlease processes (a client each) taking the lock back to back, so that every
    release has a waiter in line to hand it to."""
    clients = [Client.from_url(url) for _ in range(2)]
    end = time.monotonic() + DEADLINE

    def work(index: int) -> None:
        lock = clients[index].lock(name)
        while not stop.is_set() and sum(counts) < CAP and time.monotonic() < end:
            with lock:
                counts[index] += 1

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    clients[0].__dict__["_test_threads"] = threads
    return clients


def test_a_redisson_waiter_gets_turns_behind_a_busy_line(server, name):
    stop, counts = threading.Event(), [0, 0]
    clients = _busy_line(server.url, name, stop, counts)
    java = RedissonLock(server.url, name)
    try:
        while sum(counts) < 20:  # the line is busy (bounded by the workers' own bounds)
            time.sleep(0.01)
        before = sum(counts)
        for _ in range(5):
            assert java.try_lock(wait=20), "the Redisson waiter starved behind the line"
            assert java.unlock()
        assert sum(counts) > before  # the line kept moving meanwhile
    finally:
        stop.set()
        for thread in clients[0].__dict__["_test_threads"]:
            thread.join(30)
        for client in clients:
            client.close()
        java.close()
    assert min(counts) > 0


def _eventually(check, what: str, bound: float = 20.0) -> None:
    end = time.monotonic() + bound
    while not check():
        assert time.monotonic() < end, f"not within {bound} s: {what}"
        time.sleep(0.005)


@pytest.mark.parametrize("outside", ["redisson", "nobody", "redlease-lingering"])
def test_a_release_after_a_hand_over_is_the_outsiders_turn(server, name, outside):
    """A hold that came by a hand-over is released while a redlease waiter is in line: with
    a Redisson waiter listening, the lock is freed and "0" published, so the Redisson waiter
    takes it (the redlease waiter gets it after); with nobody outside the line, or only a
    redlease client that gave up a wait and still listens, the lock is handed on as before."""
    java_waits = outside == "redisson"
    raw = redis.Redis.from_url(server.url)
    line = f"redlease:line:{{{name}}}"
    client_a, client_b = Client.from_url(server.url), Client.from_url(server.url)
    client_c = Client.from_url(server.url)
    java = RedissonLock(server.url, name)
    got: dict[str, bool] = {}
    b_may_release = threading.Event()

    def b_holds() -> None:  # a thread of process b: waits, is handed the lock, holds it
        lock = client_b.lock(name)
        got["b"] = lock.acquire(timeout=30)
        b_may_release.wait(30)
        lock.release()

    def start(target) -> threading.Thread:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    try:
        first = client_a.lock(name)
        assert first.acquire()
        b = start(b_holds)
        _eventually(lambda: raw.zcard(line) == 1, "b in line")
        first.release()  # handed to b
        _eventually(lambda: got.get("b") is True, "b handed the lock")

        def listening() -> int:
            return int(raw.pubsub_numsub(java.channel)[0][1])

        before = listening()
        if java_waits:
            java_thread = start(lambda: got.__setitem__("java", java.try_lock(wait=30)))
            _eventually(lambda: listening() == before + 1, "Java waits")
            before += 1
        if outside == "redlease-lingering":  # waits, gives up, and listens on for a while
            assert not client_c.lock(name).acquire(timeout=0.05)
            _eventually(lambda: listening() == before + 1, "c listens")
            before += 1
        a_thread = start(lambda: got.__setitem__("a", client_a.lock(name).acquire(timeout=30)))
        _eventually(lambda: raw.zcard(line) == 1, "a in line")
        _eventually(lambda: listening() == before + 1, "a listens")
        b_may_release.set()  # b's release: a hold that came by a hand-over
        b.join(20)
        if java_waits:
            java_thread.join(20)
            assert got.get("java") is True, "the Redisson waiter did not get its turn"
            assert "a" not in got and raw.zcard(line) == 1  # a waits, still in line
            assert java.unlock()
        a_thread.join(20)
        assert got.get("a") is True  # a's turn (after Java's, when Java waited)
        if not java_waits:  # no outsiders' turn was taken: the lock went straight to a
            turn = raw.hget(f"redlease:queue-deadlines:{{{name}}}", "redlease:outsiders")
            assert turn is None
    finally:
        b_may_release.set()
        java.close()
        client_a.close()
        client_b.close()
        client_c.close()
        raw.close()
