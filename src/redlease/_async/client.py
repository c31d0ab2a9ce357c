"""The client: runs core operations with redis.asyncio, one watchdog task, one subscriber task.

What users call (its factories, ``from_url``, ``close``) and what a fork renews; the call path
is in ``calls``, the driver in ``driver``, the server checks in ``servers``."""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Literal, ParamSpec, TypeVar, overload

import redis.asyncio
import redis.asyncio.cluster
import redis.exceptions

from .._asyncio import compat
from .._asyncio.line import AsyncLines
from .._asyncio.transport import Pipeline
from .._asyncio.watchdog import AsyncWatchdog
from .._core.arguments import LayoutName, Seconds
from .._core.backoff import ExponentialBackoff
from .._redis.connections import (
    check_cluster_options,
    check_connection_options,
)
from .._redis.errors import (
    cluster_from_url_failed,
)
from .._redis.servers import Eviction
from .._redis.urls import async_sentinel_master, checked_url, is_sentinel_url
from .._redis.wire import Packer
from .._shared import fork
from .._shared.clientbase import CLOSE_GRACE, default_timeouts
from .._shared.exclusive import OnBusy, bound
from .._shared.state import HANDOFF_WINDOW
from ..errors import (
    ClientClosedError,
    InvalidArgumentError,
    LeaseLostError,
    refuse_unknown,
)
from ..stats import EvictionPolicy
from .driver import AsyncDriver
from .election import AsyncElection
from .grouplock import AsyncGroupLock
from .latch import AsyncCountDownLatch
from .lock import AsyncFairLock, AsyncLock
from .rwlock import AsyncReadWriteLock
from .scheduled import AsyncScheduledLock
from .semaphore import AsyncLeaseSemaphore, AsyncPermitKeeper, AsyncSemaphore
from .shared import AsyncClosing
from .spinlock import AsyncSpinLock

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


