"""The client: runs core operations with redis.asyncio, one watchdog task, one subscriber task."""

from __future__ import annotations

import asyncio  # async-only
import contextlib
import threading
import weakref  # async-only
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Literal, ParamSpec, TypeVar, overload

import redis.asyncio
import redis.asyncio.cluster
import redis.exceptions

from .._core.arguments import Seconds
from .._core.requests import Call, Operation, Replication, Sleep, Subscribe, WaitWake
from .._core.scripts import Script
from .._redis.connections import (
    PROBE_ERRORS,
    SHARDED_PROBE,
    call_slots,
    check_cluster_options,
    check_connection_options,
    settle_pubsub,
)
from .._redis.errors import (
    CONNECTION_ERRORS,
    HUNG,
    NOT_RETRIED,
    TRANSLATED,
    Hung,
    check_replicas,
    cluster_from_url_failed,
    gives_back,
    key_type_shown,
    needs_key_type,
    raise_translated,
    timed_out,
)
from .._redis.servers import CONFIG_PATTERN, Eviction, policy_of

# begin async-only
# else sync
# from .._redis.connections import call_tokens
# from .._shared.state import fork_safe
# end async-only
from .._redis.urls import async_sentinel_master, checked_url, is_sentinel_url
from .._redis.wire import SPARE_CONNECTIONS, Packer
from .._shared.channels import Waiter
from .._shared.clientbase import CLOSE_GRACE, ClientBase, default_timeouts
from .._shared.holders import RECORD_TTL, client_of, holder_infos, record_key
from .._shared.holders import parse as parse_record
from .._shared.holders import record as holder_record
from .._shared.locked import OnBusy, bound
from .._shared.log import log
from .._shared.state import HANDOFF_WINDOW, TaskOwners, fork_generation
from ..errors import (
    ArgumentTypeError,
    ClientClosedError,
    EventLoopError,  # async-only
    InvalidArgumentError,
    LeaseLostError,
    RedleaseError,
    ReplicaError,
    ServerUnavailableError,
)
from ..stats import EvictionPolicy, HolderInfo
from .cancel import CANCEL_GRACE, cancellable, finish_despite_cancel  # async-only
from .election import AsyncElection
from .latch import AsyncCountDownLatch
from .line import AsyncLines
from .lock import AsyncFairLock, AsyncLock
from .rwlock import AsyncReadWriteLock
from .scheduled import AsyncScheduledLock
from .semaphore import AsyncLeaseSemaphore, AsyncSemaphore
from .shared import AsyncClosing
from .subscriber import Subscriber, wait, wait_event

# begin async-only
from .transport import (
    KEEP,
    Cancelled,
    Pipeline,
    Progress,
    finish_kept,
    read_late,
    run_kept,
    send_direct,
)

# end async-only
from .watchdog import AsyncWatchdog

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

_owners = TaskOwners()


# begin async-only
class LoopBinding:
    """The event loop an asyncio client (``AsyncClient``, ``AsyncRedlockClient``) was first
    used on: its connections, watchdog and subscriber belong to it. ``check()`` binds it at
    the first use and, on any other loop, raises ``EventLoopError`` (not redis-py's "attached
    to a different loop" or "Event loop is closed" from deep inside a connection). Every call
    that reaches the server checks it first."""

    __slots__ = ("_loop", "_what")

    def __init__(self, what: str) -> None:
        self._what = what  # the client's class, for the message
        self._loop: weakref.ReferenceType[asyncio.AbstractEventLoop] | None = None

    def check(self, name: str | None) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = weakref.ref(loop)
            return
        first = self._loop()
        if first is loop:
            return
        state = "closed" if first is None or first.is_closed() else "still running"
        raise EventLoopError(
            f"this {self._what} was first used on another event loop (now {state}); a client "
            "belongs to the loop it is first used on (its connections, watchdog and "
            "subscriber): create one per event loop, inside it. In a FastAPI or Starlette "
            "app, create it in the lifespan (redlease.contrib.fastapi.lifespan puts one on "
            "app.state.redlease), not at module level: each TestClient runs a loop of its own",
            name=name,
        )


# end async-only


