"""The thread watchdog: one thread per client that renews every watched hold and lease
permit, batched, on connections of its own (the engine the asyncio side runs as a task)."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
import redis.cluster
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._core.log import log
from .._redis.connections import bounded_kwargs, cluster_node_of, renewal_down
from .._redis.errors import unavailable
from .._shared.clientbase import RenewingClient
from .._shared.state import RenewalJob
from ..errors import ReplicaError, ServerUnavailableError


class Watchdog:
    """One thread per client that renews every watched hold, batched.

    It sends on connections of its own whose calls never hang past a renewal interval (a
    hung server must not hide an expired lease). On a cluster that is a ``RedisCluster`` of
    its own over the client's nodes (built in the watchdog thread, closed with it), whose
    calls time out after a quarter of an interval and are not retried by redis-py; and a
    node that fails a call is not called again in that round, so a paused master delays the
    renewals on the other masters by one bounded call, however many slots it serves."""

    def __init__(self, client: RenewingClient) -> None:
        self._client = client
        self._stop = threading.Event()
        self._kick = threading.Event()
        """Set to make the loop look again at when it must renew (or to stop it)."""
        client._state.renew_soon = self._kick.set
        self._thread: threading.Thread | None = None
        timeout = client._policy.interval + (
            client._state.replication.timeout_ms / 1000 if client._state.replication else 0
        )
        self._redis: redis.Redis | None = None
        self._cluster: redis.cluster.RedisCluster | None = None
        if not client.cluster:
            pool = client.redis.connection_pool
            self._redis = redis.Redis(
                connection_pool=redis.ConnectionPool(
                    connection_class=pool.connection_class,
                    max_connections=4,
                    **bounded_kwargs(pool.connection_kwargs, timeout),
                )
            )

    def ensure_running(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._loop, name="redlease-watchdog", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._redis is not None:
            self._redis.close()
        if self._cluster is not None:
            self._cluster.close()

    def _loop(self) -> None:
        policy, state = self._client._policy, self._client._state
        next_round = time.monotonic() + policy.interval
        while True:
            wake = state.watchdog_wake(next_round)
            self._kick.wait(max(0.0, wake - time.monotonic()))
            self._kick.clear()
            if self._stop.is_set():
                return
            if time.monotonic() < wake:
                continue  # kicked: a hold must be renewed sooner than planned
            jobs = state.renewal_jobs(policy, by_slot=self._client.cluster)
            started = time.monotonic()
            if jobs and policy.too_late(wake, started):
                state.late_round(started - wake, policy.timeout, "the thread could not run")
            ok = self._round(jobs) if jobs else True
            if ok and jobs and self._client._checks.record_due():
                self._refresh_record()
            # renewals count from when they were sent; the next round is due an interval
            # after this one was due (fixed rate: a steady lateness of a starved thread cancels out)
            next_round = policy.next_round(wake, started, ok, time.monotonic())

    def _round(self, jobs: list[RenewalJob]) -> bool:
        """Send every renewal call of a round; True when every one succeeded."""
        try:
            via = self._via()
        except ServerUnavailableError as exc:
            for _, failed, _ in jobs:
                failed(exc)
            return False
        ok = True
        down: dict[str | None, Exception] = {}  # the nodes that failed a call this round
        for done, failed, call in jobs:
            node = cluster_node_of(self._cluster, call)
            if node in down:
                failed(down[node])
                ok = False
                continue
            sent_at = time.monotonic()
            try:
                reply = self._client._call(call, None, via=via)
            except ReplicaError as exc:
                failed(exc)
                ok = False
            except (ServerUnavailableError, redis.exceptions.RedisClusterException) as exc:
                error = renewal_down(exc, self._client.address)
                down[node] = error
                failed(error)
                ok = False
            except Exception as exc:  # never let the watchdog thread die
                log.exception("lease renewal failed unexpectedly")
                failed(exc)
                ok = False
            else:
                done(reply, sent_at)
        return ok

    def _refresh_record(self) -> None:
        """Rewrite the client's holder record (every half hour while holds are renewed), on
        the watchdog's own bounded connections: a hung server delays the next round little."""
        try:
            self._client._write_record(self._via())
        except ServerUnavailableError as exc:
            self._client._checks.record_unreachable(exc)

    def _via(self) -> Any:
        """What to send renewals on: the watchdog's own connections."""
        if not self._client.cluster:
            return self._redis
        if self._cluster is None:
            timeout = self._client._policy.interval / 4
            try:
                self._cluster = _bounded_cluster(self._client.redis, timeout)
            except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
                raise unavailable(exc, self._client.address, None) from exc
            if self._stop.is_set():  # stopped while it was being built
                self._cluster.close()
        return self._cluster


def _bounded_cluster(
    cluster: redis.cluster.RedisCluster, timeout: float
) -> redis.cluster.RedisCluster:
    """A ``RedisCluster`` over ``cluster``'s nodes, with its connection settings (TLS, ACL
    user, password), whose calls never block longer than ``timeout`` and are not retried."""
    untyped: Any = cluster  # redis-py leaves some of it untyped
    manager = cluster.nodes_manager
    kwargs = bounded_kwargs(manager.connection_kwargs, timeout)
    kwargs.pop("retry", None)  # a cluster takes its retry policy as its own argument
    kwargs.pop("db", None)  # always 0, and refused when given
    kwargs.pop("redis_connect_func", None)  # bound to ``cluster``; the user's own is kept:
    user_hook = getattr(cluster, "user_on_connect_func", None)
    if user_hook is not None:
        kwargs["redis_connect_func"] = user_hook
    node: Any = redis.cluster.ClusterNode
    known = untyped.get_nodes() or list(manager.startup_nodes.values())
    nodes = [node(n.host, n.port) for n in known]
    if int(redis.__version__.split(".")[0]) < 6:  # before 6, retries were counted here
        kwargs["cluster_error_retry_attempts"] = 0
    return redis.cluster.RedisCluster(
        startup_nodes=nodes,
        retry=Retry(NoBackoff(), 0),
        require_full_coverage=False,
        address_remap=manager.address_remap,
        **kwargs,
    )