class AsyncClient(AsyncDriver, AsyncClosing):
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

    _ASYNCIO = compat.ASYNCIO

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
        pipeline: bool = False,
    ) -> None:
        if not isinstance(redis_client, redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster):
            raise compat.not_a_client(redis_client)
        super().__init__(
            redis_client,
            watchdog_timeout=watchdog_timeout,
            handoff_window=handoff_window,
            replicas=replicas,
            replica_timeout=replica_timeout,
            eviction=eviction,
            holder_info=holder_info,
        )
        self._subscriber = None
        self._watchdog: AsyncWatchdog | None = None
        self._start_mutex = threading.Lock()
        self._lines = AsyncLines()
        """Each lock's local line: the client's own waiters, of which only the head asks."""
        self._ops = compat.Operations()
        self._settling = compat.Mutex()
        self._checking = compat.Mutex()
        self._closing = compat.Event()
        self._loop = compat.LoopBinding("AsyncClient")  # ASYNC
        compat.in_child(self._fresh_after_fork)
        self._packer = None
        self._spare = fork.PerProcess(list)
        self._pipeline = None  # ASYNC
        if isinstance(redis_client, redis.asyncio.Redis) and redis_client.connection is None:
            self._packer = Packer.for_pool(redis_client.connection_pool)
            # every task's calls share a few connections (see transport)
            if pipeline:  # ASYNC
                self._pipeline = Pipeline(redis_client.connection_pool, self._packer.checkout)
        self._slots = compat.call_slots(redis_client)
        self._permit_keeper = fork.PerProcess(
            functools.partial(AsyncPermitKeeper, weakref.ref(self))
        )
        """The client's lease permits (a fresh keeper in a forked child: it holds none of the
        parent's permits)."""

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
        pipeline: bool = False,
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
            pipeline=pipeline,
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

    def spin_lock(
        self,
        name: str,
        *,
        backoff: ExponentialBackoff | None = None,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> AsyncSpinLock:
        """A reentrant lock whose waiters never subscribe (Redisson's ``RSpinLock``; see
        ``AsyncSpinLock``): while it is held they sleep a growing pause between tries. The
        lock's keys: it excludes ``lock(name)`` and a Redisson RLock of the same name.

        Args:
            name: The lock's name, shared by every client (and Redisson service) using it.
            backoff: How waiters pace their tries (``redlease.ExponentialBackoff``); ``None``:
                Redisson's defaults (1 ms, doubling, up to 128 ms, plus up to 2 ms of jitter).
            lease: The default lease of its acquires, in seconds, not renewed; ``None``: the
                watchdog renews each hold until released.
            on_lease_lost: Called (from the watchdog) with a ``LeaseLostError`` when a hold
                of this lock is found lost while held.
            replicas: Overrides the client's replica-confirmed writes for this lock.

        Raises:
            InvalidArgumentError: an empty name, a bad lease, a ``backoff`` that is not an
                ``ExponentialBackoff``.
        """
        return AsyncSpinLock(
            self,
            name,
            backoff=backoff,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
        )

    def group_lock(
        self,
        group: str,
        values: Iterable[str],
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> AsyncGroupLock:
        """Many values of one group locked all-or-nothing, in one hash with one script call
        per acquire or release and one watchdog entry per hold (Redisson's
        ``RFasterMultiLock``, ``getFasterMultiLock(group, values)``; see
        ``AsyncGroupLock``). Nothing is sent until it is used.

        Args:
            group: The group's name (the Redis key of its hash), shared by every client (and
                Redisson service) using it.
            values: The values to lock together (strings; repeats count once).
            lease: The default lease of its acquires, in seconds, not renewed; ``None``: the
                watchdog renews each hold until released.
            on_lease_lost: Called (from the watchdog) with a ``LeaseLostError`` when a hold
                of this lock is found lost while held.
            replicas: Overrides the client's replica-confirmed writes for this lock.

        Raises:
            InvalidArgumentError: an empty group name, no value, a value that is not a
                ``str``, a bad lease.
        """
        return AsyncGroupLock(
            self, group, values, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )

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
        layout: LayoutName = "redlease",
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
        layout: LayoutName = "redlease",
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

    @overload
    def exclusive(
        self,
        template: str,
        *,
        timeout: Seconds | None = None,
        lease: Seconds | None = None,
        on_busy: Literal["wait", "raise"] = "wait",
    ) -> Callable[[compat.Job[P, R]], compat.Job[P, R]]: ...

    @overload
    def exclusive(
        self,
        template: str,
        *,
        timeout: Seconds | None = None,
        lease: Seconds | None = None,
        on_busy: Literal["skip"],
    ) -> Callable[[compat.Job[P, R]], compat.Job[P, R | None]]: ...

    def exclusive(
        self,
        template: str,
        *,
        timeout: Seconds | None = None,
        lease: Seconds | None = None,
        on_busy: OnBusy = "wait",
        **unknown: Any,
    ) -> Any:
        """Decorate a coroutine function so that each call runs holding the lock named by
        ``template`` formatted with the call's arguments: ``@client.exclusive("order:{order_id}")``.

        ``on_busy``: what a call does when the lock is taken. ``"wait"`` (the default) waits
        up to ``timeout`` (``None``: as long as it takes), then raises ``LockTimeoutError``;
        ``"raise"`` raises it at once; ``"skip"`` returns ``None`` at once without running
        the function (logged at INFO, a ``skipped`` event to the listeners). ``"raise"`` and
        ``"skip"`` try once unless given a ``timeout``. ``timeout=0`` is a single try.
        ``lease`` as for ``acquire``. A template field that names no parameter is an error at
        decoration. For a client made later (at startup), see ``redlease.exclusive``.
        """
        refuse_unknown("exclusive()", unknown, ("timeout", "lease", "on_busy"))
        return bound(
            self, template, timeout=timeout, lease=lease, on_busy=on_busy, asyncio=compat.ASYNCIO
        )

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
        with self._ops.mutex:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        self._lines.close()  # wakes the local waiters (a head is stopped with its call)
        with self._start_mutex:  # nothing starts once closed (see _subscriber_started, _watch)
            subscriber = self._subscriber
        if subscriber is not None:
            await subscriber.close()  # wakes every waiter
        await self._ops.wait_idle(CLOSE_GRACE)
        with self._start_mutex:
            watchdog = self._watchdog
        if watchdog is not None:
            await watchdog.stop()
        if self._pipeline is not None:  # ASYNC
            await self._pipeline.close()  # its connections go back to the pool
        await self._drop_idle(None)  # the spares only: the pool closes with its client
        if self._owns_redis:
            await self.redis.aclose()
            for sentinel in self._sentinels:  # the sentinels' clients from_url made
                await sentinel.aclose()

    async def eviction_policies(self) -> list[EvictionPolicy]:
        """What each server (each master of a cluster) does with lock keys when memory runs
        short, read now (``CONFIG GET maxmemory*``, else ``INFO memory``); a server that cannot
        be reached raises ``ServerUnavailableError``. Neither warns nor refuses."""
        self._check_loop(None)  # ASYNC
        found = await self._read_policies(strict=True)
        assert found is not None  # strict: raised instead
        return found

    def _owner(self) -> str:
        if self._state.check_fork():
            self._after_fork()
        return self._state.owner(compat.owner_number())

    def _mind_owner(self) -> None:  # ASYNC
        """The calling task took a hold: when it ends, what it still holds is reported and
        renewed no more (see ``ClientState.owner_ended``)."""
        compat.on_owner_end(self._owner_ended)

    def _owner_ended(self, owner_number: int) -> None:  # ASYNC
        self._state.owner_ended(self._state.owner(owner_number))

    def _after_fork(self) -> None:
        # the parent's watchdog and subscriber are not the child's: start fresh ones on demand
        self._subscriber = None
        self._watchdog = None
        self._script_loading.clear()  # a load of the parent's is not the child's to wait for
        self._checks.again_soon()

    def _fresh_after_fork(self) -> None:
        """Fresh locks (a thread of the parent may have held one at the fork), and none of
        the parent's threads, whose locks could be held too (``compat.in_child``: called
        in a forked child on threads; an asyncio client notices a fork where it is used)."""
        self._start_mutex = threading.Lock()
        self._ops = compat.Operations()
        self._settling = compat.Mutex()
        self._checking = compat.Mutex()
        self._slots = compat.call_slots(self.redis)
        self._state.check_fork()  # told at the fork (the state's hook ran first): done here
        self._after_fork()

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
