"""The asyncio watchdog: one task per client that renews every watched hold and lease
permit, batched (the engine the sync side runs as a thread)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TypeVar

import redis.exceptions

from .._core.log import log
from .._redis.connections import cluster_node_of, renewal_down
from .._shared.clientbase import RenewingClient
from .._shared.state import RenewalJob
from ..errors import ReplicaError, ServerUnavailableError
from .cancel import cancellable, within
from .compat import wait_event

T = TypeVar("T")


async def _bounded(awaitable: Awaitable[T], seconds: float) -> T:
    """``await awaitable``, or ``TimeoutError`` after ``seconds`` (``cancel.within``: on
    Python 3.11+ in the calling task, not in a task of its own as ``asyncio.wait_for`` runs
    it: on an event loop kept busy by other tasks every hop from one task or callback to the
    next waits a whole pass of the loop's ready queue, and ``wait_for`` adds three (the task,
    its done-callback, the waiter), which made a renewal land seconds later under load). A
    call that finishes despite a cancellation (it reads the reply of a command already sent)
    still raises it (``cancel.cancellable``): the watchdog is being stopped all the same, or,
    when the timeout expired, ``TimeoutError``."""
    return await within(cancellable(awaitable), seconds)


class AsyncWatchdog:
    """One task per client that renews every watched hold and lease permit, batched."""

    def __init__(self, client: RenewingClient) -> None:
        self._client = client
        self._task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="redlease-watchdog"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _loop(self) -> None:
        """Renew every watched hold and lease permit, batched, every interval. Each call is
        bounded (a hung server must not hide an expired lease); on a cluster the calls to
        different nodes go at once, and a node that fails a call is not called again in that
        round, so a paused master does not delay the renewals on the other masters."""
        client = self._client
        policy, state = client._policy, client._state
        kick = asyncio.Event()  # set to look again at when to renew (a hand-over's short lease)
        state.renew_soon = kick.set
        next_round = time.monotonic() + policy.interval
        while True:
            wake = state.watchdog_wake(next_round)
            await wait_event(kick, max(0.0, wake - time.monotonic()))
            if self._stopped():
                return
            kick.clear()
            if time.monotonic() < wake:
                continue  # kicked: a hold must be renewed sooner than planned
            jobs = state.renewal_jobs(policy, by_slot=client.cluster)
            by_node: dict[str | None, list[RenewalJob]] = {}
            cluster = client.redis if client.cluster else None
            for job in jobs:
                by_node.setdefault(cluster_node_of(cluster, job[2]), []).append(job)
            started = time.monotonic()
            if jobs and policy.too_late(wake, started):
                state.late_round(started - wake, policy.timeout, "the event loop was busy")
            if len(by_node) == 1:  # (no gather: its task per node is one more hop when busy)
                done = [await self._renew_on(next(iter(by_node.values())))]
            else:
                done = await asyncio.gather(*(self._renew_on(each) for each in by_node.values()))
            if jobs and all(done) and client._checks.record_due():
                # the holder record, every half hour while holds are renewed; bounded as a
                # renewal is, so a hung server delays the next round little
                with contextlib.suppress(asyncio.TimeoutError):
                    await _bounded(client._write_record(), policy.interval / 4)
            # renewals count from when they were sent; the next round is due an interval
            # after this one was due (fixed rate: a steady lateness of a busy loop cancels out)
            next_round = policy.next_round(wake, started, all(done), time.monotonic())
            if self._stopped():
                return

    def _stopped(self) -> bool:
        """Whether ``stop()`` was called on the running loop (or another loop replaced it).
        Checked after each wait and round, not only left to the cancellation: on Python 3.10
        ``asyncio.wait_for`` (around a renewal, a wait) returns the outcome of a call that ended
        in the very turn of the cancellation and drops it (CPython gh-86296), and ``stop()``
        would wait for a loop that goes on for ever."""
        return self._task is not asyncio.current_task()

    async def _renew_on(self, jobs: list[RenewalJob]) -> bool:
        """Send one node's renewal calls in order; True when every one succeeded. After a
        call that could not reach the node, the rest fail at once."""
        ok = True
        down: Exception | None = None
        for done, failed, call in jobs:
            if down is not None:
                failed(down)
                ok = False
                continue
            sent_at = time.monotonic()
            bound = self._client._policy.interval + (
                call.replication.timeout_ms / 1000 if call.replication else 0
            )
            try:
                # a hung server must not hide an expired lease: bound the call
                reply = await _bounded(self._client._call(call, None), bound)
            except ReplicaError as exc:
                failed(exc)
                ok = False
            except (
                asyncio.TimeoutError,
                ServerUnavailableError,
                redis.exceptions.RedisClusterException,
            ) as exc:
                down = renewal_down(exc, self._client.address)
                failed(down)
                ok = False
            except Exception as exc:  # never let the watchdog task die
                log.exception("lease renewal failed unexpectedly")
                failed(exc)
                ok = False
            else:
                done(reply, sent_at)
        return ok
