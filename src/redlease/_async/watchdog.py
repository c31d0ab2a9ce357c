"""The asyncio watchdog: one task per client that renews every watched hold and lease
permit, batched (the engine the sync side runs as a thread)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import redis.exceptions

from .._connections import cluster_node_of, log, renewal_down
from .._owners import RenewalJob
from ..errors import ReplicaError, ServerUnavailableError
from .subscriber import wait_event

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncWatchdog:
    """One task per client that renews every watched hold and lease permit, batched."""

    def __init__(self, client: AsyncClient) -> None:
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
            kick.clear()
            if time.monotonic() < wake:
                continue  # kicked: a hold must be renewed sooner than planned
            jobs = state.renewal_jobs(policy, by_slot=client.cluster)
            by_node: dict[str | None, list[RenewalJob]] = {}
            cluster = client.redis if client.cluster else None
            for job in jobs:
                by_node.setdefault(cluster_node_of(cluster, job[2]), []).append(job)
            started = time.monotonic()
            done = await asyncio.gather(*(self._renew_on(each) for each in by_node.values()))
            if jobs and all(done) and client._checks.record_due():
                # the holder record, every half hour while holds are renewed; bounded as a
                # renewal is, so a hung server delays the next round little
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(client._write_record(), policy.interval / 4)
            # renewals count from when they were sent: after a round that succeeded the next
            # is due an interval after it began, not after it ended, so a round that ended
            # late (the process was stopped while it waited for a reply) is followed at once
            # by another, which finds a hold lost meanwhile gone; after a failure, a retry soon
            next_round = (
                started + policy.interval if all(done) else time.monotonic() + policy.retry_interval
            )

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
                reply = await asyncio.wait_for(self._client._call(call, None), bound)
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
