"""How a client's script call reaches the server: within the client's call slots, packed by
redlease on a kept connection (or the opt-in pipeline), else through redis.asyncio; sent
once more after a dead connection, the script loaded once after ``NOSCRIPT``, a ``WAIT``
for replicas in the same round trip, Redis's errors translated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.exceptions

from .._asyncio import cancel, compat
from .._asyncio.transport import Pipeline, drop_idle, send_checked_out
from .._core.requests import Call, Replication
from .._core.scripts import Script
from .._redis.errors import (
    CONNECTION_ERRORS,
    NOT_RETRIED,
    TRANSLATED,
    check_replicas,
    key_type_shown,
    needs_key_type,
    raise_translated,
)
from .._redis.wire import Packer
from .._shared import fork
from .._shared.clientbase import ClientBase


class AsyncCalls(ClientBase):
    """The client's script calls (``AsyncClient`` sets these attributes up)."""

    redis: Any
    _packer: Packer | None
    """The hot path: scripts packed by redlease, sent on connections it keeps; ``None`` for
    a cluster (redirections) or a single-connection client, which go through redis-py."""
    _spare: fork.PerProcess[list[Any]]
    """Idle connections kept for the next call (none of the parent's in a forked child)."""
    # the opt-in pipeline: every task's calls share a few connections (see transport)
    _pipeline: Pipeline | None  # ASYNC
    _slots: Any
    """Script calls under way at once: no more than the pool can serve (``call_slots``)."""

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
        undone = _Undone(self, call, undo, name, replication)
        if replication is None and call.replication is None and self._packer is not None:
            # on the pipeline or a direct call, a cancelled caller's reply is still read
            return cancel.finish_call(undone.send, undone.take_back, packed=undone.packed)
        return cancel.finish_call(undone.send, undone.take_back)


class _Undone:  # ASYNC
    """A call with an ``undo`` (``AsyncCalls._perform_undone``): how it is sent, packed and
    given back. One object per call instead of closures (fewer objects alive per call in
    flight: the garbage collector scans each of them)."""

    __slots__ = ("call", "calls", "name", "replication", "undo")

    def __init__(
        self,
        calls: AsyncCalls,
        call: Call,
        undo: Callable[[Any], Call | None],
        name: str,
        replication: Replication | None,
    ) -> None:
        self.calls = calls
        self.call = call
        self.undo = undo
        self.name = name
        self.replication = replication

    def send(self) -> Any:
        return self.calls._call(self.call, self.name, self.replication)

    def packed(self) -> bytes:
        packer = self.calls._packer
        assert packer is not None  # (only given when it packs)
        return packer.pack(self.call)

    async def take_back(self, reply: Any) -> None:
        back = self.undo(reply)
        if back is not None:
            await self.calls._call(back, self.name)