class AsyncClient(ClientBase, AsyncClosing):
    """A redlease client over one ``redis.asyncio.Redis``: makes locks, renews their leases, wakes
    their waiters. Use it from one event loop; share one per process (or per server).

    ``watchdog_timeout`` is the lease of a hold taken without an explicit lease; the watchdog
    renews it every third of that for as long as the hold lasts. A release gives the lock to the
    first waiter in line, so the releasing task cannot barge straight back in:
    ``handoff_window`` is the first lease of a waiter handed the lock (its watchdog then
    lengthens it; a waiter with a lease of its own is handed it with that lease; ``0`` turns
    the line off: Redisson's free-for-all).
    ``replicas`` makes every acquire, renewal and release wait (``WAIT``, at most
    ``replica_timeout``) until that many replicas acknowledged it (see ``ReplicaError``).
    ``eviction`` is what the client does at its first use of a server whose eviction policy
    may delete a held lock's key (``maxmemory-policy`` ``volatile-*`` or ``allkeys-*`` with a
    memory limit): ``"warn"`` (a ``RedleaseWarning`` and a log line, once per server),
    ``"refuse"`` (every call raises ``EvictionPolicyError`` until the server is fixed) or
    ``"ignore"`` (the policy is not read).
    ``holder_info`` describes what this client's holders do (``redlease run`` gives its
    command): ``redlease status``, ``list`` and ``statistics()`` show it with the holder's
    host, pid and process name, from one record key the client keeps on the server (written
    at its first use, not per acquire; passwords masked, see docs/operations.md).
    """

    def __init__(
        self,
        redis_client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster,
        *,
        watchdog_timeout: Seconds = 30.0,
        handoff_window: Seconds | None = HANDOFF_WINDOW,
        replicas: int = 0,
        replica_timeout: Seconds = 1.0,
        eviction: Eviction = "warn",
        holder_info: str | None = None,
        # begin async-only
        # opt-in: every task's script calls on at most two shared connections (see transport)
        # end async-only
        pipeline: bool = False,  # async-only
    ) -> None:
        if not isinstance(redis_client, redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster):
            # begin async-only
            raise ArgumentTypeError(
                "AsyncClient needs a redis.asyncio.Redis or RedisCluster, got "
                f"{type(redis_client).__name__} (use Client for redis.Redis)"
            )
            # else sync
            # raise ArgumentTypeError(
            #     f"Client needs a redis.Redis or RedisCluster, got {type(redis_client).__name__}"
            #     " (use AsyncClient for redis.asyncio)"
            # )
            # end async-only
        super().__init__(
            redis_client,
            watchdog_timeout=watchdog_timeout,
            handoff_window=handoff_window,
            replicas=replicas,
            replica_timeout=replica_timeout,
            eviction=eviction,
            holder_info=holder_info,
        )
        self._subscriber: Subscriber | None = None
        self._watchdog: AsyncWatchdog | None = None
        self._start_mutex = threading.Lock()
        self._lines = AsyncLines()
        """Each lock's local line: the client's own waiters, of which only the head asks."""
        # begin async-only
        self._active = 0  # operations under way, which close() stops and waits for
        self._idle = asyncio.Event()  # set while none is under way
        self._idle.set()
        self._closing = asyncio.Event()  # set by close(): ends a back-off pause at once
        self._loop = LoopBinding("AsyncClient")  # its connections belong to one event loop
        # else sync
        # self._ops_mutex = threading.Lock()
        # """Guards ``_closed`` and ``_active``: the operations under way, which ``close()``
        # stops and waits for (on ``_ops``)."""
        # self._ops = threading.Condition(self._ops_mutex)
        # self._active = 0
        # self._check_mutex = threading.Lock()  # one server check at a time (_check_servers)
        # self._closing = threading.Event()
        # """Set by ``close()``: ends a back-off pause at once."""
        # fork_safe(self)
        # end async-only
        # the hot path: scripts packed by redlease, sent on connections it keeps (see _wire);
        # a cluster (redirections) or a single-connection client goes through redis-py
        self._packer: Packer | None = None
        self._spare: list[Any] = []
        self._spare_generation = fork_generation()
        self._pipeline: Pipeline | None = None  # async-only
        if isinstance(redis_client, redis.asyncio.Redis) and redis_client.connection is None:
            self._packer = Packer.for_pool(redis_client.connection_pool)
            # begin async-only
            if pipeline:  # every task's calls share a few connections (see transport)
                self._pipeline = Pipeline(redis_client.connection_pool, self._packer.checkout)
            # end async-only
        # begin async-only
        self._slots = asyncio.Semaphore(call_slots(redis_client))
        # else sync
        # self._slots = call_tokens(redis_client)
        # end async-only
        """Script calls under way at once: no more than the pool can serve (``call_slots``)."""

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
        eviction: Eviction = "warn",
        holder_info: str | None = None,
        pipeline: bool = False,  # async-only
        **redis_kwargs: Any,
    ) -> AsyncClient:
        """A client over ``redis.asyncio.Redis.from_url(url, **redis_kwargs)`` (with
        ``cluster=True``, ``redis.asyncio.cluster.RedisCluster.from_url``: any node's URL),
        closed with the client.

        A Sentinel URL (``redis+sentinel://host:26379,host2:26379/service[/db]`` or Lettuce's
        ``redis-sentinel://host:26379,host2:26379[/db]#service``; ``rediss+`` / ``rediss-``
        for TLS) gives a client over ``Sentinel(...).master_for(service)``.

        Args:
            url: ``redis://``, ``rediss://`` (TLS), ``unix://`` or a Sentinel URL; a
                password in it never appears in redlease's errors or logs.
            watchdog_timeout: Seconds a hold taken without a ``lease`` lasts unless renewed;
                the watchdog renews such holds every third of it (Redisson's
                ``lockWatchdogTimeout``).
            handoff_window: The first lease of a waiter handed the lock by a release (its
                watchdog then lengthens it); ``0`` turns the line off (Redisson's
                free-for-all).
            replicas: Replicas that must acknowledge every acquire, renewal and release
                (``WAIT``); ``0``: none.
            replica_timeout: Seconds to wait for those acknowledgements.
            cluster: The URL is a Redis Cluster node's.
            eviction: What to do at the first use of a server whose eviction policy may
                delete a held lock's key: ``"warn"``, ``"refuse"`` or ``"ignore"`` (see the
                class).
            **redis_kwargs: Keywords of redis-py's ``from_url`` (``ssl_ca_certs``,
                ``username``, ``password``, ``max_connections``, ...).

        Returns:
            A client that closes its redis-py client when closed.

        Raises:
            InvalidArgumentError: a bad URL or option (nothing is connected yet).
        """
        checked_url(url)
        default_timeouts(redis_kwargs, replicas, replica_timeout)
        sentinels: list[Any] = []
        if is_sentinel_url(url):
            if cluster:
                raise InvalidArgumentError("a Sentinel URL cannot be used with cluster=True")
            redis_client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
            redis_client, sentinels = async_sentinel_master(url, redis_kwargs)
        else:
            factory = redis.asyncio.cluster.RedisCluster if cluster else redis.asyncio.Redis
            if cluster:
                check_cluster_options(factory, redis_kwargs)
            try:  # (a sync RedisCluster reads the cluster's layout here)
                redis_client = factory.from_url(url, **redis_kwargs)
            except redis.exceptions.RedisClusterException as exc:
                raise cluster_from_url_failed(url, exc) from None
        check_connection_options(redis_client)  # a misspelled keyword: now, not at first use
        client = cls(
            redis_client,
            watchdog_timeout=watchdog_timeout,
            handoff_window=handoff_window,
            replicas=replicas,
            replica_timeout=replica_timeout,
            eviction=eviction,
            holder_info=holder_info,
            pipeline=pipeline,  # async-only
        )
        client._owns_redis = True
        client._sentinels = sentinels
        return client

    def lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> AsyncLock:
        """A reentrant lock named ``name`` (the Redis key), Redisson-compatible. Nothing is
        sent until it is used.

        Args:
            name: The lock's name, shared by every client (and Redisson service) using it.
            lease: The default lease of its acquires, in seconds, not renewed; ``None``: the
                watchdog renews each hold until released.
            on_lease_lost: Called (from the watchdog) with a ``LeaseLostError`` when a hold
                of this lock is found lost while held.
            replicas: Overrides the client's replica-confirmed writes for this lock.

        Raises:
            InvalidArgumentError: an empty name, a bad lease.
        """
        return AsyncLock(self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas)

    def scheduled_lock(
        self,
        name: str,
        *,
        at_most_for: Seconds | None = None,
        at_least_for: Seconds = 0,
        keep_alive: bool = False,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> AsyncScheduledLock:
        """The slot of a scheduled job that every instance runs on the same schedule, so that
        it runs on one of them per tick (ShedLock's ``@SchedulerLock``; see
        ``AsyncScheduledLock``): a decorator (a skipped call returns ``None`` at once) and
        ``async with client.scheduled_lock(...) as run:`` (``run`` true: run the job).

        ``at_most_for``: the lease while the job runs (a dead instance frees the slot after
        it); ``at_least_for``: the slot stays taken that long after the job began, however
        fast it ran; ``keep_alive=True``: the watchdog renews the lease while the job runs
        (``at_most_for`` may then be left out).

        Args:
            name: The job's lock name, the same on every instance.
            at_most_for: Seconds: the lease while the job runs; a dead instance frees the
                slot after it. Required unless ``keep_alive``.
            at_least_for: Seconds the slot stays taken after the job began (longer than the
                spread of the instances' ticks, shorter than the interval between them).
            keep_alive: The watchdog renews the lease while the job runs.
            on_lease_lost: Called when a ``keep_alive`` slot is found lost while the job runs.

        Raises:
            InvalidArgumentError: a missing, negative or zero ``at_most_for``, a negative
                ``at_least_for``, or one longer than ``at_most_for``.
        """
        return AsyncScheduledLock(
            self,
            name,
            at_most_for=at_most_for,
            at_least_for=at_least_for,
            keep_alive=keep_alive,
            on_lease_lost=on_lease_lost,
        )

    def fair_lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
        layout: str = "redlease",
    ) -> AsyncFairLock:
        """A reentrant lock served strictly in arrival order (see ``AsyncFairLock``).
        ``layout="redisson"``: Redisson's RedissonFairLock layout, one line shared with Java
        services on the same name (Redisson's place timeouts then).

        Args:
            name: The lock's name.
            lease: The default lease of its acquires; ``None``: renewed by the watchdog.
            on_lease_lost: Called with a ``LeaseLostError`` when a hold is found lost.
            replicas: Overrides the client's replica-confirmed writes for this lock.
            layout: ``"redlease"`` (the default) or ``"redisson"``.

        Raises:
            InvalidArgumentError: an empty name, a bad lease, an unknown layout.
        """
        return AsyncFairLock(
            self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas, layout=layout
        )

    def election(self, name: str, *, identity: str | None = None) -> AsyncElection:
        """A leader election named ``name`` (see ``AsyncElection``): ``async with
        election.leadership() as term:`` leads; ``identity`` names this candidate in
        ``leader()`` and ``observe()`` (default ``"<host name>:<pid>"``).

        Args:
            name: The election's name, the same for every candidate.
            identity: This candidate's name in ``leader()`` and ``observe()``.
        """
        return AsyncElection(self, name, identity=identity)

    def semaphore(self, name: str) -> AsyncSemaphore:
        """A counting semaphore named ``name`` (Redisson's RSemaphore layout). Set its permits
        once with ``try_set_permits(n)`` (or ``set_permits``) before the first ``acquire``."""
        return AsyncSemaphore(self, name)

    def lease_semaphore(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> AsyncLeaseSemaphore:
        """A semaphore whose permits have ids and leases, so a crashed holder's permits come
        back by themselves (Redisson's RPermitExpirableSemaphore layout).

        Args:
            name: The semaphore's name.
            lease: The default lease of its permits; ``None``: renewed by the watchdog.
            on_lease_lost: Called with a ``LeaseLostError`` when a permit is found lost.
        """
        return AsyncLeaseSemaphore(self, name, lease=lease, on_lease_lost=on_lease_lost)

    def latch(self, name: str) -> AsyncCountDownLatch:
        """A count-down latch named ``name`` (Redisson's RCountDownLatch layout)."""
        return AsyncCountDownLatch(self, name)

    def rw_lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
        layout: str = "redlease",
    ) -> AsyncReadWriteLock:
        """A read-write lock named ``name``: ``.read_lock()`` and ``.write_lock()``, each with
        the ``AsyncLock`` API; many readers or one writer, writers first (see
        ``AsyncReadWriteLock``). ``layout="redisson"``: Redisson's RReadWriteLock layout,
        shared with Java services (no writer preference then); other arguments as for
        ``lock``.

        Args:
            name: The read-write lock's name.
            lease: The default lease of its sides' acquires; ``None``: renewed.
            on_lease_lost: Called with a ``LeaseLostError`` when a hold is found lost.
            replicas: Overrides the client's replica-confirmed writes for this lock.
            layout: ``"redlease"`` (the default) or ``"redisson"``.
        """
        return AsyncReadWriteLock(
            self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas, layout=layout
        )

    # begin async-only
    @overload
    def locked(
        self,
        template: str,
        *,
        timeout: Seconds | None = None,
        lease: Seconds | None = None,
        on_busy: Literal["wait", "raise"] = "wait",
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]: ...

    @overload
    def locked(
        self,
        template: str,
        *,
        timeout: Seconds | None = None,
        lease: Seconds | None = None,
        on_busy: Literal["skip"],
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R | None]]]: ...

    def locked(
        self,
        template: str,
        *,
        timeout: Seconds | None = None,
        lease: Seconds | None = None,
        on_busy: OnBusy = "wait",
    ) -> Any:
        """Decorate a coroutine function so that each call runs holding the lock named by
        ``template`` formatted with the call's arguments: ``@client.locked("order:{order_id}")``.

        ``on_busy``: what a call does when the lock is taken. ``"wait"`` (the default) waits
        up to ``timeout`` (``None``: as long as it takes), then raises ``LockTimeoutError``;
        ``"raise"`` raises it at once; ``"skip"`` returns ``None`` at once without running
        the function (logged at INFO, a ``skipped`` event to the listeners). ``"raise"`` and
        ``"skip"`` try once unless given a ``timeout``. ``timeout=0`` is a single try.
        ``lease`` as for ``acquire``. A template field that names no parameter is an error at
        decoration. For a client made later (at startup), see ``redlease.locked``.
        """
        return bound(self, template, timeout=timeout, lease=lease, on_busy=on_busy, asyncio=True)

    # else sync
    # @overload
    # def locked(
    #     self,
    #     template: str,
    #     *,
    #     timeout: Seconds | None = None,
    #     lease: Seconds | None = None,
    #     on_busy: Literal["wait", "raise"] = "wait",
    # ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
    #
    # @overload
    # def locked(
    #     self,
    #     template: str,
    #     *,
    #     timeout: Seconds | None = None,
    #     lease: Seconds | None = None,
    #     on_busy: Literal["skip"],
    # ) -> Callable[[Callable[P, R]], Callable[P, R | None]]: ...
    #
    # def locked(
    #     self,
    #     template: str,
    #     *,
    #     timeout: Seconds | None = None,
    #     lease: Seconds | None = None,
    #     on_busy: OnBusy = "wait",
    # ) -> Any:
    #     """Decorate a function so that each call runs holding the lock named by ``template``
    #     formatted with the call's arguments: ``@client.locked("order:{order_id}")``.
    #
    #     ``on_busy``: what a call does when the lock is taken. ``"wait"`` (the default) waits
    #     up to ``timeout`` (``None``: as long as it takes), then raises ``LockTimeoutError``;
    #     ``"raise"`` raises it at once; ``"skip"`` returns ``None`` at once without running
    #     the function (logged at INFO, a ``skipped`` event to the listeners). ``"raise"`` and
    #     ``"skip"`` try once unless given a ``timeout``. ``timeout=0`` is a single try.
    #     ``lease`` as for ``acquire``. A template field that names no parameter is an error
    #     at decoration. For a client made later (at startup), see ``redlease.locked``.
    #     """
    #     return bound(self, template, timeout=timeout, lease=lease, on_busy=on_busy, asyncio=False)
    # end async-only

    async def fenced_get(self, key: str, token: int) -> bytes | str | None:
        """Read the string ``key`` as the holder of ``token``, and make ``key`` refuse every
        older token from now on (``StaleTokenError`` if a newer one was already used).

        Read with this and write with ``fenced_set``: a holder whose lease ran out can then
        write neither before nor between them.

        Args:
            key: A string key (not a lock's).
            token: The fencing token of the caller's hold (``lease.fencing_token``).

        Returns:
            The value, or ``None`` when ``key`` does not exist.

        Raises:
            StaleTokenError: a newer token than ``token`` was already used on ``key``.
        """
        return await self._run(self._fenced_get_op(key, token), key)

    async def fenced_set(
        self, key: str, value: str | bytes, token: int, *, px: int | None = None
    ) -> None:
        """Set the string ``key`` to ``value`` only if ``token`` is at least the highest
        fencing token ``key`` has seen; else raise ``StaleTokenError`` and change nothing.

        ``px`` is an expiry in milliseconds. Use it to protect a Redis resource from a holder
        whose lease ran out while it paused.

        Args:
            key: A string key (not a lock's).
            value: The value to write.
            token: The fencing token of the caller's hold.
            px: An expiry in milliseconds; ``None``: none.

        Raises:
            StaleTokenError: ``key`` has seen a newer token; nothing was written.
        """
        await self._run(self._fenced_set_op(key, value, token, px), key)

    async def close(self) -> None:
        """Stop the watchdog and the subscriber; close the redis client if this client made it.

        Every call still waiting (for a lock, a permit, a latch) stops promptly with
        ``ClientClosedError``: it leaves the line and gives back what was granted to it
        meanwhile; ``close()`` waits for that (at most ``CLOSE_GRACE`` seconds). Holds still
        held are not released: they expire with their lease.
        """
        # begin async-only
        if self._closed:
            return
        self._closed = True
        # else sync
        # with self._ops:
        #     if self._closed:
        #         return
        #     self._closed = True
        # end async-only
        self._closing.set()
        self._lines.close()  # wakes the local waiters (a head is stopped with its call)
        with self._start_mutex:  # nothing starts once closed (see _subscriber_started, _watch)
            subscriber = self._subscriber
        if subscriber is not None:
            await subscriber.close()  # wakes every waiter
        # begin async-only
        await wait_event(self._idle, CLOSE_GRACE)
        # else sync
        # with self._ops:
        #     self._ops.wait_for(lambda: self._active == 0, CLOSE_GRACE)
        # end async-only
        with self._start_mutex:
            watchdog = self._watchdog
        if watchdog is not None:
            await watchdog.stop()
        # begin async-only
        if self._pipeline is not None:
            await self._pipeline.close()  # its connections go back to the pool
        # end async-only
        await self._drop_idle(None)  # the spares only: the pool closes with its client
        if self._owns_redis:
            await self.redis.aclose()
            for sentinel in self._sentinels:  # the sentinels' clients from_url made
                await sentinel.aclose()

    def _owner(self) -> str:
        if self._state.check_fork():
            self._after_fork()
        # begin async-only
        return self._state.owner(_owners.current(asyncio.current_task()))
        # else sync
        # return self._state.owner(_owners.current())
        # end async-only

    def _after_fork(self) -> None:
        # the parent's watchdog and subscriber are not the child's: start fresh ones on demand
        self._subscriber = None
        self._watchdog = None
        self._script_loading.clear()  # a load of the parent's is not the child's to wait for
        self._checks.again_soon()

    # begin async-only
    # else sync
    # def _fresh_after_fork(self) -> None:
    #     """Fresh locks (a thread of the parent may have held one at the fork), and none of
    #     the parent's threads, whose locks could be held too."""
    #     self._start_mutex = threading.Lock()
    #     self._ops_mutex = threading.Lock()
    #     self._ops = threading.Condition(self._ops_mutex)
    #     self._active = 0
    #     self._check_mutex = threading.Lock()
    #     self._slots = call_tokens(self.redis)
    #     self._after_fork()
    # end async-only

    def _call(
        self,
        call: Call,
        name: str | None,
        replication: Replication | None = None,
        via: redis.asyncio.Redis | None = None,
    ) -> Any:
        """Run one script. Every script is idempotent for a repeated request, so a call that
        failed on a dead pooled connection (a restarted server) is sent once more at once.
        With ``replication`` the script and a ``WAIT`` go in one round trip. The dispatchers
        on the way to the socket (this one, ``_send``, ``_send_packed``, ``_perform``) return
        what their callee returns, unawaited: on asyncio, one coroutine less per call."""
        replication = call.replication or replication
        # begin async-only
        pipeline = self._pipeline
        if pipeline is not None and not pipeline.closed and replication is None and via is None:
            # the pipeline bounds its own queue and takes a few connections: no slot needed
            return self._call_once_more(call, name, replication, via)
        # end async-only
        return self._call_in_slot(call, name, replication, via)

    async def _call_in_slot(
        self,
        call: Call,
        name: str | None,
        replication: Replication | None,
        via: redis.asyncio.Redis | None,
    ) -> Any:
        """``_call`` within the client's call slots."""
        # begin async-only
        try:
            await self._slots.acquire()  # a burst beyond the pool waits here, not in an error
        except asyncio.CancelledError as cancelled:
            if KEEP.get():
                raise Cancelled(cancelled, b"", False, None) from None  # nothing sent
            raise
        try:
            return await self._call_once_more(call, name, replication, via)
        finally:
            self._slots.release()
        # else sync
        # slots = self._slots
        # if slots is None:  # the pool sets no bound
        #     return self._call_once_more(call, name, replication, via)
        # slots.get()  # a burst beyond the pool waits here, not in an error
        # try:
        #     return self._call_once_more(call, name, replication, via)
        # finally:
        #     slots.put(None)
        # end async-only

    async def _call_once_more(
        self,
        call: Call,
        name: str | None,
        replication: Replication | None,
        via: redis.asyncio.Redis | None,
    ) -> Any:
        """``_call``'s body: sent once more after a connection error."""
        for attempt in (1, 2):
            loads = self._script_loads.get(call.script.sha, 0)
            try:
                try:
                    return await self._send(call, name, replication, via or self.redis)
                except redis.exceptions.NoScriptError:
                    # a fresh or restarted server has an empty script cache
                    await self._load_once(call.script, via or self.redis, loads)
                    return await self._send(call, name, replication, via or self.redis)
            except CONNECTION_ERRORS as exc:
                if attempt == 2 or isinstance(exc, NOT_RETRIED):
                    raise_translated(exc, self.address, name, user=self._user)
                await self._drop_idle(getattr(via or self.redis, "connection_pool", None))
            except TRANSLATED as exc:
                key_type = await self._key_type(exc, name, via)
                raise_translated(exc, self.address, name, key_type=key_type, user=self._user)
        raise AssertionError("unreachable")

    async def _key_type(
        self, exc: BaseException, name: str | None, via: redis.asyncio.Redis | None
    ) -> str:
        """The type of the key ``name``, asked only after Redis's own WRONGTYPE reply (which
        does not say it); "" when it cannot be had."""
        if name is None or not needs_key_type(exc):
            return ""
        try:
            # begin async-only
            if self._pipeline is not None and self._packer is not None and via is None:
                # on the pipeline: a burst of refused calls opens no pool connections
                found = await self._send_packed(self._packer.command("TYPE", name))
                return key_type_shown(found)
            # end async-only
            found = await cancellable((via or self.redis).type(name))
        except Exception:
            return ""
        return key_type_shown(found)

    async def _drop_idle(self, pool: Any) -> None:
        """Close the idle connections: after one failed, the others most likely died with it
        (a restart, a cut), and the call's second try must not pick another dead one."""
        if self._spare_generation == fork_generation():
            while True:
                try:
                    conn = self._spare.pop()
                except IndexError:
                    break
                await conn.disconnect()
                await self.redis.connection_pool.release(conn)
        if pool is not None:  # None for a RedisCluster (a pool per node) and on close
            await pool.disconnect(inuse_connections=False)

    def _send(
        self,
        call: Call,
        name: str | None,
        replication: Replication | None,
        via: redis.asyncio.Redis,
    ) -> Any:
        """The script call's reply."""
        if replication is None and self._packer is not None and via is self.redis:
            return self._send_packed(self._packer.pack(call))
        if replication is None:
            return cancellable(via.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args))
        return self._send_replicated(call, name, replication, via)

    async def _send_replicated(
        self, call: Call, name: str | None, replication: Replication, via: redis.asyncio.Redis
    ) -> Any:
        """The script and a ``WAIT`` for replicas in one round trip."""
        sha, numkeys, args = call.script.sha, len(call.keys), (*call.keys, *call.args)
        pipe = via.pipeline(transaction=False)
        pipe.evalsha(sha, numkeys, *args)
        pipe.wait(replication.replicas, replication.timeout_ms)
        reply, acked = await cancellable(pipe.execute())
        return check_replicas(reply, int(acked), replication, name)

    async def _load_once(self, script: Script, via: redis.asyncio.Redis, loads: int) -> None:
        """Load ``script`` after its call met ``NOSCRIPT``, unless another call loaded it since
        this one was sent (``loads``: the loads the client had made of it then) or is loading
        it now (then wait for that one): a burst of calls on an empty script cache (a fresh or
        restarted server, a failover) sends one ``SCRIPT LOAD``, not one per call."""
        sha = script.sha
        # begin async-only
        mine = asyncio.Event()
        # else sync
        # mine = threading.Event()
        # end async-only
        while (under_way := self._script_loading.setdefault(sha, mine)) is not mine:
            # begin async-only
            try:
                await under_way.wait()  # ends as that load ends, whatever its outcome
            except asyncio.CancelledError as cancelled:
                if KEEP.get():
                    raise Cancelled(cancelled, b"", False, None) from None  # nothing ran
                raise
            # else sync
            # under_way.wait()  # ends as that load ends, whatever its outcome
            # end async-only
        try:
            if self._script_loads.get(sha, 0) == loads:  # none loaded it since (or it failed)
                await self._load(script, via)
                self._script_loads[sha] = loads + 1
                if loads:  # loaded before: a restarted or failed-over server, check it too
                    self._checks.again_soon()
        finally:
            if self._script_loading.get(sha) is mine:  # (a fork in between cleared it)
                del self._script_loading[sha]
            mine.set()

    async def _load(self, script: Script, via: redis.asyncio.Redis) -> None:
        """SCRIPT LOAD, on the connections the script's EVALSHA went through."""
        if self._packer is not None and via is self.redis:
            await self._send_packed(self._packer.command("SCRIPT", "LOAD", script.source))
        else:
            await cancellable(via.script_load(script.source))

    def _send_packed(self, packed: bytes) -> Any:
        """A command packed by redlease: on the pipeline when it is on, else
        ``_send_checked_out``."""
        # begin async-only
        if self._pipeline is not None and not self._pipeline.closed:
            return self._pipeline.call(packed)  # on asyncio, shared connections
        # end async-only
        return self._send_checked_out(packed)

    async def _send_checked_out(self, packed: bytes) -> Any:
        """A command packed by redlease, on a connection it keeps between calls; a dead
        connection is retried as redis-py's own commands are (the connection's ``retry``)."""
        pool, packer = self.redis.connection_pool, self._packer
        assert packer is not None  # only called when the hot path is on
        spare = self._spare
        if self._spare_generation != fork_generation():
            # a forked child never touches its parent's sockets
            spare = self._spare = []
            self._spare_generation = fork_generation()
        # begin async-only
        keep = KEEP.get()
        progress = Progress()
        try:
            conn = spare.pop()
        except IndexError:
            try:
                conn = await pool.get_connection(*packer.checkout)
            except asyncio.CancelledError as cancelled:
                if keep:
                    raise Cancelled(cancelled, packed, False, None) from None
                raise

        async def send() -> Any:
            try:
                return await send_direct(conn, packed, progress)
            except HUNG as exc:  # a hung server: redis-py's retry would only wait again
                raise Hung(exc) from exc

        # else sync
        # try:
        #     conn = spare.pop()
        # except IndexError:
        #     conn = pool.get_connection(*packer.checkout)
        #
        # def send() -> Any:
        #     try:
        #         conn.send_packed_command([packed])
        #         return conn.read_response()
        #     except HUNG as exc:  # a hung server: redis-py's retry would only wait again
        #         raise Hung(exc) from exc
        #
        # end async-only

        async def failed(_: Exception) -> None:
            await conn.disconnect()

        try:
            reply = await conn.retry.call_with_retry(send, failed)
        except redis.exceptions.ResponseError:
            spare.append(conn)  # an error reply, read whole: the connection is fine
            raise
        except BaseException as exc:
            # begin async-only
            if keep and isinstance(exc, asyncio.CancelledError):
                raise await self._kept(exc, conn, packed, progress) from None
            # nothing or half a reply read (or cancelled mid-read): never reuse it as it is
            await conn.disconnect(nowait=True)
            # else sync
            # conn.disconnect()  # nothing or half a reply read: never reuse it as it is
            # end async-only
            await pool.release(conn)
            if isinstance(exc, Hung):
                raise exc.error from None
            raise
        if len(spare) < SPARE_CONNECTIONS:
            spare.append(conn)
        else:
            await pool.release(conn)
        return reply

    # begin async-only
    async def _run_kept(
        self,
        op: Operation[T],
        again: Callable[[], Operation[T]] | None,
        name: str,
        replication: Replication | None,
        then: Callable[[T], Any],
    ) -> T:
        """``_run`` for an operation that finishes even when its caller is cancelled (a
        release): ``then`` runs on its result before the cancellation goes on. Sent directly
        or on the pipeline it needs no task of its own: its reply, read late, answers
        ``again()`` (the operation made anew, same request ids); an outcome not known that
        way is learnt by running ``again()`` (bounded; the server recognises a request that
        already ran)."""
        if again is None or replication is not None or self._packer is None:
            return await finish_despite_cancel(self._run(op, name, replication), then)
        remade = again

        async def settle(cancelled: asyncio.CancelledError) -> None:
            result = self._answered(remade(), cancelled)
            if result is None:
                result = (await self._run(remade(), name),)
            then(result[0])

        return await run_kept(lambda: self._run(op, name, replication), settle)

    def _answered(self, op: Operation[T], cancelled: asyncio.CancelledError) -> tuple[T] | None:
        """The result of ``op`` when its first call's reply, read late, is what
        ``cancelled`` carries and finishes it; else ``None``."""
        if not isinstance(cancelled, Cancelled) or self._packer is None:
            return None
        outcome = cancelled.outcome
        if outcome is None or outcome.exception() is not None:
            return None
        try:
            request = op.send(None)
            if not isinstance(request, Call) or self._packer.pack(request) != cancelled.packed:
                return None
            op.send(outcome.result())
        except StopIteration as stop:
            return (stop.value,)
        finally:
            op.close()
        return None  # it has more to send: run anew

    async def _kept(
        self, cancelled: asyncio.CancelledError, conn: Any, packed: bytes, progress: Progress
    ) -> Cancelled:
        """What a direct call cancelled under ``KEEP`` raises: the reply, read late when the
        caller was cancelled awaiting it; else whether its command may have gone out."""
        outcome = await read_late(conn) if progress.reading else None
        if outcome is not None and len(self._spare) < SPARE_CONNECTIONS:
            self._spare.append(conn)  # read in step: as good as any
        else:
            await conn.disconnect(nowait=True)
            await self.redis.connection_pool.release(conn)
        return Cancelled(cancelled, packed, progress.written, outcome)

    def _perform(self, call: Call, name: str, replication: Replication | None) -> Any:
        """The reply of ``call``; a call with an ``undo`` finishes even when its caller is
        cancelled, and is undone."""
        if call.undo is None:
            return self._call(call, name, replication)
        undo = call.undo

        async def take_back(reply: Any) -> None:
            back = undo(reply)
            if back is not None:
                await self._call(back, name)

        def send() -> Awaitable[Any]:
            sent: Awaitable[Any] = self._call(call, name, replication)
            return sent

        packer = self._packer
        if replication is None and call.replication is None and packer is not None:
            # on the pipeline or a direct call, a cancelled caller's reply is still read: no
            # task of its own needed
            return finish_kept(send, lambda: packer.pack(call), take_back)
        return finish_despite_cancel(send(), take_back)

    # end async-only

    async def _run(self, op: Operation[T], name: str, replication: Replication | None = None) -> T:
        """Perform ``op``'s requests one by one until it returns; with ``replication`` every
        script waits for replica acknowledgements. ``close()`` stops it at its next wait."""
        # begin async-only
        if self._closed:
            op.close()
            raise ClientClosedError(name=name)
        try:
            self._loop.check(name)
        except EventLoopError:
            op.close()
            raise
        self._active += 1
        self._idle.clear()
        # else sync
        # with self._ops_mutex:
        #     if self._closed:
        #         op.close()
        #         raise ClientClosedError(name=name)
        #     self._active += 1
        # end async-only
        try:
            return await self._drive(op, name, replication)
        finally:
            # begin async-only
            self._active -= 1
            if not self._active:
                self._idle.set()
            # else sync
            # with self._ops_mutex:
            #     self._active -= 1
            #     if not self._active and self._closed:  # close() waits for it
            #         self._ops.notify_all()
            # end async-only

    async def _drive(self, op: Operation[T], name: str, replication: Replication | None) -> T:
        if not self._state.pubsub.settled:
            await self._settle_pubsub(name)
        if self._checks.is_due():  # at the first use, then every half hour: not per call
            await self._check_servers(name)
        waiter: Waiter | None = None
        leave: Call | None = None  # run if the operation is abandoned while in line
        reply: Any = None
        resume = op.send
        hung: ServerUnavailableError | None = None  # a call of this operation timed out
        try:
            while True:
                request = resume(reply)
                resume = op.send
                if isinstance(request, Call):
                    if request.undo is not None:
                        self._stop_if_closed(name)  # never take what must be given back
                    if hung is not None and gives_back(request):
                        self._give_back_later(request, name)
                        if request is leave:
                            leave = None
                        reply, resume = hung, op.throw
                        continue
                    try:
                        # begin async-only
                        reply = await self._perform(request, name, replication)
                        # else sync
                        # reply = self._call(request, name, replication)
                        # end async-only
                    except (ServerUnavailableError, ReplicaError) as exc:
                        reply, resume = exc, op.throw
                        if isinstance(exc, ServerUnavailableError) and timed_out(exc):
                            hung = exc
                    else:
                        if request.undo is not None and self._closed:
                            # granted as the client closed: give it back
                            back = request.undo(reply)
                            if back is not None:
                                # begin async-only
                                with contextlib.suppress(Exception):
                                    await self._call(back, name)
                                # else sync
                                # with contextlib.suppress(RedleaseError):
                                #     self._call(back, name)
                                # end async-only
                            raise ClientClosedError(name=name)
                elif isinstance(request, Subscribe):
                    leave = request.leave
                    channel, owner, private = request.channel, request.owner, request.private
                    if request.only_if_live:
                        sub = self._subscriber
                        waiter = sub.listen_if_live(channel, owner, private) if sub else None
                    else:
                        waiter = await self._subscriber_started().subscribe(
                            channel, owner, name=name, private=private
                        )
                    reply = waiter is not None
                    self._stop_if_closed(name)
                elif isinstance(request, WaitWake):
                    assert waiter is not None
                    reply = await wait(waiter, request.timeout)
                    self._stop_if_closed(name)  # a hand-over it brought is left (leave)
                elif isinstance(request, Sleep):
                    await wait_event(self._closing, request.seconds)
                    reply = None
                    self._stop_if_closed(name)
        except StopIteration as stop:
            leave = None
            result: T = stop.value
            return result
        finally:
            op.close()
            if waiter is not None and self._subscriber is not None:
                self._subscriber.unsubscribe(waiter)
            if leave is not None and hung is not None:
                self._give_back_later(leave, name)
            elif leave is not None:
                # begin async-only
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(self._call(leave, name)), CANCEL_GRACE)
                # else sync
                # with contextlib.suppress(RedleaseError):
                #     self._call(leave, name)
                # end async-only

    _giving_back: set[asyncio.Task[None]] | None = None  # async-only

    # begin async-only
    def _check_loop(self, name: str | None) -> None:
        """Raise ``EventLoopError`` if this client was first used on another event loop (for
        the calls that read the server without ``_run``: an election's ``leader()``,
        ``eviction_policies()``, ...)."""
        self._loop.check(name)

    # end async-only

    def _give_back_later(self, call: Call, name: str | None) -> None:
        """Send a give-back in a task of its own: the server did not answer a call of this
        operation in time, and the caller's error must not wait for it once more."""

        async def send() -> None:
            with contextlib.suppress(RedleaseError):
                await self._call(call, name)

        # begin async-only
        if self._giving_back is None:
            self._giving_back = set()
        task = asyncio.get_running_loop().create_task(send())
        self._giving_back.add(task)  # keep a reference until it is done
        task.add_done_callback(self._giving_back.discard)
        # else sync
        # threading.Thread(target=send, name="redlease-give-back", daemon=True).start()
        # end async-only

    def _stop_if_closed(self, name: str | None) -> None:
        if self._closed:
            raise ClientClosedError(name=name)

    def _subscriber_started(self) -> Subscriber:
        with self._start_mutex:
            self._stop_if_closed(None)
            if self._subscriber is None:
                self._subscriber = Subscriber(self.redis, sharded=self._state.pubsub.sharded)
                self._subscriber.holders = self._state  # told of force releases
            return self._subscriber

    # begin async-only
    _settling: asyncio.Lock | None = None

    async def _settle_pubsub(self, name: str | None) -> None:
        """On a cluster, once: sharded pub/sub if every master has it, else classic."""
        if self._settling is None:
            self._settling = asyncio.Lock()
        async with self._settling:  # one probe, however many tasks start at once
            if self._state.pubsub.settled:
                return
            try:
                await self.redis.initialize()
            except PROBE_ERRORS as exc:
                raise_translated(exc, self.address, name, user=self._user)

            async def probe(node: Any) -> BaseException | None:
                try:
                    await cancellable(self.redis.execute_command(*SHARDED_PROBE, target_nodes=node))
                except PROBE_ERRORS as exc:
                    return exc
                return None

            nodes = self.redis.get_primaries()
            answers = list(await asyncio.gather(*(probe(node) for node in nodes)))
            error = settle_pubsub(self._state.pubsub, answers, self.address)
            if error is not None:
                raise_translated(error, self.address, name)

    # else sync
    # def _settle_pubsub(self, name: str | None) -> None:
    #     """On a cluster, once: sharded pub/sub if every master has it, else classic."""
    #     with self._start_mutex:  # one probe, however many threads start at once
    #         if self._state.pubsub.settled:
    #             return
    #         answers: list[BaseException | None] = []
    #         for node in self.redis.get_primaries():
    #             try:
    #                 self.redis.execute_command(*SHARDED_PROBE, target_nodes=node)
    #             except PROBE_ERRORS as exc:
    #                 answers.append(exc)
    #             else:
    #                 answers.append(None)
    #         error = settle_pubsub(self._state.pubsub, answers, self.address)
    #         if error is not None:
    #             raise_translated(error, self.address, name)
    # end async-only

    async def eviction_policies(self) -> list[EvictionPolicy]:
        """What each server (each master of a cluster) does with lock keys when memory runs
        short, read now (``CONFIG GET maxmemory*``, else ``INFO memory``); a server that cannot
        be reached raises ``ServerUnavailableError``. Neither warns nor refuses."""
        self._check_loop(None)  # async-only
        found = await self._read_policies(strict=True)
        assert found is not None  # strict: raised instead
        return found

    # begin async-only
    _checking: asyncio.Lock | None = None
    # end async-only

    async def _check_servers(self, name: str | None) -> None:
        """The first-use check (and its half-hourly repeat): read each server's eviction
        policy, then warn, refuse (raise ``EvictionPolicyError``) or go on (``eviction``). A
        user not allowed ``CONFIG GET`` or ``INFO`` is not hindered; a server that cannot be
        reached is checked again later, and the operation goes on as it would have."""
        # begin async-only
        if self._checking is None:
            self._checking = asyncio.Lock()
        checking = self._checking
        # else sync
        # checking = self._check_mutex
        # end async-only
        refused = None
        async with checking:  # one check, however many start at once
            if self._checks.policy_due():
                if self._checks.mode == "ignore":
                    self._checks.judge([])
                else:
                    found = await self._read_policies(strict=False)
                    refused = self._checks.judge(found) if found is not None else None
            if refused is None and self._checks.record_due():
                await self._write_record()  # not on a server refused: nothing written there
        if refused is not None:
            raise refused

    async def _write_record(self, via: Any = None) -> None:
        """Write (or refresh) this client's holder record (on ``via``: the watchdog's own
        connections); a user not allowed to is not hindered (its holders show no host or
        pid), an unreachable server is tried later."""
        key = record_key(self._state.id)
        try:
            await (via or self.redis).set(key, holder_record(self._holder_info), ex=RECORD_TTL)
        except redis.exceptions.ResponseError as exc:
            self._checks.record_written(exc)
        except PROBE_ERRORS as exc:
            self._checks.record_unreachable(exc)
        else:
            self._checks.record_written()

    async def _holder_infos(self, owners: Collection[str]) -> dict[str, HolderInfo]:
        """Who each owner is, from its client's record (one round trip; nothing known when
        the records cannot be read)."""
        clients = sorted({client_of(owner) for owner in owners})
        records: dict[str, HolderInfo | None] = {}
        if clients:
            try:
                pipe = self.redis.pipeline(transaction=False)
                for each in clients:
                    pipe.get(record_key(each))
                replies = await cancellable(pipe.execute(raise_on_error=False))
            except PROBE_ERRORS as exc:
                log.debug("holder records not read: %s", exc)
            else:
                records = {
                    each: None if isinstance(reply, Exception) else parse_record(reply)
                    for each, reply in zip(clients, replies, strict=True)
                }
        return holder_infos(owners, records)

    async def _read_policies(self, *, strict: bool) -> list[EvictionPolicy] | None:
        """Each master's ``EvictionPolicy``; when one cannot be reached, ``None`` (and the
        check is due again later), or with ``strict`` a ``ServerUnavailableError``."""
        found: list[EvictionPolicy] = []
        if self.cluster:
            if not self._state.pubsub.settled:
                await self._settle_pubsub(None)
            targets: list[tuple[str, Any]] = [
                (str(node.name), node) for node in self.redis.get_primaries()
            ]
        else:
            targets = [(self.address, None)]
        ask = self.redis.execute_command
        for address, node in targets:
            where = {} if node is None else {"target_nodes": node}
            try:
                try:
                    config: Any = await cancellable(ask("CONFIG GET", CONFIG_PATTERN, **where))
                except redis.exceptions.ResponseError as exc:  # not allowed, or renamed
                    config = exc
                info: Any = None
                if policy_of(address, config, None).policy is None:
                    try:
                        info = await cancellable(ask("INFO", "memory", **where))
                    except redis.exceptions.ResponseError as exc:
                        info = exc
            except PROBE_ERRORS as exc:
                if strict:
                    raise_translated(exc, address, None, user=self._user)
                self._checks.unreachable(address, exc)
                return None
            found.append(policy_of(address, config, info))
        return found

    def _watch(self, listen: bool = False) -> None:
        """Have the watchdog renew the client's watched holds; ``listen``: a new hold has a
        channel where a force release tells its client (the subscriber subscribes it in the
        background, see ``_channels.HOLDS_CHECK``)."""
        with self._start_mutex:
            if self._closed:
                return  # a closed client starts nothing (its holds expire with their lease)
            if self._watchdog is None:
                self._watchdog = AsyncWatchdog(self)
            self._watchdog.ensure_running()
        if listen:
            with contextlib.suppress(ClientClosedError):
                self._subscriber_started().watch_holds()
