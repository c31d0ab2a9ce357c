"""The read-write lock in Redisson's RReadWriteLock layout, so Java and Python services
exclude and wake each other on one name (``client.rw_lock(name, layout="redisson")``).

Redisson's keys for a lock named ``N`` (``{N}`` below is Redisson's tagging: ``N`` itself when
it has a brace, else ``N`` in braces):

- ``N``: a hash {``mode`` -> ``read`` or ``write``, ``<client-id>:<thread-id>`` -> read hold
  count, ``<client-id>:<thread-id>:write`` -> write hold count}; its TTL is the longest lease of
  any hold;
- ``{N}:<field>:rwlock_timeout:<n>``: the lease of a reader's n-th hold (a string with a TTL);
- ``redisson_rwlock:{N}``: the channel; ``0`` wakes one waiter, ``1`` every waiter.

redlease adds keys Redisson never reads, in the same hash slot: the fencing counter, the
tokens of live holds with the wait id of the call each first hold was made for, and release
receipts. The operations (acquire loop, release, status)
are ``rwlock``'s; only the scripts differ. What this layout gives up against redlease's own:
no writer preference (readers keep joining while a writer waits: Redisson's rule) and no
line, so waiters race when woken; the lock lives as long as its longest-lived hold, so a
reader that crashed holds back writers until its lease runs out *after* the last other
reader leaves (Redisson renews every reader's lease keys from any reader's watchdog).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .keys import CLASSIC, PubSub, redisson_prefixed, redisson_suffixed, same_slot_key
from .lock import to_ms
from .requests import Call, Replication
from .rwlock import READ, WRITE, RwNames, RwStatus, release_undo, rw_holder_prefix
from .scripts import Script
from .watchdog import OwnRenewalKeys

READ_ACQUIRE = Script.load("redisson_rw_read_acquire")
WRITE_ACQUIRE = Script.load("redisson_rw_write_acquire")
READ_RELEASE = Script.load("redisson_rw_read_release")
WRITE_RELEASE = Script.load("redisson_rw_write_release")
RENEW = Script.load("redisson_rw_renew")
STATUS = Script.load("redisson_rw_status")
FORCE_RELEASE = Script.load("redisson_rw_force_release")
LEAVE = Script.load("redisson_rw_leave")

SCRIPTS = (
    READ_ACQUIRE,
    WRITE_ACQUIRE,
    READ_RELEASE,
    WRITE_RELEASE,
    RENEW,
    STATUS,
    FORCE_RELEASE,
    LEAVE,
)

WRITE_SUFFIX = ":write"
"""Redisson marks a writer's field by this suffix on the owner field."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class RedissonRwKeys(RwNames):
    """The keys and channel of one read-write lock in Redisson's layout (see the module)."""

    name: str
    channel: str
    hold_prefix: str
    """Every read hold's lease key starts so: ``<prefix><field>:rwlock_timeout:<n>``."""
    fence: str
    tokens: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    holder_prefix: str = field(default="", kw_only=True)
    """Prefix of each client's own channel where its holds hear of a force release (a
    channel of redlease's, no key: Redisson's layout is unchanged)."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> RedissonRwKeys:
        return cls(
            name=name,
            channel=redisson_prefixed("redisson_rwlock", name),
            hold_prefix=redisson_suffixed(name, ""),
            fence=same_slot_key(name, "redlease:rw-fence:"),
            tokens=same_slot_key(name, "redlease:rw-redisson-tokens:"),
            receipt_prefix=same_slot_key(name, "redlease:rw-released:", ":"),
            pubsub=pubsub,
            holder_prefix=rw_holder_prefix(name),
        )

    def hold_key(self, owner: str, n: int) -> str:
        """The lease key of ``owner``'s ``n``-th read hold."""
        return f"{self.hold_prefix}{owner}:rwlock_timeout:{n}"

    @staticmethod
    def field(side: str, owner: str) -> str:
        """``owner``'s field in the lock hash for ``side``."""
        return owner + WRITE_SUFFIX if side == WRITE else owner

    def side_keys(self, side: str) -> RedissonSideKeys:
        return RedissonSideKeys(
            name=self.label(side),
            channel=self.channel,
            line=self.tokens,
            places=self.tokens,
            fence=self.fence,
            receipt_prefix=f"{self.receipt_prefix}{side}:",
            rw=self,
            side=side,
            pubsub=self.pubsub,
            holder_prefix=self.holder_prefix,
        )

    def acquire_call(
        self,
        side: str,
        owner: str,
        held: int,
        lease: float,
        join_line: bool,
        wait_id: str,
        *,
        token: int = 0,
    ) -> Call:
        """One try of the acquire call ``wait_id`` (``join_line`` is moot: this layout has no
        line; ``token``: the token of the hold a re-entry joins); a grant the caller no longer
        wants (it was cancelled) is given back by the undo."""
        undo = release_undo(self, side, owner, held, wait_id)
        if side == READ:
            return Call(
                READ_ACQUIRE,
                (self.name, self.hold_key(owner, held + 1), self.fence, self.tokens),
                (to_ms(lease), owner, held, self.field(WRITE, owner), wait_id, token),
                undo=undo,
            )
        return Call(
            WRITE_ACQUIRE,
            (self.name, self.fence, self.tokens),
            (to_ms(lease), self.field(WRITE, owner), held, owner, wait_id, token),
            undo=undo,
        )

    def release_call(
        self, side: str, owner: str, held: int, *, request_id: str, token: int, unsure: bool = False
    ) -> Call:
        args = (
            self.field(side, owner),
            held,
            request_id,
            self.pubsub.command,
            int(unsure),
            token,
        )
        keys = (self.name, self.channel, self.receipt(side, owner), self.tokens)
        if side == READ:
            return Call(READ_RELEASE, (*keys, self.hold_prefix), args)
        return Call(WRITE_RELEASE, keys, args)

    def leave_call(
        self, side: str, owner: str, wait_id: str, *, give_back: bool = True
    ) -> Call | None:
        """Nobody waits in line in this layout: a call that gives up has only a first hold
        made for it (``wait_id``) to give back, if any (``None`` without ``give_back``)."""
        if not give_back:
            return None
        return Call(
            LEAVE,
            (self.name, self.channel, self.tokens, self.hold_prefix),
            (self.field(side, owner), side, self.pubsub.command, wait_id),
        )

    def force_release_call(self, side: str) -> Call:
        return Call(
            FORCE_RELEASE,
            (self.name, self.channel, self.tokens),
            (side, self.pubsub.command, self.holder_prefix),
        )

    def status_call(self, owner: str) -> Call:
        return Call(STATUS, (self.name, self.tokens), ())

    def parse_status(self, owner: str, reply: Sequence[Any]) -> RwStatus:
        """Holders from the hash (``mode`` aside); TTLs are the lock's, as Redisson keeps no
        other; nobody waits in line."""
        ttl_ms = int(reply[0])
        items = [_text(v) for v in reply[1:]]
        cut = items.index("tokens")
        fields = dict(zip(items[:cut:2], items[1:cut:2], strict=True))
        tokens = dict(zip(items[cut + 1 :: 2], items[cut + 2 :: 2], strict=True))
        fields.pop("mode", None)
        writers = {
            f.removesuffix(WRITE_SUFFIX): int(n)
            for f, n in fields.items()
            if f.endswith(WRITE_SUFFIX)
        }
        readers = {f: int(n) for f, n in fields.items() if not f.endswith(WRITE_SUFFIX)}
        ttl = None if ttl_ms == -2 else ttl_ms / 1000
        writer = next(iter(writers), None)
        return RwStatus(
            writer=writer,
            write_count=writers.get(writer, 0) if writer else 0,
            write_ttl=ttl if writer else None,
            write_token=int(tokens.get(self.field(WRITE, writer), 0)) or None if writer else None,
            readers=readers,
            read_ttl=ttl if readers else None,
            read_token=int(tokens.get(owner, 0)) or None if owner in readers else None,
            waiters=0,
        )


@dataclass(frozen=True)
class RedissonSideKeys(OwnRenewalKeys):
    """One side of a Redisson-layout read-write lock, as the hold table and watchdog see it."""

    rw: RedissonRwKeys
    side: str

    def renew_call(
        self,
        owners: Sequence[str],
        lease_ms: int,
        replication: Replication | None,
        *,
        tokens: Sequence[int],
    ) -> Call:
        rw = self.rw
        return Call(
            RENEW,
            (rw.name, rw.tokens, rw.hold_prefix),
            (lease_ms, self.side, *(rw.field(self.side, owner) for owner in owners), *tokens),
            replication=replication,
        )
