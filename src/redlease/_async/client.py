"""The client: runs core operations with redis.asyncio, one watchdog task, one subscriber task."""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Collection, Iterable
from typing import Any, Literal, ParamSpec, TypeVar, overload

import redis.asyncio
import redis.asyncio.cluster
import redis.exceptions

from .._asyncio import cancel, compat
from .._asyncio.line import AsyncLines
from .._asyncio.subscriber import Subscriber, wait
from .._asyncio.transport import Pipeline, drop_idle, send_checked_out
from .._asyncio.watchdog import AsyncWatchdog
from .._core.arguments import LayoutName, Seconds
from .._core.backoff import ExponentialBackoff
from .._core.log import log
from .._core.requests import Call, Handed, Operation, Replication, Sleep, Subscribe, WaitWake
from .._core.scripts import Script
from .._redis.connections import (
    PROBE_ERRORS,
    SHARDED_PROBE,
    check_cluster_options,
    check_connection_options,
    settle_pubsub,
)
from .._redis.errors import (
    CONNECTION_ERRORS,
    NOT_RETRIED,
    TRANSLATED,
    check_replicas,
    cluster_from_url_failed,
    gives_back,
    key_type_shown,
    needs_key_type,
    raise_translated,
    timed_out,
)
from .._redis.servers import CONFIG_PATTERN, Eviction, policy_of
from .._redis.urls import async_sentinel_master, checked_url, is_sentinel_url
from .._redis.wire import Packer
from .._shared import fork
from .._shared.channels import Abandoned, Waiter
from .._shared.clientbase import CLOSE_GRACE, ClientBase, default_timeouts
from .._shared.exclusive import OnBusy, bound, renamed
from .._shared.holders import RECORD_TTL, client_of, holder_infos, record_key
from .._shared.holders import parse as parse_record
from .._shared.holders import record as holder_record
from .._shared.state import HANDOFF_WINDOW
from ..errors import (
    ClientClosedError,
    EventLoopError,
    InvalidArgumentError,
    LeaseLostError,
    RedleaseError,
    ReplicaError,
    ServerUnavailableError,
    refuse_unknown,
)
from ..stats import EvictionPolicy, HolderInfo
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
        self._subscriber: Subscriber | None = None
        self._watchdog: AsyncWatchdog | None = None
        self._start_mutex = threading.Lock()
        self._lines = AsyncLines()
        """Each lock's local line: the client's own waiters, of which only the head asks."""
        self._ops = compat.Operations()
        """The operations under way, which ``close()`` stops and waits for; its ``mutex``
        guards ``_closed`` too."""
        self._settling = compat.Mutex()  # one pub/sub probe at a time (_settle_pubsub)
        self._checking = compat.Mutex()  # one server check at a time (_check_servers)
        self._closing = compat.Event()
        """Set by ``close()``: ends a back-off pause at once."""
        # asyncio: its connections' one loop
        self._loop = compat.LoopBinding("AsyncClient")  # ASYNC
        compat.in_child(self._fresh_after_fork)
        # the hot path: scripts packed by redlease, sent on connections it keeps (see _wire);
        # a cluster (redirections) or a single-connection client goes through redis-py
        self._packer: Packer | None = None
        self._spare: fork.PerProcess[list[Any]] = fork.PerProcess(list)
        """Idle connections kept for the next call (none of the parent's in a forked child)."""
        self._pipeline: Pipeline | None = None  # ASYNC
        if isinstance(redis_client, redis.asyncio.Redis) and redis_client.connection is None:
            self._packer = Packer.for_pool(redis_client.connection_pool)
            # every task's calls share a few connections (see transport)
            if pipeline:  # ASYNC
                self._pipeline = Pipeline(redis_client.connection_pool, self._packer.checkout)
        self._slots = compat.call_slots(redis_client)
        """Script calls under way at once: no more than the pool can serve (``call_slots``)."""
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

    def locked(self, template: str, **options: Any) -> Any:
        """Deprecated: the former name of ``exclusive`` (``Lock.locked()`` is the query)."""
        renamed("client.locked()", "client.exclusive()")
        return self.exclusive(template, **options)

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
        shared = self._pipeline  # ASYNC
        if (
            shared is not None and not shared.closed and replication is None and via is None
        ):  # ASYNC
            # the pipeline bounds its own queue and takes a few connections: no slot needed
            return self._call_once_more(call, name, replication, via)
        return self._call_in_slot(call, name, replication, via)

    async def _call_in_slot(
        self,
        call: Call,
        name: str | None,
        replication: Replication | None,
        via: redis.asyncio.Redis | None,
    ) -> Any:
        """``_call`` within the client's call slots."""
        slots = self._slots
        if slots is None:  # the pool sets no bound
            return await self._call_once_more(call, name, replication, via)
        # a burst beyond the pool waits here, not in an error (and sends nothing if cancelled)
        await cancel.before_sending(slots.acquire())
        try:
            return await self._call_once_more(call, name, replication, via)
        finally:
            slots.release()

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
            if self._pipeline is not None and self._packer is not None and via is None:  # ASYNC
                # on the pipeline: a burst of refused calls opens no pool connections
                found = await self._send_packed(self._packer.command("TYPE", name))
                return key_type_shown(found)
            found = await cancel.cancellable((via or self.redis).type(name))
        except Exception:
            return ""
        return key_type_shown(found)

    async def _drop_idle(self, pool: Any) -> None:
        """Close the idle connections: after one failed, the others most likely died with it
        (a restart, a cut), and the call's second try must not pick another dead one."""
        spare = self._spare.get()
        while True:
            try:
                conn = spare.pop()
            except IndexError:
                break
            await conn.disconnect()
            await self.redis.connection_pool.release(conn)
        if pool is not None:  # None for a RedisCluster (a pool per node) and on close
            await drop_idle(pool)

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
            return cancel.cancellable(
                via.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            )
        return self._send_replicated(call, name, replication, via)

    async def _send_replicated(
        self, call: Call, name: str | None, replication: Replication, via: redis.asyncio.Redis
    ) -> Any:
        """The script and a ``WAIT`` for replicas in one round trip."""
        sha, numkeys, args = call.script.sha, len(call.keys), (*call.keys, *call.args)
        pipe = via.pipeline(transaction=False)
        pipe.evalsha(sha, numkeys, *args)
        pipe.wait(replication.replicas, replication.timeout_ms)
        reply, acked = await cancel.cancellable(pipe.execute())
        return check_replicas(reply, int(acked), replication, name)

    async def _load_once(self, script: Script, via: redis.asyncio.Redis, loads: int) -> None:
        """Load ``script`` after its call met ``NOSCRIPT``, unless another call loaded it since
        this one was sent (``loads``: the loads the client had made of it then) or is loading
        it now (then wait for that one): a burst of calls on an empty script cache (a fresh or
        restarted server, a failover) sends one ``SCRIPT LOAD``, not one per call."""
        sha = script.sha
        mine = compat.Event()
        while (under_way := self._script_loading.setdefault(sha, mine)) is not mine:
            # ends as that load ends, whatever its outcome (and nothing ran if cancelled)
            await cancel.before_sending(under_way.wait())
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
            await cancel.cancellable(via.script_load(script.source))

    def _send_packed(self, packed: bytes) -> Any:
        """A command packed by redlease: on the pipeline when it is on, else
        ``_send_checked_out``."""
        if self._pipeline is not None and not self._pipeline.closed:  # ASYNC
            return self._pipeline.call(packed)  # shared connections
        return self._send_checked_out(packed)

    def _send_checked_out(self, packed: bytes) -> Any:
        """A command packed by redlease, on a connection it keeps between calls
        (``transport.send_checked_out``)."""
        packer = self._packer
        assert packer is not None  # only called when the hot path is on
        spare = self._spare.get()  # a forked child never touches its parent's sockets
        return send_checked_out(self.redis.connection_pool, packer.checkout, spare, packed)

    async def _run_kept(
        self,
        op: Operation[T],
        again: Callable[[], Operation[T]] | None,
        name: str,
        replication: Replication | None,
        then: Callable[[T], Any],
    ) -> T:
        """``_run`` for a release. It finishes even when its caller is cancelled: ``then``
        runs on its result before the cancellation goes on (``cancel.finish_run``;
        ``again``: the operation made anew, same request ids)."""
        if True:  # ASYNC
            packer = self._packer
            pack = packer.pack if packer is not None and replication is None else None
            run = functools.partial(self._run, name=name, replication=replication)
            return await cancel.finish_run(run, op, then, again=again, pack=pack)
        else:
            return await self._run(op, name, replication)

    def _perform(self, call: Call, name: str, replication: Replication | None) -> Any:
        """The reply of ``call``."""
        if call.undo is not None:  # ASYNC
            return self._perform_undone(call, call.undo, name, replication)
        return self._call(call, name, replication)

    def _perform_undone(  # ASYNC
        self,
        call: Call,
        undo: Callable[[Any], Call | None],
        name: str,
        replication: Replication | None,
    ) -> Any:
        """The reply of a call with an ``undo``: it finishes even when its caller is
        cancelled, and is undone (``cancel.finish_call``)."""

        async def take_back(reply: Any) -> None:
            back = undo(reply)
            if back is not None:
                await self._call(back, name)

        def send() -> Any:
            return self._call(call, name, replication)

        packer = self._packer
        packed = None
        if replication is None and call.replication is None and packer is not None:
            # on the pipeline or a direct call, a cancelled caller's reply is still read
            packed = functools.partial(packer.pack, call)
        return cancel.finish_call(send, take_back, packed=packed)

    async def _run(self, op: Operation[T], name: str, replication: Replication | None = None) -> T:
        """Perform ``op``'s requests one by one until it returns; with ``replication`` every
        script waits for replica acknowledgements. ``close()`` stops it at its next wait."""
        ops = self._ops
        with ops.mutex:
            if self._closed:
                op.close()
                raise ClientClosedError(name=name)
            # asyncio: the loop it was first used on
            try:  # ASYNC
                self._loop.check(name)
            except EventLoopError:
                op.close()
                raise
            ops.started()
        try:
            return await self._drive(op, name, replication)
        finally:
            with ops.mutex:
                ops.ended(self._closed)

    async def _drive(self, op: Operation[T], name: str, replication: Replication | None) -> T:
        if not self._state.pubsub.settled:
            await self._settle_pubsub(name)
        if self._checks.is_due():  # at the first use, then every half hour: not per call
            await self._check_servers(name)
        waiter: Waiter | None = None
        leave: Call | None = None  # run if the operation is abandoned while in line
        listened: Subscribe | None = None  # how the waiter listens (its wait id, its give-back)
        place: Abandoned | None = None  # the waiter's place once its wait is over
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
                    if listened is not None and place is None and gives_back(request):
                        # the wait is over without the lock: its leave goes now
                        place = self._abandon(waiter, listened, name)
                        waiter = None
                    if hung is not None and gives_back(request):
                        self._give_back_later(request, name, place)
                        if request is leave:
                            leave = None
                        reply, resume = hung, op.throw
                        continue
                    try:
                        reply = await self._perform(request, name, replication)
                    except (ServerUnavailableError, ReplicaError) as exc:
                        reply, resume = exc, op.throw
                        if isinstance(exc, ServerUnavailableError) and timed_out(exc):
                            hung = exc
                    else:
                        if place is not None and gives_back(request):
                            self._left(place)
                        if request.undo is not None and self._closed:
                            # granted as the client closed: give it back
                            back = request.undo(reply)
                            if back is not None:
                                with contextlib.suppress(*compat.FAILED):
                                    await self._call(back, name)
                            raise ClientClosedError(name=name)
                elif isinstance(request, Subscribe):
                    leave = request.leave
                    listened = request if request.wait else None
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
                    await compat.wait_event(self._closing, request.seconds)
                    reply = None
                    self._stop_if_closed(name)
        except StopIteration as stop:
            leave = None
            result: T = stop.value
            return result
        finally:
            op.close()
            if leave is not None and listened is not None and place is None:
                place = self._abandon(waiter, listened, name)
                waiter = None
            if waiter is not None and self._subscriber is not None:
                self._subscriber.unsubscribe(waiter)
            if leave is not None and hung is not None:
                self._give_back_later(leave, name, place)
            elif leave is not None:
                with contextlib.suppress(*compat.FAILED_OR_CANCELLED):
                    await cancel.bounded(self._call(leave, name))
                    if place is not None:
                        self._left(place)

    def _abandon(self, waiter: Waiter | None, listened: Subscribe, name: str) -> Abandoned | None:
        """The wait that ``listened`` (its ``waiter``, if it listens yet) is over without the
        lock, and its leave is about to be sent: until the server confirms it, a turn that
        comes to its place (the leave was lost: a frozen link) is given back at once
        (``listened.grant_back`` for a hand-over, else the leave again), in a task of its
        own."""
        subscriber = self._subscriber
        if subscriber is None:
            return None
        leave, grant_back = listened.leave, listened.grant_back

        def give_back(handed: Handed | None) -> None:
            if handed is not None and grant_back is not None:
                self._give_back_later(grant_back(handed), name)
            elif leave is not None:
                self._give_back_later(leave, name)

        channel = listened.private or listened.channel  # where its turn is told
        return subscriber.abandon(waiter, channel, listened.owner, listened.wait, give_back)

    def _left(self, place: Abandoned) -> None:
        """``place``'s leave was confirmed: no turn can come to it any more."""
        if self._subscriber is not None:
            self._subscriber.left(place)

    def _check_loop(self, name: str | None) -> None:  # ASYNC
        """Raise ``EventLoopError`` if this client was first used on another event loop (for
        the calls that read the server without ``_run``: an election's ``leader()``,
        ``eviction_policies()``, ...)."""
        self._loop.check(name)

    def _give_back_later(
        self, call: Call, name: str | None, place: Abandoned | None = None
    ) -> None:
        """Send a give-back in a task of its own: the server did not answer a call of this
        operation in time, and the caller's error must not wait for it once more (or a turn
        came to a wait that is over); ``place``: the wait's place, gone once it ran."""

        async def send() -> None:
            with contextlib.suppress(RedleaseError):
                await self._call(call, name)
                if place is not None:
                    self._left(place)

        compat.spawn(send, "redlease-give-back")

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

    async def _settle_pubsub(self, name: str | None) -> None:
        """On a cluster, once: sharded pub/sub if every master has it, else classic."""
        async with self._settling:  # one probe, however many tasks start at once
            if self._state.pubsub.settled:
                return
            try:  # ASYNC
                await compat.ready(self.redis)
            except PROBE_ERRORS as exc:
                raise_translated(exc, self.address, name, user=self._user)

            async def probe(node: Any) -> BaseException | None:
                try:
                    await cancel.cancellable(
                        self.redis.execute_command(*SHARDED_PROBE, target_nodes=node)
                    )
                except PROBE_ERRORS as exc:
                    return exc
                return None

            nodes = self.redis.get_primaries()
            answers = await compat.gather(*(probe(node) for node in nodes))
            error = settle_pubsub(self._state.pubsub, answers, self.address)
            if error is not None:
                raise_translated(error, self.address, name)

    async def eviction_policies(self) -> list[EvictionPolicy]:
        """What each server (each master of a cluster) does with lock keys when memory runs
        short, read now (``CONFIG GET maxmemory*``, else ``INFO memory``); a server that cannot
        be reached raises ``ServerUnavailableError``. Neither warns nor refuses."""
        self._check_loop(None)  # ASYNC
        found = await self._read_policies(strict=True)
        assert found is not None  # strict: raised instead
        return found

    async def _check_servers(self, name: str | None) -> None:
        """The first-use check (and its half-hourly repeat): read each server's eviction
        policy, then warn, refuse (raise ``EvictionPolicyError``) or go on (``eviction``). A
        user not allowed ``CONFIG GET`` or ``INFO`` is not hindered; a server that cannot be
        reached is checked again later, and the operation goes on as it would have."""
        refused = None
        async with self._checking:  # one check, however many start at once
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
                replies = await cancel.cancellable(pipe.execute(raise_on_error=False))
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
                    config: Any = await cancel.cancellable(
                        ask("CONFIG GET", CONFIG_PATTERN, **where)
                    )
                except redis.exceptions.ResponseError as exc:  # not allowed, or renamed
                    config = exc
                info: Any = None
                if policy_of(address, config, None).policy is None:
                    try:
                        info = await cancel.cancellable(ask("INFO", "memory", **where))
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
