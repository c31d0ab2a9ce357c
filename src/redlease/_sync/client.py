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
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._channels import Waiter
from .._clientbase import CLOSE_GRACE, ClientBase, default_timeouts
from .._core.requests import Call, Operation, Replication, Sleep, Subscribe, WaitWake
from .._core.scripts import Script
from .._naming import name_maker
from .._shell import (
    CONNECTION_ERRORS,
    HANDOFF_WINDOW,
    HUNG,
    NOT_RETRIED,
    PROBE_ERRORS,
    SHARDED_PROBE,
    TRANSLATED,
    Hung,
    RenewalJob,
    ThreadOwners,
    bounded_kwargs,
    check_replicas,
    cluster_node_of,
    fork_generation,
    fork_safe,
    gives_back,
    key_type_shown,
    log,
    needs_key_type,
    raise_translated,
    renewal_down,
    settle_pubsub,
    timed_out,
    unavailable,
)
from .._urls import checked_url, is_sentinel_url, sentinel_master
from .._wire import SPARE_CONNECTIONS, Packer
from ..errors import (
    ArgumentTypeError,
    ClientClosedError,
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
    renews it every third of that for as long as the hold lasts. A release gives the lock to the
    first waiter in line, so the releasing thread cannot barge straight back in:
    ``handoff_window`` is the first lease of a waiter handed the lock outright, or how long it
    stays reserved for one that must take it itself (``0`` turns the line off: Redisson's
    free-for-all).
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
            raise ArgumentTypeError(
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
        self._ops = threading.Condition()
        """Guards ``_closed`` and ``_active``: the operations under way, which ``close()``
        stops and waits for."""
        self._active = 0
        self._closing = threading.Event()
        """Set by ``close()``: ends a back-off pause at once."""
        fork_safe(self)
        # the hot path: scripts packed by redlease, sent on connections it keeps (see _wire);
        # a cluster (redirections) or a single-connection client goes through redis-py
        self._packer: Packer | None = None
        self._spare: list[Any] = []
        self._spare_generation = fork_generation()
        if isinstance(redis_client, redis.Redis) and redis_client.connection is None:
            self._packer = Packer.for_pool(redis_client.connection_pool)

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
        ``redis.cluster.RedisCluster.from_url``: any node's URL), closed with the client.

        A Sentinel URL (``redis+sentinel://host:26379,host2:26379/service[/db]`` or Lettuce's
        ``redis-sentinel://host:26379,host2:26379[/db]#service``; ``rediss+`` / ``rediss-``
        for TLS) gives a client over ``Sentinel(...).master_for(service)``."""
        checked_url(url)
        default_timeouts(redis_kwargs, replicas, replica_timeout)
        sentinels: list[Any] = []
        if is_sentinel_url(url):
            if cluster:
                raise InvalidArgumentError("a Sentinel URL cannot be used with cluster=True")
            redis_client: redis.Redis | redis.cluster.RedisCluster
            redis_client, sentinels = sentinel_master(url, redis_kwargs)
        else:
            factory = redis.cluster.RedisCluster if cluster else redis.Redis
            redis_client = factory.from_url(url, **redis_kwargs)
        client = cls(
            redis_client,
            watchdog_timeout=watchdog_timeout,
            handoff_window=handoff_window,
            replicas=replicas,
            replica_timeout=replica_timeout,
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
        layout: str = "redlease",
    ) -> FairLock:
        """A reentrant lock served strictly in arrival order (see ``FairLock``).
        ``layout="redisson"``: Redisson's RedissonFairLock layout, one line shared with Java
        services on the same name (Redisson's place timeouts then)."""
        return FairLock(
            self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas, layout=layout
        )

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
        layout: str = "redlease",
    ) -> ReadWriteLock:
        """A read-write lock named ``name``: ``.read_lock()`` and ``.write_lock()``, each with
        the ``Lock`` API; many readers or one writer, writers first (see ``ReadWriteLock``).
        ``layout="redisson"``: Redisson's RReadWriteLock layout, shared with Java services
        (no writer preference then); other arguments as for ``lock``."""
        return ReadWriteLock(
            self, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas, layout=layout
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

        Every call still waiting (for a lock, a permit, a latch) stops promptly with
        ``ClientClosedError``: it leaves the line and gives back what was granted to it
        meanwhile; ``close()`` waits for that (at most ``CLOSE_GRACE`` seconds). Holds still
        held are not released: they expire with their lease.
        """
        with self._ops:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        with self._start_mutex:  # nothing starts once closed (see _subscriber_started, _watch)
            subscriber = self._subscriber
        if subscriber is not None:
            subscriber.close()  # wakes every waiter
        with self._ops:
            self._ops.wait_for(lambda: self._active == 0, CLOSE_GRACE)
        with self._start_mutex:
            watchdog = self._watchdog
        if watchdog is not None:
            watchdog.stop()
        self._drop_idle(None)  # the spares only: the pool closes with its client
        if self._owns_redis:
            self.redis.close()
            for sentinel in self._sentinels:  # the sentinels' clients from_url made
                sentinel.close()

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

    def _fresh_after_fork(self) -> None:
        """Fresh locks (a thread of the parent may have held one at the fork), and none of
        the parent's threads, whose locks could be held too."""
        self._start_mutex = threading.Lock()
        self._ops = threading.Condition()
        self._active = 0
        self._after_fork()

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
                    self._load(call.script, via or self.redis)
                    return self._send(call, name, replication, via or self.redis)
            except CONNECTION_ERRORS as exc:
                if attempt == 2 or isinstance(exc, NOT_RETRIED):
                    raise_translated(exc, self.address, name, user=self._user)
                self._drop_idle(getattr(via or self.redis, "connection_pool", None))
            except TRANSLATED as exc:
                key_type = self._key_type(exc, name, via)
                raise_translated(exc, self.address, name, key_type=key_type, user=self._user)
        raise AssertionError("unreachable")

    def _key_type(self, exc: BaseException, name: str | None, via: redis.Redis | None) -> str:
        """The type of the key ``name``, asked only after Redis's own WRONGTYPE reply (which
        does not say it); "" when it cannot be had."""
        if name is None or not needs_key_type(exc):
            return ""
        try:
            found = (via or self.redis).type(name)
        except Exception:
            return ""
        return key_type_shown(found)

    def _drop_idle(self, pool: Any) -> None:
        """Close the idle connections: after one failed, the others most likely died with it
        (a restart, a cut), and the call's second try must not pick another dead one."""
        if self._spare_generation == fork_generation():
            while True:
                try:
                    conn = self._spare.pop()
                except IndexError:
                    break
                conn.disconnect()
                self.redis.connection_pool.release(conn)
        if pool is not None:  # None for a RedisCluster (a pool per node) and on close
            pool.disconnect(inuse_connections=False)

    def _send(
        self, call: Call, name: str | None, replication: Replication | None, via: redis.Redis
    ) -> Any:
        if replication is None and self._packer is not None and via is self.redis:
            return self._send_packed(self._packer.pack(call))
        sha, numkeys, args = call.script.sha, len(call.keys), (*call.keys, *call.args)
        if replication is None:
            return via.evalsha(sha, numkeys, *args)
        pipe = via.pipeline(transaction=False)
        pipe.evalsha(sha, numkeys, *args)
        pipe.wait(replication.replicas, replication.timeout_ms)
        reply, acked = pipe.execute()
        return check_replicas(reply, int(acked), replication, name)

    def _load(self, script: Script, via: redis.Redis) -> None:
        """SCRIPT LOAD, on the connections the script's EVALSHA went through."""
        if self._packer is not None and via is self.redis:
            self._send_packed(self._packer.command("SCRIPT", "LOAD", script.source))
        else:
            via.script_load(script.source)

    def _send_packed(self, packed: bytes) -> Any:
        """A command packed by redlease, on a connection it keeps between calls; a dead
        connection is retried as redis-py's own commands are (the connection's ``retry``)."""
        pool, packer = self.redis.connection_pool, self._packer
        assert packer is not None  # only called when the hot path is on
        spare = self._spare
        if self._spare_generation != fork_generation():
            # a forked child never touches its parent's sockets
            spare = self._spare = []
            self._spare_generation = fork_generation()
        try:
            conn = spare.pop()
        except IndexError:
            conn = pool.get_connection(*packer.checkout)

        def send() -> Any:
            try:
                conn.send_packed_command([packed])
                return conn.read_response()
            except HUNG as exc:  # a hung server: redis-py's retry would only wait again
                raise Hung(exc) from exc

        try:
            reply = conn.retry.call_with_retry(send, lambda _: conn.disconnect())
        except redis.exceptions.ResponseError:
            spare.append(conn)  # an error reply, read whole: the connection is fine
            raise
        except BaseException as exc:
            conn.disconnect()  # nothing or half a reply read: never reuse it as it is
            pool.release(conn)
            if isinstance(exc, Hung):
                raise exc.error from None
            raise
        if len(spare) < SPARE_CONNECTIONS:
            spare.append(conn)
        else:
            pool.release(conn)
        return reply

    def _run(self, op: Operation[T], name: str, replication: Replication | None = None) -> T:
        """Perform ``op``'s requests one by one until it returns; with ``replication`` every
        script waits for replica acknowledgements. ``close()`` stops it at its next wait."""
        with self._ops:
            if self._closed:
                op.close()
                raise ClientClosedError(name=name)
            self._active += 1
        try:
            return self._drive(op, name, replication)
        finally:
            with self._ops:
                self._active -= 1
                if not self._active:
                    self._ops.notify_all()

    def _drive(self, op: Operation[T], name: str, replication: Replication | None) -> T:
        if not self._state.pubsub.settled:
            self._settle_pubsub(name)
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
                        reply = self._call(request, name, replication)
                    except (ServerUnavailableError, ReplicaError) as exc:
                        reply, resume = exc, op.throw
                        if isinstance(exc, ServerUnavailableError) and timed_out(exc):
                            hung = exc
                    else:
                        if request.undo is not None and self._closed:
                            # granted as the client closed: give it back
                            back = request.undo(reply)
                            if back is not None:
                                with contextlib.suppress(RedleaseError):
                                    self._call(back, name)
                            raise ClientClosedError(name=name)
                elif isinstance(request, Subscribe):
                    leave = request.leave
                    channel, owner, private = request.channel, request.owner, request.private
                    if request.only_if_live:
                        sub = self._subscriber
                        waiter = sub.listen_if_live(channel, owner, private) if sub else None
                    else:
                        waiter = self._subscriber_started().subscribe(
                            channel, owner, name=name, private=private
                        )
                    reply = waiter is not None
                    self._stop_if_closed(name)
                elif isinstance(request, WaitWake):
                    assert waiter is not None
                    reply = wait(waiter, request.timeout)
                    self._stop_if_closed(name)  # a hand-over it brought is left (leave)
                elif isinstance(request, Sleep):
                    self._closing.wait(request.seconds)
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
                with contextlib.suppress(RedleaseError):
                    self._call(leave, name)

    def _give_back_later(self, call: Call, name: str | None) -> None:
        """Send a give-back in a thread of its own: the server did not answer a call of this
        operation in time, and the caller's error must not wait for it once more."""

        def send() -> None:
            with contextlib.suppress(RedleaseError):
                self._call(call, name)

        threading.Thread(target=send, name="redlease-give-back", daemon=True).start()

    def _stop_if_closed(self, name: str | None) -> None:
        if self._closed:
            raise ClientClosedError(name=name)

    def _subscriber_started(self) -> Subscriber:
        with self._start_mutex:
            self._stop_if_closed(None)
            if self._subscriber is None:
                self._subscriber = Subscriber(self.redis, sharded=self._state.pubsub.sharded)
            return self._subscriber

    def _settle_pubsub(self, name: str | None) -> None:
        """On a cluster, once: sharded pub/sub if every master has it, else classic."""
        with self._start_mutex:  # one probe, however many threads start at once
            if self._state.pubsub.settled:
                return
            answers: list[BaseException | None] = []
            for node in self.redis.get_primaries():
                try:
                    self.redis.execute_command(*SHARDED_PROBE, target_nodes=node)
                except PROBE_ERRORS as exc:
                    answers.append(exc)
                else:
                    answers.append(None)
            error = settle_pubsub(self._state.pubsub, answers, self.address)
            if error is not None:
                raise_translated(error, self.address, name)

    def _watch(self) -> None:
        with self._start_mutex:
            if self._closed:
                return  # a closed client starts nothing (its holds expire with their lease)
            if self._watchdog is None:
                self._watchdog = _Watchdog(self)
            self._watchdog.ensure_running()


class _Watchdog:
    """One thread per client that renews every watched hold, batched.

    It sends on connections of its own whose calls never hang past a renewal interval (a
    hung server must not hide an expired lease). On a cluster that is a ``RedisCluster`` of
    its own over the client's nodes (built in the watchdog thread, closed with it), whose
    calls time out after a quarter of an interval and are not retried by redis-py; and a
    node that fails a call is not called again in that round, so a paused master delays the
    renewals on the other masters by one bounded call, however many slots it serves."""

    def __init__(self, client: Client) -> None:
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
            ok = self._round(jobs) if jobs else True
            next_round = time.monotonic() + policy.next_delay(ok)

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

    def _via(self) -> Any:
        """What to send renewals on: the watchdog's own connections."""
        if not self._client.cluster:
            return self._redis
        if self._cluster is None:
            timeout = self._client._policy.interval / 4
            try:
                self._cluster = bounded_cluster(self._client.redis, timeout)
            except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
                raise unavailable(exc, self._client.address, None) from exc
            if self._stop.is_set():  # stopped while it was being built
                self._cluster.close()
        return self._cluster


def bounded_cluster(
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


from .latch import CountDownLatch  # noqa: E402
from .lock import FairLock, Lock  # noqa: E402  (Lock needs Client; Client.lock returns Lock)
from .rwlock import ReadWriteLock  # noqa: E402  (ReadWriteLock needs the client)
from .semaphore import LeaseSemaphore, Semaphore  # noqa: E402
