"""The read-write lock in the same model (``lockmodel.py``): both layouts, the real scripts.

``Config.layout`` ``"rw"`` is redlease's own layout (``rw_*.lua``: a writer hash with its
lease end, readers' leases in a sorted set, a writers' line with places that lapse), and
``"redisson-rw"`` Redisson's ``RReadWriteLock`` layout (``redisson_rw_*.lua``: one hash with
``mode``, a lease key per read hold, whose names the scripts build from a prefix they are
given). The owners run ``redlease._core.rwlock``'s ``acquire``/``release`` generators, with
the same shell, adversary, time, data loss and id minting as the lock; what differs is how a
hold is read from the server state for the invariants:

* I1: never a writer that believes it writes while another owner believes it holds either
  side (an owner's own read hold beside its write hold is a downgrade, allowed);
* I2, I4, I5 as for the lock, per side (a reader's token, the writer's token);
* I3: each side an owner believes it holds is alive on the server with its token and at least
  the lease its owner believes (redlease's layout: the writer's lease end or the reader's;
  Redisson's: the lock hash's TTL, which is the lease of every hold in it);
* I6: a place in the writers' line that has not lapsed belongs to a live wait, or to one whose
  exit had an unknown outcome.

Script letters: ``r``/``w`` acquire the read/write side (blocking, ``timeout``, explicit
``lease``), ``p``/``x`` try the read/write side (``blocking=False``), ``R``/``W`` release it.
The watchdog's renewal of read-write holds is not modelled (explicit leases only).
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Iterator
from typing import Any, cast

from redlease._core import rwlock
from redlease._core.rwlock import READ, WRITE, RwKeys
from redlease._core.rwlock_redisson import WRITE_SUFFIX, RedissonRwKeys

from .lockmodel import NAME, Cur, Ghost, Model, Owner, Rec, State, _fail

ACQUIRE_PARAMS = frozenset(inspect.signature(rwlock.acquire).parameters)
RELEASE_PARAMS = frozenset(inspect.signature(rwlock.release).parameters)

RecPair = tuple[Rec | None, Rec | None]
"""An owner's records in this model: one per side (read, write)."""

Hold = tuple[int, int, int, str]
"""A hold on the server: (count, token, units of lease left, wait id)."""


def _left(value: str | None) -> int:
    """A server time kept relative to the model's clock (``"@<units>"``), as units left."""
    return int(value[1:]) if value and value.startswith("@") else -1


