"""The group lock in the same model (``lockmodel.py``): Redisson's ``RFasterMultiLock`` layout
with redlease's hold records, the real scripts (``group_lock_*.lua``).

``Config.layout`` ``"group"``: every owner locks the same two values of one group with the
lock's own generators (``_core.lock.acquire``/``release`` with ``group.GroupLayout``), so the
lock's script letters, shell, adversary (lost and resent calls and replies, time, a failover
to a stale replica or a restart empty, force releases, the watchdog's renewals with one entry
per hold) and id minting apply unchanged. What differs is how a hold is read from the server
state for the invariants: an owner holds the set when its hold record
(``redlease:hold:<owner>:<set>``: count and wait id; ``redlease:fence:<owner>:<set>``:
its token) is there and each value names it with
an ``expire_time`` not yet passed; the units left are the soonest end among its values (the
key's TTL when shorter). The invariants are the read-write lock's (``rwmodel.py``) on one side:
I1 at most one believer, I2 tokens above every earlier one and a first hold's token handed out
for its call, I3 each believer's hold alive with its token and lease, I4 nothing acts on a hold
of the owner field with another token, I5 receipts and losses, I6 the key has a TTL."""

from __future__ import annotations

import dataclasses
from typing import Any

from redlease._core.group import GroupLayout, value_fields
from redlease._core.keys import CLASSIC
from redlease._core.rwlock import WRITE

from .lockmodel import NAME, Cur, Model, Owner, Rec, State, _fail
from .rwmodel import Hold, RwModel, _left

VALUES = ("seat-1", "seat-2")


class GroupModel(RwModel):
    def setup(self) -> None:
        self.layout = GroupLayout(value_fields(VALUES))
        self.fair = False
        # the hold table's label is the model's name (the calls use the group's key)
        self.keys = dataclasses.replace(self.layout.keys(NAME, CLASSIC), name=NAME)
        self.times = frozenset({NAME})  # expire_time fields: server epoch milliseconds
        for _ in self.processes:
            self.channels.append((self.keys.channel,))

    # the lock's letters and operations, on one side
    side_of = staticmethod(lambda letter: WRITE)
    is_release = Model.is_release
    watched = Model.watched
    describe = Model.describe
    tick_rec = Model.tick_rec
    _op = Model._op
    _renewal_steps = Model._renewal_steps
    _force = Model._force

    def rec_of(self, ow: Owner, side: str) -> Rec | None:
        return ow.rec if side == WRITE else None

    def put_rec(self, ow: Owner, side: str, rec: Rec | None) -> Owner:
        return ow._replace(rec=rec)

    def hold_keys(self, side: str) -> Any:
        return self.keys

    def _meta(self, o: int, cur: Cur) -> tuple[Any, ...]:
        meta = Model._meta(self, o, cur)
        return (*meta, WRITE) if meta[0] in ("rel", "acq") else meta

    def holds(self, server: tuple[Any, ...]) -> dict[tuple[str, str], Hold]:
        """(side, owner field) -> (count, token, units left, wait id); only holds alive."""
        kind, ttl, value = self._key(server, NAME)
        if kind != "hash":
            return {}
        h = dict(value)
        out: dict[tuple[str, str], Hold] = {}
        prefix = "redlease:hold:"
        for f, record in h.items():
            if not f.startswith(prefix):
                continue
            owner = f[len(prefix) :].rsplit(":", 1)[0]
            count, wait = [*record.split(" "), ""][:2]
            token = h.get(f"redlease:fence:{f[len(prefix) :]}", "0")
            ends = [
                _left(h.get(f"{v}:{owner}:expire_time")) if h.get(v) == owner else -1
                for v in self.keys.fields
            ]
            left = min([*ends, ttl if ttl != -1 else min(ends)])
            if left > 0:
                out[(WRITE, owner)] = (int(count), int(token), left, wait)
        return out

    def places(self, server: tuple[Any, ...]) -> list[tuple[str, str]]:
        return []  # no line

    def check(self, st: State) -> None:
        _, ttl, _ = self._key(st.server, NAME)
        if ttl == -1:
            _fail(self.config, "I6t", "I6: the group's key has no TTL")
        super().check(st)
