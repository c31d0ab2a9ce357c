"""An explicit-state model of the reentrant lock protocol, explored breadth-first.

It mirrors ``src/redlease/lua/lock_{acquire,release,leave,renew}.lua`` (the server side: each
script is one atomic step) and ``src/redlease/_core/lock.py`` with the hold table of
``_owners.py``/``_lockbase.py`` (the client side: each owner runs a short script of acquire and
release calls). Every model step that is a script statement quotes the Lua line in a comment
(``# lock_x.lua: <line>``); ``test_lock_model.py`` checks that each quoted line still exists, so
a change to a script that the model does not follow fails a test.

Time is abstract. A lease or a place in line may run out at any step (the adversary decides);
the assumption "no pause past the lease" becomes: when a hold that its owner believes in
expires on the server, the owner's local lease has ended too (it knows: ``lost``), and a grant
whose hold is gone is refused by the owner's local clock check, unless the grant predates the
owner's last request (then the check, counted from that request, cannot tell).

The adversary may also delay and reorder any request, reply or pub/sub message, run a
request twice (redis-py resends a command on a new connection), lose any reply or request
(the caller times out: the outcome is unknown to it), drop a pub/sub message, and with
``late=True`` run a request after its caller gave up on it.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

OWNER_NAMES = "ABC"

# --- state --------------------------------------------------------------------------------


class Server(NamedTuple):
    """The keys of one lock name on the server."""

    holds: tuple[int, ...]
    """Lock hash: hold count per owner field (0: no field)."""
    fence: int
    """Field ``redlease:fence`` (0: absent)."""
    wait: int
    """Field ``redlease:wait``: the wait id of the call the hold was made for (-1: absent)."""
    handoff: int
    """Field ``redlease:handoff``: the owner the lock is reserved for (-1: absent)."""
    expiring: bool
    """The lock key has a TTL (meaningless when the key does not exist)."""
    counter: int
    """The fencing counter (never expires)."""
    line: tuple[tuple[int, int, int], ...]
    """Places in line by arrival: (owner, wait id, try); a place names its wait (the try is
    the model's, for the traces)."""
    receipts: tuple[int, ...]
    """Release receipt per owner: request id of its last final release (-1: none)."""


class Owner(NamedTuple):
    """One owner (a thread of a client): its hold record and where it is in its script."""

    op: int
    """Index of the current (or next) call in its script."""
    phase: str
    """Where it is inside that call (``idle`` between calls)."""
    local: int
    """Hold count in the client's hold table."""
    lost: bool
    """Its hold expired on the server: by its local clock it knows the lease ended."""
    unsure: bool
    """Its last re-entrant acquire had an unknown outcome (the server may count one more)."""
    stray: bool
    """A first acquire of it ended with an unknown outcome and its leave was lost too."""
    pending: int
    """Request id of a release whose outcome is unknown (-1: none)."""
    releasing: bool
    """A final release was begun (the user no longer relies on the hold)."""
    watched: bool
    """The hold is renewed by the watchdog."""
    epoch: int
    """Which hold-table record (a new one per acquisition episode)."""
    held: int
    """The hold count the current acquire call sends (the server's, after a LOST reply)."""
    tries: int
    """Requests sent by the current acquire call (bounded by ``Config.max_tries``)."""
    corrections: int
    """LOST replies followed by the current acquire call."""
    seen: int
    """The highest fencing token or counter the current acquire call saw in a reply."""
    renewing: bool
    """A watchdog renewal of its hold is in flight."""
    token: int
    """Fencing token of its hold (0: none)."""
    false_loss: bool
    """It was told its lease was lost while the server still had its hold (I4 broken)."""


class State(NamedTuple):
    server: Server
    owners: tuple[Owner, ...]
    net: tuple[tuple[object, ...], ...]
    """Messages in flight, sorted: requests ("q", owner, live, may_dup, kind, args),
    replies ("r", owner, kind, payload, ran_out), hand-over messages ("p", owner, token, wait,
    try, ran_out). ``ran_out`` (a ghost, not on the wire) marks a grant whose lease ran out on
    the server since: a local lease check counted from a moment before the grant refuses it."""
    excused: frozenset[tuple[int, int]]
    """(owner, wait id) of waits whose exit had an unknown outcome: a place they leave
    behind lapses on its own."""


@dataclasses.dataclass(frozen=True)
class Config:
    """What to explore, and which rules of the protocol are on (all on: the fixed protocol)."""

    scripts: tuple[str, ...] = ("AR", "AR")
    """Per owner, its calls: A acquire (watchdog lease, may be handed the lock), L acquire
    with an explicit lease (only ever reserved), R release."""
    max_depth: int = 20
    max_tries: int = 2
    """Acquire requests one call sends before it must give up."""
    dup: bool = True
    """A request may run twice: its reply is lost and redis-py sends it again."""
    late: bool = False
    """A request may run after its caller gave up on it (else it runs before or never).
    The protocol assumes it does not: ``test_late_requests_break_exclusion`` shows why."""
    renewals: bool = True
    """Model the watchdog's renewals (and the losses it reports)."""
    expiry: bool = True
    """Leases may run out."""
    slow: bool = True
    """A grant may come too late by the owner's local clock although its lease is still on
    on the server (a slow reply or message, the drift allowance)."""
    check_wait: bool = True
    """Fix of defect 1: a hand-over message is taken only by the wait whose id it carries."""
    send_unsure: bool = True
    """Fix of defect 2: a release after a re-entry with unknown outcome sends unsure=1."""
    resend_pending: bool = True
    """Fix of defect 3: an owner's next acquire first re-sends its unknown release."""
    failed_keeps_record: bool = True
    """Found by this model, now in the code (``on_gone``/``acquire_failed(gone=)``): an
    acquire that returns False drops the owner's record (as gone on the server) only when a
    LOST reply showed the server has no hold of it. Off: the code before, where a re-entry
    whose grant came too late by the local clock is given back and the call returns False,
    and ``acquire_failed`` then drops the outer hold too and reports it lost, while the
    server still has it."""
    token_rule: bool = True
    """Found by this model, now in the code (lock_acquire.lua's HELD reply, ``seen`` in
    ``core.acquire``): a HELD reply carries the fencing counter, and a wait
    takes a hand-over message only if its token is above every token and counter it saw in
    a reply (else it is a wake-up). So a hand-over made before the wait's last request is
    never taken: the local lease check, counted from before that request, is sound only for
    a hand-over that followed it; and a hold the wait gave back (a grant that came too late)
    is not taken again from its message. Off: the code before."""


def initial(config: Config) -> State:
    n = len(config.scripts)
    server = Server((0,) * n, 0, -1, -1, False, 0, (), (-1,) * n)
    owner = Owner(
        0, "idle", 0, False, False, False, -1, False, False, 0, 0, 0, 0, 0, False, 0, False
    )
    return State(server, (owner,) * n, (), frozenset())


def wait_id(o: int, op: int) -> int:
    """Wait ids are unique per acquire call (owner and call index)."""
    return o * 100 + op


def giveback_id(o: int, op: int) -> int:
    """Request id of the release that gives back a grant that came too late."""
    return 1000 + o * 100 + op


def _grant_of(payload: object, fence: int) -> bool:
    """An acquire reply that grants the hold with this fencing token."""
    return isinstance(payload, tuple) and len(payload) == 3 and payload[::2] == (1, fence)


def exists(s: Server) -> bool:
    return any(s.holds) or s.handoff >= 0


def hlen(s: Server) -> int:
    return sum(1 for c in s.holds if c) + (s.fence > 0) + (s.wait >= 0) + (s.handoff >= 0)


def deleted(s: Server) -> Server:
    """``del`` of the lock key."""
    return s._replace(holds=(0,) * len(s.holds), fence=0, wait=-1, handoff=-1, expiring=False)


def hset_hold(s: Server, o: int, count: int, fence: int = -1, wait: int = -1) -> Server:
    """``hset`` of owner ``o``'s count (with the fence and wait fields, if given); a new
    key has no TTL."""
    holds = list(s.holds)
    holds[o] = count
    expiring = s.expiring if exists(s) else False
    s = s._replace(holds=tuple(holds), expiring=expiring)
    return s if fence < 0 else s._replace(fence=fence, wait=wait)


def zrem(s: Server, o: int, wait: int) -> Server:
    """``zrem`` of owner ``o``'s place for the wait ``wait`` (a place names its wait)."""
    return s._replace(line=tuple(p for p in s.line if p[:2] != (o, wait)))


# --- the scripts (one atomic step each) ----------------------------------------------------


def script_acquire(
    s: Server, o: int, expected: int, wait: int, try_: int, handover: bool
) -> tuple[Server, tuple[int, ...]]:
    """lock_acquire.lua (blocking, non-fair); reply (code, count, token). ``handover`` (the
    watchdog's lease or the caller's own) only sets the lease of a hand-over, which the
    model leaves abstract."""
    # lock_acquire.lua: local place = ARGV[2] .. ' ' .. ARGV[7] .. ' ' .. ARGV[6]
    # lock_acquire.lua: local count = tonumber(fields[1] or '0')
    count = s.holds[o]
    # lock_acquire.lua: if count == expected + 1 then
    if count == expected + 1:
        # lock_acquire.lua: redis.call('zrem', KEYS[2], place)
        s = zrem(s, o, wait)
        # lock_acquire.lua: return {1, count, redis.call('pttl', KEYS[1]), tonumber(fields[2]
        return s, (1, count, s.fence)
    # lock_acquire.lua: if count ~= expected then
    if count != expected:
        # lock_acquire.lua: return {-1, count, redis.call('pttl', KEYS[1]), 0}
        return s, (-1, count, 0)

    def queue_and_wait(s: Server) -> tuple[Server, tuple[int, ...]]:
        # lock_acquire.lua: redis.call('zadd', KEYS[2], 'NX', tonumber(now[1]) * 1000000
        # (the model's place also records the try, for the traces: a re-check keeps it in place)
        place = (o, wait, try_)
        line = tuple(place if p[:2] == (o, wait) else p for p in s.line)
        if place not in line:
            line += (place,)
        # lock_acquire.lua: return {0, 0, ttl, last_token()}
        # lock_acquire.lua: return tonumber(fields[2] or redis.call('get', KEYS[4]) or '0')
        return s._replace(line=line), (0, 0, s.fence if s.fence > 0 else s.counter)

    # lock_acquire.lua: if count == 0 then
    if count == 0:
        # lock_acquire.lua: if ttl ~= -2 then
        if exists(s):
            # lock_acquire.lua: return queue_and_wait(ttl)
            return queue_and_wait(s)
        token = s.counter + 1
        # lock_acquire.lua: redis.call('set', KEYS[4], token)
        s = s._replace(counter=token)
        # lock_acquire.lua: redis.call('hset', KEYS[1], ARGV[2], 1, 'redlease:fence', token,
        s = hset_hold(s, o, 1, fence=token, wait=wait)
        # lock_acquire.lua: redis.call('pexpire', KEYS[1], lease)
        s = s._replace(expiring=True)
        # lock_acquire.lua: redis.call('zrem', KEYS[2], place)
        s = zrem(s, o, wait)
        # lock_acquire.lua: return {1, 1, lease, token}
        return s, (1, 1, token)
    # lock_acquire.lua: redis.call('hincrby', KEYS[1], ARGV[2], 1)
    s = hset_hold(s, o, count + 1)
    # lock_acquire.lua: redis.call('pexpire', KEYS[1], lease)
    s = s._replace(expiring=True)
    # lock_acquire.lua: return {1, count + 1, ttl, tonumber(fields[2] or '0')}
    return s, (1, count + 1, s.fence)


def script_release(
    s: Server, o: int, expected: int, rid: int, unsure: bool
) -> list[tuple[Server, tuple[int, ...], tuple[object, ...] | None]]:
    """lock_release.lua with a hand-off window; each outcome (server, reply (code, count),
    hand-over message or None). The model keeps every receipt (the script keeps the last 16,
    for 30 s); a place whose client is found dead is one that lapsed (the adversary's)."""
    # lock_release.lua: local count = tonumber(fields[1] or '0')
    count = s.holds[o]
    # lock_release.lua: if expected > 0 and count >= expected and count <= expected + tonumber(
    if expected > 0 and expected <= count <= expected + int(unsure):
        # lock_release.lua: if expected > 1 then
        if expected > 1:
            # lock_release.lua: redis.call('hset', KEYS[1], ARGV[1], expected - 1)
            # lock_release.lua: return {1, expected - 1}
            return [(hset_hold(s, o, expected - 1), (1, expected - 1), None)]
        # lock_release.lua: local token = tonumber(fields[3] or redis.call('get', KEYS[6]) or '0')
        token = s.fence if s.fence > 0 else s.counter
        # lock_release.lua: redis.call('del', KEYS[1])
        s = deleted(s)
        receipts = list(s.receipts)
        receipts[o] = rid
        s = s._replace(receipts=tuple(receipts))
        # lock_release.lua: local popped = redis.call('zpopmin', KEYS[4])
        if not s.line:
            # lock_release.lua: redis.pcall(ARGV[5], KEYS[2], '0')
            # lock_release.lua: redis.call('set', KEYS[3], receipts, 'px', 30000)
            return [(s, (1, 0), None)]
        # lock_release.lua: if owner and owner ~= ARGV[1] and lease > 0 and (lease <= window
        line = s.line
        while line and line[0][0] == o:  # the releaser's own leftover places are dropped
            line = line[1:]
        s = s._replace(line=line)
        if not s.line:
            return [(s, (1, 0), None)]
        head, wait, try_ = s.line[0]
        # lock_release.lua: token = token + 1
        token += 1
        # lock_release.lua: redis.call('hset', KEYS[1], owner, 1, 'redlease:fence', token,
        h = hset_hold(s._replace(line=s.line[1:]), head, 1, fence=token, wait=wait)
        # lock_release.lua: redis.call('pexpire', KEYS[1], lease)
        h = h._replace(expiring=True)
        # lock_release.lua: redis.call('set', KEYS[6], token)
        h = h._replace(counter=token)
        # lock_release.lua: redis.pcall(ARGV[5], channel, owner .. string.format(' %d %d ', token,
        return [(h, (1, 0), ("p", head, token, wait, try_, False))]
    # lock_release.lua: if count > 0 and count == expected - 1 then
    if count > 0 and count == expected - 1:
        return [(s, (1, count), None)]
    # lock_release.lua: if count == 0 and expected == 1 then
    if count == 0 and expected == 1 and s.receipts[o] == rid:
        return [(s, (1, 0), None)]
    # lock_release.lua: return {-1, count}
    return [(s, (-1, count), None)]


def script_leave(s: Server, o: int, wait: int) -> tuple[Server, tuple[int, ...]]:
    """lock_leave.lua; reply (1,) when a hand-over was given back."""
    # lock_leave.lua: redis.call('zrem', KEYS[3], place)
    s = zrem(s, o, wait)
    # lock_leave.lua: if fields[1] == '1' and fields[2] == ARGV[3] then
    if s.holds[o] == 1 and s.wait == wait:
        # lock_leave.lua: redis.call('del', KEYS[1])
        return deleted(s), (1,)
    return s, (0,)


def script_renew(s: Server, o: int) -> tuple[Server, tuple[int, ...]]:
    """lock_renew.lua for one key; (1,) renewed, (0,) the hold is gone."""
    # lock_renew.lua: if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    if s.holds[o] > 0:
        # lock_renew.lua: redis.call('pexpire', KEYS[i], lease)
        return s._replace(expiring=True), (1,)
    return s, (0,)


# --- exploration ---------------------------------------------------------------------------


class Model:
    """Successor function of the protocol model (client steps, script runs, adversary)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.n = len(config.scripts)

    # helpers on states

    def _set(self, st: State, o: int, owner: Owner) -> State:
        owners = list(st.owners)
        owners[o] = owner
        return st._replace(owners=tuple(owners))

    @staticmethod
    def _net(msgs: list[tuple[object, ...]]) -> tuple[tuple[object, ...], ...]:
        return tuple(sorted(msgs))

    def _send(self, st: State, o: int, kind: str, args: tuple[int, ...]) -> State:
        msg = ("q", o, True, self.config.dup, kind, args)
        return st._replace(net=self._net([*st.net, msg]))

    def _end_call(self, st: State, o: int, kind: str = "call") -> State:
        """The caller stops waiting for the reply: its copies in flight run never or, with
        ``late``, whenever the adversary likes (their replies go nowhere)."""

        def mine(k: object) -> bool:
            return (k == "renew") == (kind == "renew")

        out: list[tuple[object, ...]] = []
        for m in st.net:
            if m[1] == o and m[0] == "q" and m[2] and mine(m[4]):
                if self.config.late:
                    out.append(("q", o, False, False, m[4], m[5]))
            elif m[1] == o and m[0] == "r" and (m[2] == "renew") == (kind == "renew"):
                continue
            else:
                out.append(m)
        return st._replace(net=self._net(out))

    def _excuse(self, st: State, o: int) -> State:
        ow = st.owners[o]
        op = self.config.scripts[o][ow.op] if ow.op < len(self.config.scripts[o]) else "R"
        if op == "R":
            return st
        return st._replace(excused=st.excused | {(o, wait_id(o, ow.op))})

    # client steps

    def _next_op(self, st: State, o: int) -> State:
        ow = st.owners[o]
        return self._set(st, o, ow._replace(op=ow.op + 1, phase="idle"))

    def _start(self, st: State, o: int) -> tuple[str, State]:
        ow = st.owners[o]
        op = self.config.scripts[o][ow.op]
        if op == "R":
            if ow.local == 0:
                return "release(): not held, nothing sent", self._next_op(st, o)
            rid = ow.pending if ow.pending >= 0 else ow.op
            unsure = ow.unsure and self.config.send_unsure
            ow = ow._replace(phase="rel", pending=rid, releasing=ow.releasing or ow.local == 1)
            st = self._send(self._set(st, o, ow), o, "rel", (ow.local, rid, int(unsure)))
            return f"release(): send release held={ow.local} id={rid} unsure={int(unsure)}", st
        ow = ow._replace(held=ow.local, tries=1, corrections=0, seen=0)
        if ow.pending >= 0 and self.config.resend_pending:
            unsure = ow.unsure and self.config.send_unsure
            ow = ow._replace(phase="acq_resend")
            st = self._send(self._set(st, o, ow), o, "rel", (ow.local, ow.pending, int(unsure)))
            return f"acquire(): first re-send release id={ow.pending}", st
        return "acquire(): " + self._label_try(ow, o), self._try(self._set(st, o, ow), o)

    def _label_try(self, ow: Owner, o: int) -> str:
        return f"send acquire held={ow.held} wait={wait_id(o, ow.op)} try={ow.tries}"

    def _try(self, st: State, o: int) -> State:
        ow = st.owners[o]
        handover = self.config.scripts[o][ow.op] == "A"
        st = self._set(st, o, ow._replace(phase="acq"))
        return self._send(st, o, "acq", (ow.held, wait_id(o, ow.op), ow.tries, int(handover)))

    def _granted(self, st: State, o: int, count: int, token: int) -> State:
        """ClientState.granted: a first hold (count 1) replaces the record (an old one is
        gone on the server: ``_found_gone``), else append a hold and trim to the server's
        count; a grant ends an unknown release and an unsure re-entry; the call returns."""
        ow = st.owners[o]
        new = ow.local == 0 or count == 1
        if ow.local > 0 and count == 1:
            st = self._found_gone(st, o)
            ow = st.owners[o]
        kind = self.config.scripts[o][ow.op]
        ow = ow._replace(
            local=1 if new else min(ow.local + 1, count),
            lost=False,
            unsure=False,
            stray=False,
            pending=-1,
            releasing=False,
            watched=(ow.watched and not new) or kind == "A",
            epoch=ow.epoch + 1 if new else ow.epoch,
            token=token if new else ow.token,
        )
        return self._next_op(self._set(st, o, ow), o)

    def _raised(self, st: State, o: int, label: str) -> Iterator[tuple[str, State]]:
        """The acquire raises (unknown outcome): it leaves the line on its way out."""
        ow = st.owners[o]
        st = self._set(st, o, ow._replace(phase="acq_leave_raised"))
        yield label + "; acquire raises, leaves the line", self._send_leave(st, o)

    def _found_gone(self, st: State, o: int) -> State:
        """ClientState._found_gone: an acquire found the owner's recorded hold gone; one the
        watchdog renewed is reported lost (an explicit lease simply ran out)."""
        ow = st.owners[o]
        if ow.watched and not ow.releasing:
            st = self._loss(st, o)
        return st

    def _not_acquired(self, st: State, o: int) -> State:
        """ClientState.acquire_failed: a record the owner still has is gone on the server."""
        ow = st.owners[o]
        if ow.local > 0 and (ow.held == 0 or not self.config.failed_keeps_record):
            st = self._found_gone(st, o)
            ow = st.owners[o]._replace(
                local=0, lost=False, unsure=False, pending=-1, releasing=False
            )
            st = self._set(st, o, ow)
        return st

    def _send_leave(self, st: State, o: int) -> State:
        return self._send(st, o, "leave", (wait_id(o, st.owners[o].op),))

    def _loss(self, st: State, o: int) -> State:
        """The client reports the hold lost (I4: only when it is gone on the server)."""
        ow = st.owners[o]
        false = st.server.holds[o] > 0 and st.server.fence == ow.token
        return self._set(st, o, ow._replace(false_loss=ow.false_loss or false))

    def _reply(
        self, st: State, o: int, payload: tuple[int, ...], ran_out: bool
    ) -> Iterator[tuple[str, State]]:
        ow = st.owners[o]
        st = self._end_call(st, o)
        ph = ow.phase
        if ph == "acq":
            ow = ow._replace(seen=max(ow.seen, payload[2]))
        if ph == "rel":
            code, count = payload
            if code == 1:
                local = min(ow.local - 1, count)
                ow = ow._replace(phase="idle", local=local, unsure=False, pending=-1)
                if local == 0:
                    ow = ow._replace(releasing=False, lost=False, stray=False)
                st = self._set(st, o, ow)
                yield f"release() returns, {count} left", self._next_op(st, o)
            else:
                st = self._loss(st, o)
                ow = st.owners[o]._replace(
                    local=0, lost=False, unsure=False, pending=-1, releasing=False
                )
                yield "release() raises LeaseLostError", self._next_op(self._set(st, o, ow), o)
        elif ph == "acq_resend":
            code, count = payload
            if code == 1:
                local = min(ow.local - 1, count)
                ow = ow._replace(local=local, unsure=False, pending=-1, held=local)
                if local == 0:
                    ow = ow._replace(releasing=False, lost=False)
            else:
                ow = ow._replace(local=0, unsure=False, pending=-1, releasing=False, held=0)
            st = self._set(st, o, ow)
            yield f"re-sent release answered {payload}; " + self._label_try(ow, o), self._try(st, o)
        elif ph == "acq":
            code, count, token = payload
            if code == 1:
                if not ran_out:  # the local check: lease left, counted from before the request
                    yield (
                        f"acquire() granted count={count} token={token}",
                        self._granted(st, o, count, token),
                    )
                if not ran_out and not self.config.slow:
                    return
                # or, by its local clock, too little of the lease is left (always, if it ran out)
                ow = ow._replace(phase="acq_giveback")
                st = self._set(st, o, ow)
                args = (count, giveback_id(o, ow.op), 0)
                label = f"grant token={token} came too late: give it back"
                yield label, self._send(st, o, "rel", args)
            elif code == 0:
                yield "acquire: HELD, waits", self._set(st, o, ow._replace(phase="acq_wait"))
            else:
                # the record stays until the call ends (a grant of count 1 replaces it)
                ow = ow._replace(corrections=ow.corrections + 1, held=count)
                if ow.corrections > 3:
                    st = self._loss(self._set(st, o, ow), o)
                    yield from self._raised(st, o, "acquire: LOST too often, LeaseLostError")
                    return
                st = self._set(st, o, ow._replace(tries=min(ow.tries + 1, 9)))
                yield f"acquire: LOST count={count}, goes on from it", self._try(st, o)
        elif ph == "acq_giveback":
            st = self._set(st, o, ow._replace(phase="acq_wait"))
            yield f"give-back answered {payload}", st
        elif ph in ("acq_leave", "acq_leave_raised"):
            yield from self._left(st, o, f"leave answered {payload}", known=True)

    def _left(self, st: State, o: int, label: str, known: bool) -> Iterator[tuple[str, State]]:
        ow = st.owners[o]
        if not known:
            st = self._excuse(st, o)
        if ow.phase == "acq_leave_raised":
            if ow.local > 0:
                ow = ow._replace(unsure=True)  # maybe_reentered
            elif not known:
                ow = ow._replace(stray=True)
            st = self._set(st, o, ow)
            yield label + "; acquire() raises", self._next_op(st, o)
            return
        st = self._not_acquired(st, o)
        if not known:
            st = self._set(st, o, st.owners[o]._replace(stray=True))
        yield label + "; acquire() returns False", self._next_op(st, o)

    def _timeout(self, st: State, o: int) -> Iterator[tuple[str, State]]:
        """The caller stops waiting for a reply (lost or late): its outcome is unknown."""
        ow = st.owners[o]
        st = self._end_call(st, o)
        ph = ow.phase
        if ph == "rel":
            yield "release() raises (no reply; outcome unknown)", self._next_op(st, o)
        elif ph == "acq_resend":
            # raised before the acquire proper began: no place in line, no leave
            st = self._set(st, o, ow._replace(unsure=ow.unsure or ow.local > 0))
            yield "re-sent release: no reply; acquire() raises", self._next_op(st, o)
        elif ph == "acq":
            st = self._excuse(st, o)
            if ow.tries < self.config.max_tries:
                st = self._set(st, o, ow._replace(tries=ow.tries + 1))
                yield "acquire: no reply, " + self._label_try(st.owners[o], o), self._try(st, o)
            yield from self._raised(st, o, "acquire: no reply")
        elif ph == "acq_giveback":
            st = self._excuse(st, o)
            yield from self._raised(st, o, "give-back: no reply")
        elif ph in ("acq_leave", "acq_leave_raised"):
            yield from self._left(st, o, "leave: no reply", known=False)

    def _handed(self, st: State, o: int, msg: tuple[object, ...]) -> Iterator[tuple[str, State]]:
        _, _, token, wait, try_, ran_out = msg
        assert isinstance(token, int) and isinstance(wait, int) and isinstance(try_, int)
        ow = st.owners[o]
        label = f"hand-over message token={token} wait={wait} try={try_} arrives"
        st = st._replace(net=tuple(m for m in st.net if m != msg))
        if ow.phase != "acq_wait":
            yield label + " (nobody waits: dropped)", st
            return
        mine = wait == wait_id(o, ow.op) or not self.config.check_wait
        if mine and ow.held == 0:
            if self.config.token_rule:
                # only a hand-over that followed the last request; its lease counted from
                # before that request: it is refused once it ran out
                takeable = token > ow.seen and not ran_out
            else:
                # the lease counted from before the last request: a hand-over made before
                # it (an older try, an older wait) passes whether or not it ran out
                before_last = wait != wait_id(o, ow.op) or try_ < ow.tries
                takeable = before_last or not ran_out
            if takeable:
                yield label + ": acquire() takes it", self._granted(st, o, 1, token)
                if not self.config.slow:
                    return
                label += " (too little of its lease left to be sure)"
        if ow.tries >= self.config.max_tries:
            yield label + ": a wake-up; out of tries", self._give_up(st, o)
            return
        st = self._set(st, o, ow._replace(tries=ow.tries + 1))
        yield label + ": a wake-up; " + self._label_try(st.owners[o], o), self._try(st, o)

    def _give_up(self, st: State, o: int) -> State:
        ow = st.owners[o]
        return self._send_leave(self._set(st, o, ow._replace(phase="acq_leave")), o)

    # the successor function

    def successors(self, st: State) -> Iterator[tuple[str, State]]:
        cfg = self.config
        names = OWNER_NAMES
        for o, ow in enumerate(st.owners):
            name = names[o]
            if ow.phase == "idle" and ow.op < len(cfg.scripts[o]):
                label, nxt = self._start(st, o)
                yield f"{name}: {label}", nxt
            elif ow.phase not in ("idle", "acq_wait"):
                for label, nxt in self._timeout(st, o):
                    yield f"{name}: {label}", nxt
            elif ow.phase == "acq_wait":
                if ow.tries < cfg.max_tries:
                    nxt = self._set(st, o, ow._replace(tries=ow.tries + 1))
                    yield (
                        f"{name}: re-check, " + self._label_try(nxt.owners[o], o),
                        self._try(nxt, o),
                    )
                yield f"{name}: gives up waiting, sends leave", self._give_up(st, o)
            if (
                cfg.renewals
                and ow.local > 0
                and ow.watched
                and not ow.lost
                and not ow.releasing
                and not ow.renewing
            ):
                nxt = self._set(st, o, ow._replace(renewing=True))
                yield f"{name}: watchdog sends renew", self._send(nxt, o, "renew", (ow.epoch,))
            if ow.renewing:
                nxt = self._set(self._end_call(st, o, "renew"), o, ow._replace(renewing=False))
                yield f"{name}: watchdog renewal gets no reply", nxt
        seen: set[tuple[object, ...]] = set()
        for msg in st.net:
            if msg in seen:
                continue
            seen.add(msg)
            yield from self._message(st, msg)
        if cfg.expiry and exists(st.server):
            yield "server: the lock's lease runs out", self._expire(st)
        for place in st.server.line:
            line = tuple(p for p in st.server.line if p != place)
            nxt = st._replace(server=st.server._replace(line=line))
            yield f"server: {names[place[0]]}'s place in line lapses", nxt

    def _expire(self, st: State) -> State:
        owners = list(st.owners)
        for o, ow in enumerate(owners):
            if st.server.holds[o] > 0 and ow.local > 0:
                owners[o] = ow._replace(lost=True)  # its local lease ended first
        fence = st.server.fence
        net = []
        for m in st.net:  # grants of this hold in flight are now too late for their owner
            if fence and m[0] == "p" and m[2] == fence:
                m = (*m[:5], True)
            elif fence and m[0] == "r" and m[2] == "call" and _grant_of(m[3], fence):
                m = (*m[:4], True)
            net.append(m)
        return st._replace(server=deleted(st.server), owners=tuple(owners), net=self._net(net))

    def _message(self, st: State, msg: tuple[object, ...]) -> Iterator[tuple[str, State]]:
        names = OWNER_NAMES
        rest = list(st.net)
        rest.remove(msg)
        o = msg[1]
        assert isinstance(o, int)
        name = names[o]
        if msg[0] == "p":
            yield f"net: drop hand-over message to {name}", st._replace(net=self._net(rest))
            for label, nxt in self._handed(st, o, msg):
                yield f"{name}: {label}", nxt
            return
        if msg[0] == "r":
            st = st._replace(net=self._net(rest))
            payload, ran_out = msg[3], msg[4]
            assert isinstance(payload, tuple) and isinstance(ran_out, bool)
            if msg[2] == "renew":
                yield from self._renewed(st, o, payload)
                return
            for label, nxt in self._reply(st, o, payload, ran_out):
                yield f"{name}: {label}", nxt
            return
        _, _, live, may_dup, kind, args = msg
        assert isinstance(args, tuple)
        if not live:
            yield (
                f"net: {name}'s abandoned {kind} request is lost",
                st._replace(net=self._net(rest)),
            )
        for server, reply, pub in self._run(st.server, o, str(kind), args):
            extra = [] if pub is None else [pub]
            what = f"server runs {name}'s {kind}{args} -> {reply}"
            if pub is not None:
                what += f", hands over to {names[pub[1]]}"  # type: ignore[index]
            if live and kind == "renew":
                extra.append(("r", o, "renew", reply + args, False))  # with its epoch
            elif live:
                extra.append(("r", o, "call", reply, False))
            if not live:
                what += " (late: its caller gave up)"
            yield what, st._replace(server=server, net=self._net(rest + extra))
            if live and may_dup:
                # the reply is lost on its connection and redis-py sends the request again
                again = [*rest, ("q", o, True, False, kind, args)] + ([] if pub is None else [pub])
                label = what + "; the reply is lost, redis-py sends the request again"
                yield label, st._replace(server=server, net=self._net(again))

    def _run(
        self, s: Server, o: int, kind: str, args: tuple[int, ...]
    ) -> list[tuple[Server, tuple[int, ...], tuple[object, ...] | None]]:
        if kind == "acq":
            held, wait, try_, handover = args
            return [(*script_acquire(s, o, held, wait, try_, bool(handover)), None)]
        if kind == "rel":
            held, rid, unsure = args
            return script_release(s, o, held, rid, bool(unsure))
        if kind == "leave":
            return [(*script_leave(s, o, args[0]), None)]
        return [(*script_renew(s, o), None)]

    def _renewed(self, st: State, o: int, payload: tuple[int, ...]) -> Iterator[tuple[str, State]]:
        """ClientState.renewal_done: a hold found gone is reported lost (same record only)."""
        ow = st.owners[o]._replace(renewing=False)
        st = self._set(st, o, ow)
        ok, epoch = payload
        name = OWNER_NAMES[o]
        if ok or ow.local == 0 or ow.releasing or ow.lost or epoch != ow.epoch:
            yield f"{name}: watchdog renewal answered {ok}", st
            return
        st = self._loss(st, o)
        st = self._set(st, o, st.owners[o]._replace(lost=True))
        yield f"{name}: watchdog finds the hold gone, reports it lost", st


# --- invariants ------------------------------------------------------------------------------


def believers(st: State) -> list[int]:
    return [
        o for o, ow in enumerate(st.owners) if ow.local > 0 and not ow.lost and not ow.releasing
    ]


def inv_exclusion(st: State, config: Config) -> str | None:
    """I1: no two owners ever both believe they hold the lock (an owner whose lease ran out
    knows it by its local clock, and one that began its final release relies on it no
    more)."""
    who = believers(st)
    if len(who) > 1:
        return "I1: " + " and ".join(OWNER_NAMES[o] for o in who) + " both believe they hold it"
    return None


def inv_counts(st: State, config: Config) -> str | None:
    """I2: an owner between calls, with none of its requests in flight, has the server's hold
    count in its hold table; with an unknown outcome, within the range that outcome allows
    (a release that may have run: one less; an unsure re-entry or a lost first grant: one
    more)."""
    for o, ow in enumerate(st.owners):
        if ow.phase != "idle" or ow.lost:
            continue
        if any(m[0] == "q" and m[1] == o and m[4] != "renew" for m in st.net):
            continue
        lo = ow.local - (ow.pending >= 0)
        # a hold the server made for a wait whose end it never heard (a leftover place that
        # came to the head) is one the owner cannot know of, as a stray grant
        stray = ow.stray or (st.server.holds[o] and (o, st.server.wait) in st.excused)
        hi = ow.local + ow.unsure + (stray and ow.local == 0)
        if not lo <= st.server.holds[o] <= hi:
            return f"I2: {OWNER_NAMES[o]} counts {ow.local} holds, the server {st.server.holds[o]}"
    return None


def inv_no_strand(st: State, config: Config) -> str | None:
    """I3: the lock key always has a lease (nobody's forgotten hold or reservation lasts
    for ever), and no place in line outlives its wait unless that wait ended with an
    unknown outcome (then it lapses on its own)."""
    s = st.server
    if exists(s) and not s.expiring:
        return "I3: the lock key has no expiry"
    for o, wait, _ in s.line:
        ow = st.owners[o]
        live = ow.phase.startswith("acq") and wait == wait_id(o, ow.op)
        if not live and (o, wait) not in st.excused:
            return f"I3: {OWNER_NAMES[o]}'s place in line (wait {wait}) outlives its wait"
    return None


def inv_true_loss(st: State, config: Config) -> str | None:
    """I4: a lease is reported lost (LeaseLostError, a lease-lost event) only when the
    owner's hold is really gone on the server."""
    for o, ow in enumerate(st.owners):
        if ow.false_loss:
            return f"I4: {OWNER_NAMES[o]} was told its lease was lost, but the server has it"
    return None


INVARIANTS: tuple[Callable[[State, Config], str | None], ...] = (
    inv_exclusion,
    inv_counts,
    inv_no_strand,
    inv_true_loss,
)


# --- the explorer ----------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    states: int
    depth: int
    seconds: float
    violation: str | None = None
    trace: list[str] = dataclasses.field(default_factory=list)

    def report(self) -> str:
        head = f"{self.states} states, depth {self.depth}, {self.seconds:.1f} s"
        if self.violation is None:
            return head + ": no violation"
        steps = "\n".join(f"  {i + 1:2}. {step}" for i, step in enumerate(self.trace))
        return f"{head}\nviolation: {self.violation}\ntrace:\n{steps}"


def explore(
    config: Config,
    invariants: tuple[Callable[[State, Config], str | None], ...] = INVARIANTS,
    max_states: int = 5_000_000,
) -> Result:
    """Breadth-first over every interleaving up to ``config.max_depth`` steps, each state
    once (a visited set); stops at the first state that breaks an invariant (a shortest
    counterexample) and returns its trace."""
    model = Model(config)
    start = initial(config)
    parent: dict[State, tuple[State | None, str]] = {start: (None, "")}
    frontier = collections.deque([start])
    began = time.monotonic()
    depth = 0
    while frontier and depth < config.max_depth and len(parent) < max_states:
        depth += 1
        nxt_frontier: collections.deque[State] = collections.deque()
        for st in frontier:
            for label, nxt in model.successors(st):
                if nxt in parent:
                    continue
                parent[nxt] = (st, label)
                for inv in invariants:
                    why = inv(nxt, config)
                    if why is not None:
                        return Result(
                            len(parent), depth, time.monotonic() - began, why, _trace(parent, nxt)
                        )
                nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return Result(len(parent), depth, time.monotonic() - began)


def _trace(parent: dict[State, tuple[State | None, str]], st: State) -> list[str]:
    steps: list[str] = []
    cur: State | None = st
    while cur is not None:
        prev, label = parent[cur]
        if prev is not None:
            steps.append(label)
        cur = prev
    return steps[::-1]
