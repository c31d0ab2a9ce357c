"""The thread-based client: runs core operations with redis-py, one watchdog, one subscriber."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import redis
import redis.cluster
import redis.exceptions

from .._channels import Waiter
from .._clientbase import ClientBase
from .._core.lock import Hold
from .._core.requests import Call, Operation, Replication, Sleep, Subscribe, WaitWake
from .._naming import name_maker
from .._shell import (
    CONNECTION_ERRORS,
    HANDOFF_WINDOW,
    ThreadOwners,
    bounded_kwargs,
    check_replicas,
    unavailable,
    wrong_type,
)
from ..errors import (
    InvalidArgumentError,
    LeaseLostError,
    RedleaseError,
    ReplicaError,
    ServerUnavailableError,
)
from ..options import Seconds
from .subscriber import Subscriber, wait

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

_owners = ThreadOwners()


class Client(ClientBase):
    """A redlease client over one ``redis.Redis``: makes locks, renews their leases, wakes
    their waiters. Thread-safe; share one per process (or per server).

    ``watchdog_timeout`` is the lease of a hold taken without an explicit lease; the watchdog
    renews it every third of that for as long as the hold lasts. ``handoff_window`` is how long
    the lock stays reserved, after a release, for the first waiter in line, so the releasing
    thread cannot barge straight back in (``0`` turns the line off: Redisson's free-for-all).
    ``replicas`` makes every acquire, renewal and release wait (``WAIT``, at most
    ``replica_timeout``) until that many replicas acknowledged it (see ``ReplicaError``).
    """

    def __init__(
        self,
        redis_client: redis.Redis | redis.cluster.RedisCluster,
        *,
        watchdog_timeout: Seconds = 30.0,
        handoff_window: Seconds | None = HANDOFF_WINDOW,
        replicas: int = 0,
        replica_timeout: Seconds = 1.0,
    ) -> None:
        if not isinstance(redis_client, redis.Redis | redis.cluster.RedisCluster):
            raise TypeError(
                f"Client needs a redis.Redis or RedisCluster, got {type(redis_client).__name__}"
                " (use AsyncClient for redis.asyncio)"
            )
        super().__init__(
            redis_client,
            watchdog_timeout=watchdog_timeout,
            handoff_window=handoff_window,
            replicas=replicas,
            replica_timeout=replica_timeout,
        )
        self._subscriber: Subscriber | None = None
        self._watchdog: _Watchdog | None = None
        self._start_mutex = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        watchdog_timeout: Seconds = 30.0,
        handoff_window: Seconds | None = HANDOFF_WINDOW,
        replicas: int = 0,
        replica_timeout: Seconds = 1.0,
        cluster: bool = False,
        **redis_kwargs: Any,
    ) -> Client:
        """A client over ``redis.Redis.from_url(url, **redis_kwargs)`` (with ``cluster=True``,
        ``redis.cluster.RedisCluster.from_url``: any node's URL), closed with the client."""
        factory = redis.cluster.RedisCluster if cluster else redis.Redis
        client = cls(
            factory.from_url(url, **redis_kwargs),
            watchdog_timeout=watchdog_timeout,
            handoff_window=handoff_window,
            replicas=replicas,
            replica_timeout=replica_timeout,
        )
        client._owns_redis = True
        return client

    def lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> Lock:
        """A reentrant lock named ``name`` (the Redis key), Redisson-compatible.

        ``replicas`` overrides the client's replica-confirmed writes for this lock."""
        return Lock(self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas)

    def fair_lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> FairLock:
        """A reentrant lock served strictly in arrival order (see ``FairLock``)."""
        return FairLock(self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas)

    def semaphore(self, name: str) -> Semaphore:
        """A counting semaphore named ``name`` (Redisson's RSemaphore layout)."""
        return Semaphore(self, name)

    def lease_semaphore(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> LeaseSemaphore:
        """A semaphore whose permits have ids and leases, so a crashed holder's permits come
        back by themselves (Redisson's RPermitExpirableSemaphore layout)."""
        return LeaseSemaphore(self, name, lease=lease, on_lease_lost=on_lease_lost)

    def latch(self, name: str) -> CountDownLatch:
        """A count-down latch named ``name`` (Redisson's RCountDownLatch layout)."""
        return CountDownLatch(self, name)

    def rw_lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> ReadWriteLock:
        """A read-write lock named ``name``: ``.read_lock()`` and ``.write_lock()``, each with
        the ``Lock`` API; many readers or one writer, writers first (see ``ReadWriteLock``).
        Not Redisson's RReadWriteLock layout; other arguments as for ``lock``."""
        return ReadWriteLock(
            self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )

    def locked(
        self, template: str, *, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so that each call runs holding the lock named by ``template``
        formatted with the call's arguments: ``@client.locked("order:{order_id}")``.

        ``timeout`` bounds the wait (``LockTimeoutError`` when it runs out); ``lease`` as for
        ``acquire``. A template field that names no parameter is an error at decoration.
        """

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(fn):
                raise InvalidArgumentError(
                    f"{fn.__qualname__} is a coroutine function: use AsyncClient.locked"
                )
            make_name = name_maker(fn, template)

            @functools.wraps(fn)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.lock(make_name(args, kwargs)).hold(timeout=timeout, lease=lease):
                    return fn(*args, **kwargs)

            return wrapper

        return decorate

    def fenced_get(self, key: str, token: int) -> bytes | str | None:
        """Read the string ``key`` as the holder of ``token``, and make ``key`` refuse every
        older token from now on (``StaleTokenError`` if a newer one was already used).

        Read with this and write with ``fenced_set``: a holder whose lease ran out can then
        write neither before nor between them."""
        return self._run(self._fenced_get_op(key, token), key)

    def fenced_set(
        self, key: str, value: str | bytes, token: int, *, px: int | None = None
    ) -> None:
        """Set the string ``key`` to ``value`` only if ``token`` is at least the highest
        fencing token ``key`` has seen; else raise ``StaleTokenError`` and change nothing.

        ``px`` is an expiry in milliseconds. Use it to protect a Redis resource from a holder
        whose lease ran out while it paused.
        """
        self._run(self._fenced_set_op(key, value, token, px), key)

    def close(self) -> None:
        """Stop the watchdog and the subscriber; close the redis client if this client made it.

        Holds still held are not released: they expire with their lease.
        """
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._subscriber is not None:
            self._subscriber.close()
        if self._owns_redis:
            self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the driver -----------------------------------------------------------------------

    def _owner(self) -> str:
        if self._state.check_fork():
            self._after_fork()
        return self._state.owner(_owners.current())

    def _after_fork(self) -> None:
        # threads do not survive fork: start fresh ones on demand
        self._subscriber = None
        self._watchdog = None

    def _call(
        self,
        call: Call,
        name: str | None,
        replication: Replication | None = None,
        via: redis.Redis | None = None,
    ) -> Any:
        """Run one script. Every script is idempotent for a repeated request, so a call that
        failed on a dead pooled connection (a restarted server) is sent once more at once.
        With ``replication`` the script and a ``WAIT`` go in one round trip."""
        replication = call.replication or replication
        for attempt in (1, 2):
            try:
                try:
                    return self._send(call, name, replication, via or self.redis)
                except redis.exceptions.NoScriptError:
                    # a restarted server has an empty script cache
                    (via or self.redis).script_load(call.script.source)
                    return self._send(call, name, replication, via or self.redis)
            except CONNECTION_ERRORS as exc:
                if attempt == 2:
                    raise unavailable(exc, self.address, name) from exc
            except redis.exceptions.ResponseError as exc:
                raise wrong_type(exc, name) from exc
        raise AssertionError("unreachable")

    def _send(
        self, call: Call, name: str | None, replication: Replication | None, via: redis.Redis
    ) -> Any:
        sha, numkeys, args = call.script.sha, len(call.keys), (*call.keys, *call.args)
        if replication is None:
            return via.evalsha(sha, numkeys, *args)
        pipe = via.pipeline(transaction=False)
        pipe.evalsha(sha, numkeys, *args)
        pipe.wait(replication.replicas, replication.timeout_ms)
        reply, acked = pipe.execute()
        return check_replicas(reply, int(acked), replication, name)

    def _run(self, op: Operation[T], name: str, replication: Replication | None = None) -> T:
        """Perform ``op``'s requests one by one until it returns; with ``replication`` every
        script waits for replica acknowledgements."""
        if self._closed:
            raise RuntimeError("redlease client is closed")
        waiter: Waiter | None = None
        leave: Call | None = None  # run if the operation is abandoned while in line
        reply: Any = None
        resume = op.send
        try:
            while True:
                request = resume(reply)
                resume = op.send
                if isinstance(request, Call):
                    try:
                        reply = self._call(request, name, replication)
                    except (ServerUnavailableError, ReplicaError) as exc:
                        reply, resume = exc, op.throw
                elif isinstance(request, Subscribe):
                    leave = request.leave
                    if request.only_if_live:
                        sub = self._subscriber
                        waiter = sub.listen_if_live(request.channel, request.owner) if sub else None
                    else:
                        waiter = self._subscriber_started().subscribe(
                            request.channel, request.owner, name=name
                        )
                    reply = waiter is not None
                elif isinstance(request, WaitWake):
                    assert waiter is not None
                    reply = wait(waiter, request.timeout)
                elif isinstance(request, Sleep):
                    time.sleep(request.seconds)
                    reply = None
        except StopIteration as stop:
            leave = None
            result: T = stop.value
            return result
        finally:
            op.close()
            if waiter is not None and self._subscriber is not None:
                self._subscriber.unsubscribe(waiter)
            if leave is not None:
                with contextlib.suppress(RedleaseError):
                    self._call(leave, name)

    def _subscriber_started(self) -> Subscriber:
        with self._start_mutex:
            if self._subscriber is None:
                self._subscriber = Subscriber(self.redis)
            return self._subscriber

    def _watch(self) -> None:
        with self._start_mutex:
            if self._watchdog is None:
                self._watchdog = _Watchdog(self)
            self._watchdog.ensure_running()


class _Watchdog:
    """One thread per client that renews every watched hold, batched."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        timeout = client._policy.interval + (
            client._state.replication.timeout_ms / 1000 if client._state.replication else 0
        )
        # its own connections, whose calls never hang past a renewal interval (on a cluster
        # the client's own, whose node connections carry the socket timeout the user chose)
        self._redis: redis.Redis | None = None
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
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._redis is not None:
            self._redis.close()

    def _loop(self) -> None:
        policy, state = self._client._policy, self._client._state
        delay = policy.interval
        while not self._stop.wait(delay):
            with state.mutex:
                holds = state.holds.watched()
            ok = True
            for batch, call in policy.calls(holds, by_slot=self._client.cluster):
                ok = self.renew(batch, call) and ok
            with state.mutex:
                sources = list(state.renewal_sources)
            for source in sources:
                for handle, call in source.renewal_calls(policy.timeout):
                    sent_at = time.monotonic()
                    try:
                        reply = self._client._call(call, None, via=self._redis)
                    except (ServerUnavailableError, ReplicaError) as exc:
                        source.renewal_failed(handle, exc)
                        ok = False
                    else:
                        source.renewal_done(handle, reply, sent_at)
            delay = policy.next_delay(ok)

    def renew(self, batch: list[Hold], call: Call) -> bool:
        state = self._client._state
        sent_at = time.monotonic()
        try:
            reply = self._client._call(call, None, via=self._redis)
        except (ServerUnavailableError, ReplicaError) as exc:
            state.renewal_failed(batch, self._client._policy, exc)
            return False
        state.renewal_done(batch, reply, sent_at)
        return True


from .latch import CountDownLatch  # noqa: E402
from .lock import FairLock, Lock  # noqa: E402  (Lock needs Client; Client.lock returns Lock)
from .rwlock import ReadWriteLock  # noqa: E402  (ReadWriteLock needs the client)
from .semaphore import LeaseSemaphore, Semaphore  # noqa: E402
