"""A process forked while another thread holds one of a client's locks: the child uses the
client at once (a fresh id, no holds of the parent's) and never hangs on a lock that the
parent's thread, which does not exist in the child, would have released. On a real server."""

from __future__ import annotations

import os
import threading
import time

import pytest

from redlease import AsyncClient, Client, RedlockClient

from .helpers import held_by_another_thread, run_forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_fork_while_a_thread_holds_the_client_locks(server, name):
    with Client.from_url(server.url) as client:
        lock = client.lock(name)
        assert lock.acquire()  # the parent holds it, with a watchdog and a subscriber
        waiter = client.lock(f"{name}:busy")
        parent_id = client.id
        parent_subscriber = client._subscriber  # (a watched hold's: where it hears a force)

        def child() -> bool:
            fresh = client.lock(f"{name}:child")
            if client.id == parent_id or lock.fencing_token is not None:
                return False  # the child must have its own id and none of the holds
            if client._subscriber is not None:
                return False  # the parent's subscriber is not the child's
            got = fresh.acquire(timeout=2)
            fresh.release()
            return got and not waiter.locked() and client._subscriber is not parent_subscriber

        with held_by_another_thread(client._state.mutex, client._start_mutex, client._ops.mutex):
            assert run_forked(child) == 0
        lock.release()


def test_fork_while_a_thread_holds_the_subscriber_lock(server, name):
    with Client.from_url(server.url) as client:
        holder = Client.from_url(server.url)
        assert holder.lock(name).acquire()
        waiting = threading.Thread(target=client.lock(name).acquire, kwargs={"timeout": 5})
        waiting.start()  # a waiter: the subscriber runs
        deadline = time.monotonic() + 10
        while client._subscriber is None or not client._subscriber.waiting(
            client.lock(name)._wait_channel
        ):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        subscriber = client._subscriber

        def child() -> bool:
            other = client.lock(f"{name}:child")
            stats = other.statistics()  # first: asks the subscriber for its local waiters
            got = other.acquire(timeout=2)
            other.release()
            return got and stats.local_waiters == 0

        with held_by_another_thread(subscriber._mutex):
            assert run_forked(child) == 0
        holder.lock(name).release()
        waiting.join(10)
        holder.close()


def test_fork_while_a_thread_holds_the_async_client_state(server):
    client = AsyncClient.from_url(server.url)
    parent_id = client.id
    with held_by_another_thread(client._state.mutex):
        assert run_forked(lambda: client.id != parent_id) == 0


def test_fork_while_a_thread_holds_the_permit_keepers_lock(server, name):
    """A client keeps its lease permits under a mutex: a child forked while a parent thread
    held it gets a keeper of its own, and takes and gives back a permit all the same."""
    with Client.from_url(server.url) as client:
        sem = client.lease_semaphore(name)
        assert sem.try_set_permits(2)
        permit = sem.acquire()  # the parent's keeper holds a watched permit
        assert permit is not None

        def child() -> bool:
            mine = sem.acquire(timeout=2)
            assert mine is not None
            sem.release(mine)
            return mine is not None and mine != permit

        with held_by_another_thread(client._permit_keeper.get().mutex):
            assert run_forked(child) == 0
        sem.release(permit)


def test_fork_while_a_thread_holds_the_listeners_lock(server):
    """A child forked while a parent thread was adding an event listener adds its own."""
    with Client.from_url(server.url) as client:

        def child() -> bool:
            client.add_listener(lambda event: None)
            return True

        with held_by_another_thread(client._state.listeners._mutex):
            assert run_forked(child) == 0


def test_fork_while_a_thread_holds_the_redlock_client_locks(server, name):
    """A Redlock client forked while a parent thread held its mutex and its master's: the
    child takes a lock under its own id, on connections of its own."""
    with RedlockClient.from_urls([server.url], master_timeout=0.5) as client:
        lock = client.lock(name)
        assert lock.acquire()  # the parent holds it, with idle connections to its master
        parent_id = client.id
        master = client._masters[0]

        def child() -> bool:
            if client.id == parent_id or master._idle:
                return False  # a new id, none of the parent's sockets
            other = client.lock(f"{name}:child")
            got = other.acquire(timeout=2)
            other.release()
            return got and not client.lock(name).acquire(blocking=False)

        with held_by_another_thread(client._mutex, master._mutex):
            assert run_forked(child) == 0
        lock.release()
