"""What a client learns of its servers before and beside its operations: the pub/sub kind of
a cluster (settled once), each server's eviction policy (checked at first use, then every
half hour), and the holder records (its own written, the holders' read)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import redis.exceptions

from .._asyncio import cancel, compat
from .._core.log import log
from .._redis.connections import PROBE_ERRORS, SHARDED_PROBE, settle_pubsub
from .._redis.errors import raise_translated
from .._redis.servers import CONFIG_PATTERN, policy_of
from .._shared.clientbase import ClientBase
from .._shared.holders import RECORD_TTL, client_of, holder_infos, record_key
from .._shared.holders import parse as parse_record
from .._shared.holders import record as holder_record
from ..stats import EvictionPolicy, HolderInfo


class AsyncServers(ClientBase):
    """The client's server checks (``AsyncClient`` sets these attributes up)."""

    redis: Any
    _settling: compat.Mutex
    """One pub/sub probe at a time (``_settle_pubsub``)."""
    _checking: compat.Mutex
    """One server check at a time (``_check_servers``)."""

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