class RwModel(Model):
    def setup(self) -> None:
        cfg = self.config
        self.redisson = cfg.layout == "redisson-rw"
        rw = (RedissonRwKeys if self.redisson else RwKeys).for_name(NAME)
        self.rw: Any = rw
        self.keys = rw
        self.times = frozenset() if isinstance(rw, RedissonRwKeys) else frozenset(
            {rw.writer, rw.leases, rw.places}
        )  # fmt: skip
        for _ in self.processes:
            self.channels.append((self.rw.channel,))

    # the letters, the records (one per side) and the operations

    def side_of(self, letter: str) -> str:
        return READ if letter in "rpR" else WRITE

    def is_release(self, letter: str) -> bool:
        return letter in "RW"

    def watched(self, letter: str) -> bool:
        return False

    def describe(self, letter: str) -> str:
        what = "acquire" if letter in "rw" else "acquire(blocking=False)"
        return f"{self.side_of(letter)} {what}"

    # Owner.rec holds a pair here, (read side's Rec | None, write side's Rec | None)

    def rec_of(self, ow: Owner, side: str) -> Rec | None:
        recs = cast(RecPair, ow.rec or (None, None))
        return recs[0 if side == READ else 1]

    def put_rec(self, ow: Owner, side: str, rec: Rec | None) -> Owner:
        recs = list(cast(RecPair, ow.rec or (None, None)))
        recs[0 if side == READ else 1] = rec
        return ow._replace(rec=None if recs == [None, None] else cast(Rec, tuple(recs)))

    def hold_keys(self, side: str) -> Any:
        return self.rw.side_keys(side)

    def tick_rec(self, rec: Any) -> Any:
        if rec is None:
            return None
        return tuple(None if r is None else r._replace(deadline=r.deadline - 1) for r in rec)

    def _op(self, o: int, cur: Cur) -> Generator[Any, Any, Any]:
        owner, cfg = self.fields[o], self.config
        if cur.kind == "rel":
            kw: dict[str, Any] = {
                "held": cur.held,
                "request_id": cur.id,
                "unsure": cur.unsure,
            }
            if "token" in RELEASE_PARAMS:
                kw["token"] = cur.token
            return rwlock.release(self.rw, cur.side, owner, **kw)
        blocking = cur.letter in "rw"
        kw = {
            "held": cur.held,
            "lease": cfg.lease * self.unit,
            "blocking": blocking,
            "timeout": None if not blocking or cfg.timeout is None else cfg.timeout * self.unit,
            "wait_id": cur.id,
            "clock": self._clock,
            "on_gone": lambda: self.gone.append(True),
        }
        if "token" in ACQUIRE_PARAMS:
            kw["token"] = cur.token
        return rwlock.acquire(self.rw, cur.side, owner, **kw)

    def _meta(self, o: int, cur: Cur) -> tuple[Any, ...]:
        name = cur.pending[0] if cur.pending else ""
        if cur.final is not None or name.endswith("_leave"):
            return ("leave", o, 0, "", cur.side)
        if cur.kind == "rel":
            return ("rel", o, cur.token, cur.id, cur.side)
        if "acquire" in name:
            return ("acq", o, cur.token if cur.held else 0, cur.id, cur.side)
        return ("give-back", o, 0, "", cur.side)

    def _renewal_steps(self, st: State, o: int) -> Iterator[Any]:
        return iter(())

    def _force(self, st: State) -> State:
        call = self._call_t(self.rw.force_release_call(WRITE))
        st, reply = self._run(st, call, ("force", -1))
        self.label_extra = f"(write side) -> {reply}"
        return st._replace(ghost=st.ghost._replace(forced=st.ghost.forced + 1))

    # the server state, read for the invariants

    def _key(self, server: tuple[Any, ...], name: str) -> tuple[str, int, Any]:
        for key, kind, ttl, value in server:
            if key == name:
                return kind, ttl, value
        return "none", -2, ()

    def holds(self, server: tuple[Any, ...]) -> dict[tuple[str, str], Hold]:
        """(side, owner field) -> (count, token, lease left, wait id); only holds alive."""
        out: dict[tuple[str, str], Hold] = {}
        if self.redisson:
            kind, ttl, value = self._key(server, self.rw.name)
            if kind != "hash":
                return out
            tokens = dict(self._key(server, self.rw.tokens)[2] or ())
            for f, n in value:
                if f == "mode" or int(n) <= 0:
                    continue
                side = WRITE if f.endswith(WRITE_SUFFIX) else READ
                owner = f.removesuffix(WRITE_SUFFIX)
                out[(side, owner)] = (
                    int(n),
                    int(tokens.get(f, 0)),
                    ttl,
                    tokens.get(f"wait:{f}", ""),
                )
            return out
        kind, _, value = self._key(server, self.rw.writer)
        if kind == "hash":
            w = dict(value)
            left = _left(w.get("deadline"))
            if w.get("writer") and left > 0:
                out[(WRITE, w["writer"])] = (
                    int(w.get("count", 0)),
                    int(w.get("token", 0)),
                    left,
                    w.get("wait", ""),
                )
        readers = dict(self._key(server, self.rw.readers)[2] or ())
        leases = dict(self._key(server, self.rw.leases)[2] or ())
        tokens = dict(self._key(server, self.rw.tokens)[2] or ())
        for f, n in readers.items():
            left = _left(leases.get(f))
            if int(n) > 0 and left > 0:
                out[(READ, f)] = (int(n), int(tokens.get(f, 0)), left, tokens.get(f"wait:{f}", ""))
        return out

    def held_now(self, server: tuple[Any, ...]) -> bool:
        return bool(self.holds(server))

    def places(self, server: tuple[Any, ...]) -> list[tuple[str, str]]:
        if self.redisson:
            return []
        kind, _, value = self._key(server, self.rw.places)
        if kind != "zset":
            return []
        return [(m, "*") for m, at in value if _left(at) > 0]

    def _server_checks(
        self, st: State, post: tuple[Any, ...], reply: Any, meta: tuple[Any, ...]
    ) -> Ghost:
        ghost = st.ghost
        pre, after = self.holds(st.server), self.holds(post)
        kind, o = meta[0], meta[1]
        who = f"{self.names[o]}'s {kind}" if o >= 0 else "a force release"
        for (side, f), (_, token, _, wait) in sorted(after.items()):
            if (side, f) in pre and pre[(side, f)][1] == token:
                continue
            if any(h[1] == token for h in pre.values()):
                continue  # a hold that carries its token over (a downgrade keeps the writer's)
            if token <= ghost.top:
                _fail(
                    self.config, "I2h",
                    f"I2: {who} hands out {side} token {token} to {self._name(f)}, not above "
                    f"{ghost.top} already handed out",
                )  # fmt: skip
            if kind == "acq" and o >= 0 and f == self.fields[o]:
                wait = meta[3]  # made by this call (whatever the script records)
            ghost = ghost._replace(
                top=max(ghost.top, token), issued=ghost.issued | {(token, f, wait)}
            )
        if o < 0:
            return ghost
        if len(meta) < 5:
            return ghost  # a background leave: nothing more to check
        side, field, token = meta[4], self.fields[o], meta[2]
        mine = pre.get((side, field))
        if token and mine is not None and mine[1] != token:
            now = after.get((side, field))
            changed = now is None or now[0] != mine[0] or now[2] > mine[2]
            if changed and (now is None or now[1] == mine[1]):
                _fail(
                    self.config, "I4",
                    f"I4: {who} ({side}, token {token}) acts on a hold of its owner field "
                    f"with token {mine[1]}",
                )  # fmt: skip
        if kind == "rel":
            rid = meta[3]
            present = mine is not None and mine[0] > 0 and (mine[1] == token or not token)
            code, remaining = int(reply[0]), int(reply[1])
            ran = {(f, r) for f, r, _ in ghost.done}
            if code == 1 and not present and (field, rid) not in ran:
                _fail(
                    self.config, "I5g",
                    f"I5: {who} ({side}, request {rid}) of a hold that is gone answers RELEASED",
                )  # fmt: skip
            if code != 1 and (field, rid, ghost.losses) in ghost.done:
                _fail(
                    self.config, "I5r",
                    f"I5: {who} ({side}, request {rid}) ran before and freed its hold, but its "
                    "retry is not recognised (LOST)",
                )  # fmt: skip
            if code == 1 and remaining == 0 and present:
                ghost = ghost._replace(done=ghost.done | {(field, rid, ghost.losses)})
            if code != 1 and present and not ghost.losses:
                _fail(
                    self.config, "I5l",
                    f"I5: {who} ({side}, request {rid}) of a hold that is there answers LOST",
                )  # fmt: skip
        return ghost

    def check(self, st: State) -> None:
        g = st.ghost
        for owner, wait in self.places(st.server):
            excused = any(f == owner for f, _ in g.excused)
            if not excused and not self._live(st, owner, wait):
                _fail(
                    self.config, "I6l",
                    f"I6: {self._name(owner)}'s place in the writers' line outlives its wait",
                )  # fmt: skip
        if g.losses or g.forced:
            return
        believers = []
        for o, ow in enumerate(st.owners):
            for side in (READ, WRITE):
                rec = self.rec_of(ow, side)
                if rec is not None and not rec.releasing and rec.deadline > 0:
                    believers.append((o, side, rec))
        writers = {o for o, side, _ in believers if side == WRITE}
        others = {o for o, _, _ in believers}
        if writers and len(others) > 1:
            names = sorted(f"{self.names[o]} ({side})" for o, side, _ in believers)
            _fail(self.config, "I1", "I1: " + " and ".join(names) + " believe they hold it at once")
        holds = self.holds(st.server)
        for o, side, rec in believers:
            hold = holds.get((side, self.fields[o]))
            if hold is None or hold[1] != rec.token or hold[2] < rec.deadline:
                server = (
                    "no hold"
                    if hold is None
                    else f"count {hold[0]}, token {hold[1]}, {hold[2]} units left"
                )
                _fail(
                    self.config, "I3",
                    f"I3: {self.names[o]} believes it holds the {side} side (token "
                    f"{rec.token}, {rec.deadline} units left) but the server has {server}",
                )  # fmt: skip
