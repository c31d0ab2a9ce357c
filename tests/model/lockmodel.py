"""An explicit-state model of the reentrant lock, explored breadth-first, that runs the real code.

**Server side: the scripts' own source.** Every server step runs the file of
``src/redlease/lua/`` that the client's ``Call`` names, with the KEYS and ARGV the client code
built, on one private real server (``engine.py``): the explored state's keys are written under
key names of that step's own, with their TTLs, the script runs by EVALSHA, every key is read
back (values, PTTL rounded to the model's unit) and deleted. We chose a real server over an
embedded Lua interpreter because it is the same Lua, the same ``redis.call`` semantics
(``TIME``, ``PUBSUB NUMSUB`` of real subscriptions, ``PEXPIRE``, number formatting) that
production runs; a transcription drifted before, and a Lua host of our own would be a second
implementation of Redis's scripting API. A change to a script is then automatically a change
to the model. Steps are cached by (script source, state, KEYS, ARGV, subscriptions): a script
is a function of those and of the server clock, which only feeds new fencing tokens and
arrival times (see *numbers* below).

**Pub/sub.** A simulated process that listens has a real connection subscribed to the lock's
channel and its client's hand-over channel, so the scripts' liveness checks see it; every
message a script publishes is observed (a pattern subscriber) and kept in flight, and the
adversary delivers it late, twice or never.

**Client side: the real decision code.** Each owner runs ``redlease._core.lock.acquire`` and
``release`` (the generators the shells drive), the watchdog's ``RenewalPolicy.calls`` and the
hold table ``HoldTable``; the model is their shell: it answers ``Subscribe``/``Sleep`` at once,
a ``WaitWake`` with a hand-over message or a (spurious, any time) wake-up, a ``Call`` with the
server's reply or with ``ServerUnavailableError`` (the reply or the request was lost). A
generator cannot be copied, so an explored state keeps each owner's current operation as the
inputs it was fed (with when) and the model replays them into a fresh generator. The little
glue between the operations and the hold table follows ``_shared/lockbase.LockBase``
(``held`` and ``token`` from the hold table, a release whose outcome is unknown re-sent first
by the next acquire with its request id, ``unsure`` after a failed re-entry) and the sync shell
(``_sync/driver.py``: after a call timed out, a give-back goes to the background; an abandoned
wait's leave is sent as the operation ends, and until it is confirmed a hand-over message to
that wait that nobody of its owner waits for is given back in the background, as the core's
``grant_back``: a release of the hold with the message's token, ``Client._abandon``).
``uuid.uuid4`` in ``_core`` (the request ids of give-backs) is replaced by a deterministic
unique id so that replays agree. The fair lock runs the same generators with
``fair.REDISSON_FAIR`` (or redlease's line with ``fair=True``); the read-write lock,
``_core.rwlock``'s (``rwmodel.py``).

**Ids as the client mints them.** Each simulated process imports its own fresh copy of
``redlease/_shared/state.py`` (as another process would: its own counters, its own random
prefix, its own ``ClientState`` and client id): wait ids and request ids are its
``next_request_id()``, in the order the process mints them (defect 3 runs the copy of the old
minting under ``unfixed/``).

**Explicit time.** The unit is one second (``Config.unit_ms``). Leases, TTLs and each owner's
local deadline are numbers; the adversary advances the clock (``tick``): TTLs go down and keys
expire, deadlines come closer, the owners' clocks (``clock`` of ``acquire``) move on.

**Data loss.** A replica copies the server state when the adversary says so (``sync``); a
failover makes that copy (any earlier state of the path) the server's; a restart empties the
server, fencing counter too. The server's TIME is real: it only moves forward.

**Numbers.** Fencing tokens and arrival times are server microseconds; the model keeps them as
small canonical numbers (``BASE + k * GAP``, k their rank among all such numbers of the
state), which keeps their order and keeps ``x + 1`` apart from every other number, so
equal futures meet in the visited set. A script's ``TIME`` then is above every number of the
state, as real time is above every token already handed out (and a cached step's new numbers
rank above the rest as a fresh run's would). Deadlines a layout keeps as server times (a
Redisson fair lock's places, the read-write lock's leases and places, epoch milliseconds) are
kept relative to the model's clock instead (``"@<units from now>"``) and move with it.

**Invariants** (after every step; the first violation stops the search with its trace):

* I1 exclusion: no two owners believe they hold the lock (record, not releasing, local
  deadline not passed), unless data was lost on the path (or a force release ran);
* I2 tokens: every token a server step hands out (a hold with a new ``redlease:fence``) is
  above every token handed out before for the name, across data loss; a first hold the
  client accepts carries the token handed out for that very call (owner and wait id); with
  a Java thread's ``RFencedLock`` on the same name (``Config.java``: its script from
  ``redlease/testing/lua``, run on the state as any step), every token redlease hands out is
  above Java's too, and Java's (``INCR`` of the shared key) above every token handed out
  before, unless data was lost on the path (Java's ``INCR`` has no time floor: I2j);
* I3 belief: each owner that believes it holds has its hold alive on the server with its
  token, and a TTL at least its local deadline (no data loss or force release on the path);
  an explicit lease's deadline is the call's start plus the lease asked for, a watched hold's
  its grant (or last renewal) plus the watchdog's lease, or the shorter first lease of a
  hand-over (``ClientState.granted``);
* I4 own hold: a release, renewal or re-entry never acts on (changes, lengthens, frees) a
  hold of its owner field whose token is not the one its owner holds (any path);
* I5 receipts and losses: a final release that ran is recognised by its retry (no data loss
  since), a release of a hold that is gone never answers RELEASED unless that very release
  (owner and request id) ran before, and a release or renewal of a hold that is there (its
  token, no data loss) never answers that it is gone (a false ``LeaseLostError``);
* I6 nothing stranded: a lock key always has a TTL, and a place in line belongs to a live
  wait or to one whose exit had an unknown outcome (or that a data loss brought back).

``Config.carried_receipts_expire`` admits the one exception the receipts' window documents
(``lock_release.lua``: a hold handed over that ends by expiry takes its receipts with it);
``Config.known`` admits gaps the model found that are not fixed yet, each encoded precisely.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import itertools
import sys
import time
from collections.abc import Callable, Generator, Iterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from redlease._core import fair, group, keep, rwlock, scripts
from redlease._core import lock as core
from redlease._core.fair import REDISSON_FAIR
from redlease._core.keys import CLASSIC, lock_token_key
from redlease._core.lock import Acquired, Hold, HoldTable
from redlease._core.requests import Call, Handed, Sleep, Subscribe, WaitWake
from redlease._core.watchdog import RenewalPolicy
from redlease._shared import state as _owners
from redlease._shared.channels import handed as parse_handed
from redlease._shared.channels import lost_notice
from redlease.errors import LeaseLostError, RedleaseError, ServerUnavailableError
from redlease.testing.redisson._scripts import load as load_standin

from . import unfixed
from .engine import RespError, ServerEngine

NAME = "mlock"
BASE = 10**11
GAP = 1000
GIVE_BACKS = ("_leave", "_undo")
"""Scripts the sync shell sends in the background once a call of the operation timed out
(``_connections.gives_back``)."""

JAVA_FIELD = "0000a1a0-0000-4000-8000-000000000000:1"
"""The owner field of the Java thread (``Config.java``)."""
JAVA_SCRIPT = "redisson_fenced_lock_try"
"""The model's name for the Java thread's ``RFencedLock`` script (the stand-in's own file)."""

ACQUIRE_PARAMS = frozenset(inspect.signature(core.acquire).parameters)
RELEASE_PARAMS = frozenset(inspect.signature(core.release).parameters)


# --- numbers: tokens and server times -------------------------------------------------------


def _numeric(text: str) -> bool:
    """Whether ``renumber`` takes the string ``text`` for a token or a server time."""
    return 12 <= len(text) <= 17 and text.isdigit()


def _collect(x: Any, out: set[int]) -> None:
    t = type(x)
    if t is int:
        if x >= BASE:
            out.add(x)
    elif t is str:
        if _numeric(x):
            out.add(int(x))
    elif t is frozenset or isinstance(x, tuple):
        for v in x:
            _collect(v, out)


def _rewrite(x: Any, m: dict[int, int]) -> Any:
    t = type(x)
    if t is int:
        return m.get(x, x) if x >= BASE else x
    if t is str:
        return str(m.get(int(x), x)) if _numeric(x) else x
    if t is tuple:
        return tuple(_rewrite(v, m) for v in x)
    if t is frozenset:
        return frozenset(_rewrite(v, m) for v in x)
    if isinstance(x, tuple):
        return t._make(_rewrite(v, m) for v in x)
    return x


_NUMS: dict[Any, frozenset[int]] = {}
"""The numbers of each part of a state met so far (parts recur across states)."""


def _nums(part: Any) -> frozenset[int]:
    found = _NUMS.get(part)
    if found is None:
        out: set[int] = set()
        _collect(part, out)
        found = _NUMS[part] = frozenset(out)
    return found


def renumber(st: State) -> State:
    """The state with its tokens and server times replaced by ``BASE + rank * GAP``."""
    parts = (st.server, st.replica, st.owners, st.msgs, st.ghost)
    found: set[int] = set()
    for part in parts:
        found |= _nums(part)
    m = {v: BASE + (i + 1) * GAP for i, v in enumerate(sorted(found))}
    moved = {k: v for k, v in m.items() if k != v}
    if not moved:
        return st
    keys = set(moved)
    new: list[Any] = [_rewrite(part, moved) if keys & _nums(part) else part for part in parts]
    return st._replace(server=new[0], replica=new[1], owners=new[2], msgs=new[3], ghost=new[4])


# --- processes: ids as the client mints them ------------------------------------------------

_loaded = itertools.count(1)


def _fresh_module(path: str | Path, stem: str) -> Any:
    """A fresh copy of the module at ``path``, as another process would import it."""
    name = f"redlease._shared._model_{stem}_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Process:
    """One simulated client process: its own ``_owners`` (client id, owner ids, request ids)."""

    def __init__(self, index: int, config: Config) -> None:
        self.index = index
        self.module = _fresh_module(_owners.__file__, f"owners{index}")
        self.client = self.module.ClientState(float(config.watchdog), float(config.window), None)
        minting = self.module
        if config.ids == "unfixed":
            minting = _fresh_module(Path(unfixed.HERE) / "ids.py", f"ids{index}")
        self.ids = [minting.next_request_id() for _ in range(256)]
        for _ in range(20):
            # an id of 12 to 17 decimal digits (a random prefix whose 16 hex digits are all
            # below a: about 1 process in 1,850) reads as a token or a server time to
            # renumber(), which would rewrite it in the owners' records but not inside a
            # place in line: such a process draws its prefix again, as a fresh copy of the
            # module (another process) would
            if not any(_numeric(i) for i in self.ids):
                break
            minting = _fresh_module(_owners.__file__, f"ids{index}")
            self.ids = [minting.next_request_id() for _ in range(256)]

    def owner(self) -> str:
        return str(self.client.owner(self.module.next_owner_id()))


# --- state ------------------------------------------------------------------------------------

CallT = tuple[str, tuple[str, ...], tuple[Any, ...]]
"""A call in flight: (script name, KEYS, ARGV)."""


class Rec(NamedTuple):
    """An owner's record of its holds (``HoldTable``'s ``Hold``, as values)."""

    leases: tuple[float | None, ...]
    token: int
    epoch: int
    release_id: str | None
    unsure: bool
    releasing: bool
    deadline: int
    """Units left until the owner's local lease ends (its belief)."""


class Cur(NamedTuple):
    """The operation an owner is in."""

    kind: str  # "acq" | "rel"
    letter: str  # the script letter (for a release re-sent first: the acquire's)
    id: str  # wait id (acquire) or request id (release)
    held: int
    token: int
    unsure: bool
    start: int  # units since it began
    inputs: tuple[tuple[int, str, Any], ...]  # (units ago, "s"end | "t"hrow, value)
    pending: CallT | None  # the call awaiting its reply; None: waiting for a wake-up
    net: tuple[Any, ...] | None  # None: not run yet; ("reply", value)
    registered: bool  # its waiter listens (after a Subscribe)
    mailbox: tuple[Any, ...] | None  # a hand-over message it was sent: ("H", token, ms, wait)
    leave: CallT | None  # the shell's leave for an abandoned wait
    hung: bool  # a call of it timed out (give-backs go to the background)
    settle: bool  # a release re-sent first by an acquire
    final: str | None  # "raised": the generator raised, the shell's leave is on the wire
    side: str = ""  # a read-write lock's side ("read", "write"); "" for the lock


class Renewal(NamedTuple):
    call: CallT
    sent: int  # units ago
    epoch: int
    token: int
    net: tuple[Any, ...] | None


class Owner(NamedTuple):
    op: int
    seq: int
    retries: int
    rec: Rec | None
    cur: Cur | None
    renewal: Renewal | None


class Proc(NamedTuple):
    minted: int
    listening: bool


class Ghost(NamedTuple):
    """What the invariants need to remember of the path (never lost with the data)."""

    top: int  # the highest token handed out
    issued: frozenset[tuple[int, str, str]]  # (token, owner field, wait id)
    done: frozenset[tuple[str, str, int]]  # final releases that ran: (owner, rid, losses)
    excused: frozenset[tuple[str, str]]  # waits that ended with an unknown outcome
    losses: int
    ticks: int
    dups: int
    forced: int  # force releases by another client
    abandoned: frozenset[tuple[str, str]] = frozenset()
    """Waits that gave up and whose leave is not confirmed: (owner field, wait id). A
    hand-over to one of them that nobody of its owner waits for is given back by the shell
    (``Client._abandon``)."""
    java: int = 0  # acquisitions (tries) by the Java thread's RFencedLock


class State(NamedTuple):
    server: tuple[Any, ...]
    replica: tuple[Any, ...]
    procs: tuple[Proc, ...]
    owners: tuple[Owner, ...]
    bg: tuple[tuple[Any, ...], ...]  # background give-backs: (owner, call[, meta])
    msgs: tuple[tuple[str, tuple[Any, ...], int], ...]  # (owner field, hand-over, copies)
    ghost: Ghost


def _without_bg(st: State, i: int) -> State:
    """``st`` with its background give-back ``i`` lost."""
    return st._replace(bg=st.bg[:i] + st.bg[i + 1 :])


def _without_msg(st: State, i: int) -> State:
    """``st`` with its hand-over message ``i`` lost."""
    return st._replace(msgs=st.msgs[:i] + st.msgs[i + 1 :])


@dataclasses.dataclass(frozen=True)
class Config:
    """What to explore. Script letters per owner: ``A`` acquire (blocking, with ``timeout``,
    watchdog lease), ``L`` the same with an explicit ``lease``, ``T`` a try (``blocking=False``)
    with an explicit lease, ``U`` a try with the watchdog's, ``R`` release, ``K`` a final
    release that keeps the lock taken ``keep`` units (``release(keep_for=)``)."""

    scripts: tuple[str, ...] = ("AR", "AR")
    layout: str = "redlease"
    """``redlease`` (the lock), ``redlease-fair`` (the fair lock, redlease's line),
    ``redisson-fair`` (the fair lock in Redisson's ``RedissonFairLock`` layout), ``rw`` and
    ``redisson-rw`` (the read-write lock in redlease's and Redisson's layouts: ``rwmodel.py``,
    whose script letters are its own), ``group`` (the group lock over two values:
    ``groupmodel.py``, the lock's letters)."""
    procs: tuple[int, ...] | None = None
    """The process of each owner (default: a process each)."""
    depth: int = 12
    unit_ms: int = 1000
    watchdog: int = 3
    lease: int = 2
    window: int = 1
    timeout: int | None = 2
    ticks: int = 3
    lose: bool = True
    """A call's reply (or the call) may be lost: ``ServerUnavailableError`` into the op."""
    dups: int = 1
    """How many calls of a path may run twice (reply lost, redis-py sends it again)."""
    renewals: bool = True
    messages: bool = True
    """Hand-over messages may be dropped or delivered twice (else: delivered once, late)."""
    losses: int = 0
    """Data losses (failover to the replica's copy, restart empty) on a path."""
    restart: bool = True
    force: int = 0
    """Force releases (``lock.force_release()`` by another client) on a path."""
    unsubscribe: bool = True
    release_retries: int = 1
    ids: str = "fixed"
    overrides: tuple[tuple[str, bytes], ...] = ()
    """Script name -> source run instead of ``src/redlease/lua``'s (the unfixed copies)."""
    max_states: int = 400_000
    java: int = 0
    """Tries of a Java thread's ``RFencedLock`` on the name on a path (a free lock taken with
    the model's lease, or its own re-entered: ``INCR`` of ``redisson_lock_token:{name}``);
    its hold ends by expiry."""
    counter: str = ""
    """The fencing counter redlease uses, when not the lock's own (the unfixed: redlease's
    former ``redlease:fence:{name}``, beside the Java thread's key)."""
    keep: int = 2
    """Units a ``K`` release keeps the lock taken."""
    quiet: bool = False
    """Releases publish nothing and hand nothing over (a spin lock's, ``quiet``)."""
    carried_receipts_expire: bool = True
    """The documented exception to the receipts' window (``lock_release.lua``): receipts
    carried by a hold handed over go with it when it ends by expiry (off: I5 holds them to
    the whole window anyway)."""
    known: frozenset[str] = frozenset()
    """Known gaps the model tolerates, each encoded precisely: ``leave-drops-receipts``
    (``lock_leave.lua`` giving back a hold handed over deletes the receipts it carries)."""
    skip: frozenset[str] = frozenset()
    """Invariants not checked (to look past a known violation): "I1", "I2h" (hand-outs above
    every earlier token), "I2c" (a first hold's token handed out for its call), "I3", "I4",
    "I5r" (a retry recognised), "I5g" (a gone hold never RELEASED), "I5l" (a hold that is there
    never LOST), "I6t" (TTL), "I6l" (line).
    """

    def unfixed(self, *names: str) -> Config:
        return dataclasses.replace(
            self, overrides=self.overrides + tuple((n, unfixed.script(n)) for n in names)
        )


class Violation(Exception):
    pass


def _fail(config: Config, code: str, message: str) -> None:
    if code not in config.skip:
        raise Violation(message)


class _DetUuid:
    """``uuid`` as ``_core.lock`` uses it (``uuid4().hex``), deterministic during a replay."""

    def __init__(self) -> None:
        self.prefix = "g"
        self.n = 0

    def uuid4(self) -> Any:
        self.n += 1
        return _Hex(f"{self.prefix}n{self.n}")


class _Hex:
    def __init__(self, value: str) -> None:
        self.hex = value


def _as_list(x: Any) -> Any:
    return [_as_list(v) for v in x] if isinstance(x, tuple) else x


# --- the model --------------------------------------------------------------------------------


class Model:
    keys: Any
    """The lock's keys, as its layout names them (a plain or fair lock's, a read-write lock's,
    a group lock's: set by ``setup``)."""
    times: frozenset[str]
    """The keys and fields whose values are server times (set by ``setup``)."""

    def __init__(self, config: Config, engine: ServerEngine) -> None:
        self.config = config
        self.engine = engine
        n = len(config.scripts)
        placement = config.procs or tuple(range(n))
        self.proc_of = placement
        self.processes = [Process(i, config) for i in range(max(placement) + 1)]
        self.fields = [self.processes[p].owner() for p in placement]
        self.owner_of = {f: o for o, f in enumerate(self.fields)}
        self.names = "ABCDEF"[:n]
        self.channels: list[tuple[str, ...]] = []
        """What each process listens on while it listens (its owners' waiters' channels)."""
        self.client_of: dict[str, int] = {}
        """A waiter's own channel -> its process."""
        self.setup()
        self.channel_names = frozenset(c for chs in self.channels for c in chs)
        self.sources = dict(config.overrides)
        self.sources[JAVA_SCRIPT] = load_standin("fenced_lock_try").encode()
        self.unit = config.unit_ms / 1000
        self.policy = RenewalPolicy(config.watchdog * self.unit)
        self.cache: dict[Any, Any] = {}
        self.now = 0.0
        self.gone: list[bool] = []
        self.uuid = _DetUuid()
        self.server_runs = 0
        self.renumber = False
        """Set by a step that may bring new numbers or drop some (a script run, time, a data
        loss): only then is the state renumbered (a step of an owner moves numbers only)."""

    # helpers

    def initial(self) -> State:
        n = len(self.config.scripts)
        owner = Owner(0, 0, 0, None, None, None)
        ghost = Ghost(0, frozenset(), frozenset(), frozenset(), 0, 0, 0, 0)
        procs = tuple(Proc(0, False) for _ in self.processes)
        return State((), (), procs, (owner,) * n, (), (), ghost)

    def _set(self, st: State, o: int, ow: Owner) -> State:
        owners = list(st.owners)
        owners[o] = ow
        return st._replace(owners=tuple(owners))

    def _mint(self, st: State, o: int) -> tuple[State, str]:
        p = self.proc_of[o]
        proc = st.procs[p]
        procs = list(st.procs)
        procs[p] = proc._replace(minted=proc.minted + 1)
        return st._replace(procs=tuple(procs)), self.processes[p].ids[proc.minted]

    def _listen(self, st: State, o: int) -> State:
        p = self.proc_of[o]
        procs = list(st.procs)
        procs[p] = procs[p]._replace(listening=True)
        return st._replace(procs=tuple(procs))

    @staticmethod
    def _call_t(call: Call) -> CallT:
        return (call.script.name, tuple(call.keys), tuple(call.args))

    def _clock(self) -> float:
        return self.now

    # the operations (real core generators)

    def _op(self, o: int, cur: Cur) -> Generator[Any, Any, Any]:
        keys, owner, cfg = self.keys, self.fields[o], self.config
        if cur.kind == "rel" and cur.letter == "K":
            return keep.release_keep(
                keys, owner, request_id=cur.id, token=cur.token,
                keep_ms=cfg.keep * cfg.unit_ms, unsure=cur.unsure,
            )  # fmt: skip
        if cur.kind == "rel":
            kw: dict[str, Any] = {
                "held": cur.held,
                "request_id": cur.id,
                "handover_ms": 0 if cfg.quiet else cfg.window * cfg.unit_ms,
                "unsure": cur.unsure,
            }
            if "token" in RELEASE_PARAMS:
                kw["token"] = cur.token
            if cfg.quiet:
                kw["quiet"] = True
            return core.release(keys, owner, layout=self.layout, **kw)
        watched = cur.letter in "AU"
        blocking = cur.letter in "AL"
        kw = {
            "held": cur.held,
            "lease": (cfg.watchdog if watched else cfg.lease) * self.unit,
            "blocking": blocking,
            "timeout": None if not blocking or cfg.timeout is None else cfg.timeout * self.unit,
            "wait_id": cur.id,
            "fair": self.fair,
            "layout": self.layout,
            "handover": watched,
            "clock": self._clock,
            "on_gone": lambda: self.gone.append(True),
        }
        if "token" in ACQUIRE_PARAMS:
            kw["token"] = cur.token
        return core.acquire(keys, owner, **kw)

    def _feed(self, gen: Generator[Any, Any, Any], how: str, value: Any) -> Any:
        if how == "t":
            return gen.throw(ServerUnavailableError("model: no reply in time"))
        if isinstance(value, tuple) and value and value[0] == "H":
            return gen.send(Handed(value[1], value[2], value[3]))
        return gen.send(_as_list(value))

    def _replay(self, o: int, ow: Owner) -> tuple[Generator[Any, Any, Any], Any]:
        cur = ow.cur
        assert cur is not None and cur.final is None
        self.gone = []
        self.uuid.prefix, self.uuid.n = f"g{o}s{ow.seq}", 0
        gen = self._op(o, cur)
        self.now = -cur.start * self.unit
        req = gen.send(None)
        for ago, how, value in cur.inputs:
            self.now = -ago * self.unit
            req = self._feed(gen, how, value)
        return gen, req

    # what a kind of lock changes (the read-write lock's model overrides these)

    def setup(self) -> None:
        """The layout, keys, channels and time-valued keys."""
        cfg = self.config
        self.layout = REDISSON_FAIR if cfg.layout == "redisson-fair" else core.REDLEASE
        self.fair = cfg.layout != "redlease"
        self.keys = k = self.layout.keys(NAME, CLASSIC)
        if cfg.counter:
            self.keys = k = dataclasses.replace(k, fence=cfg.counter)
        self.times = frozenset({k.places} if self.layout is REDISSON_FAIR else ())
        for p in range(len(self.processes)):
            channels: set[str] = set()
            for o, f in enumerate(self.fields):
                if self.proc_of[o] == p:
                    channel, private = self.layout.listen(k, f)
                    channels |= {channel} | ({private} if private else set())
                    if private:
                        self.client_of[private] = p
                    if k.holder_prefix:  # where a force release tells a holder's client
                        channels.add(k.holder(f))
                        self.client_of[k.holder(f)] = p
            self.channels.append(tuple(sorted(channels)))

    def held_now(self, server: tuple[Any, ...]) -> bool:
        """Something is held (a force release has something to do)."""
        return bool(self.lock_hash(server)[0])

    def tick_rec(self, rec: Any) -> Any:
        return None if rec is None else rec._replace(deadline=rec.deadline - 1)

    def side_of(self, letter: str) -> str:
        return ""

    def is_release(self, letter: str) -> bool:
        return letter in "RK"

    def watched(self, letter: str) -> bool:
        return letter in "AU"

    def describe(self, letter: str) -> str:
        return _letter(letter)

    def rec_of(self, ow: Owner, side: str) -> Rec | None:
        return ow.rec

    def put_rec(self, ow: Owner, side: str, rec: Rec | None) -> Owner:
        return ow._replace(rec=rec)

    def hold_keys(self, side: str) -> Any:
        return self.keys

    # stepping an owner

    def _start(self, st: State, o: int) -> tuple[str, State]:
        ow = st.owners[o]
        letter = self.config.scripts[o][ow.op]
        side = self.side_of(letter)
        rec = self.rec_of(ow, side)
        if self.is_release(letter):
            if rec is None or (letter == "K" and len(rec.leases) > 1):
                # nothing to release: NotOwnedError / the lease lost, raised locally; or a
                # keep of a re-entered hold: InvalidArgumentError (_shared/keep.plan_keep)
                st = self._set(st, o, ow._replace(op=ow.op + 1, seq=ow.seq + 1, retries=0))
                return "release() raises: nothing held here (or re-entered)", st
            if rec.release_id is None:
                st, rid = self._mint(st, o)
            else:
                rid = rec.release_id
            releasing = rec.releasing or len(rec.leases) == 1
            rec = rec._replace(release_id=rid, releasing=releasing)
            st = self._set(st, o, self.put_rec(ow, side, rec))
            what = "release(keep_for)" if letter == "K" else "release()"
            return f"{what} (request {rid})", self._begin(st, o, "rel", letter, rid, False)
        if rec is not None and rec.release_id is not None:
            label = f"acquire() re-sends its unknown release {rec.release_id} first"
            return label, self._begin(st, o, "rel", letter, rec.release_id, True)
        st, wait = self._mint(st, o)
        return f"{self.describe(letter)} (wait {wait})", self._begin(
            st, o, "acq", letter, wait, False
        )

    def _begin(self, st: State, o: int, kind: str, letter: str, id_: str, settle: bool) -> State:
        ow = st.owners[o]
        side = self.side_of(letter)
        rec = self.rec_of(ow, side)
        held = len(rec.leases) if rec else 0
        cur = Cur(
            kind, letter, id_, held, rec.token if rec and held else 0,
            bool(rec and rec.unsure), 0, (), None, None, False, None, None, False, settle, None,
            side,
        )  # fmt: skip
        st = self._set(st, o, ow._replace(cur=cur))
        self.gone = []
        self.uuid.prefix, self.uuid.n = f"g{o}s{ow.seq}", 0
        gen = self._op(o, cur)
        self.now = 0.0
        try:
            req = gen.send(None)
        except StopIteration as stop:
            return self._finish(st, o, cur, stop.value, None)
        return self._handle(st, o, cur, gen, req)

    def _advance(self, st: State, o: int, how: str, value: Any) -> State:
        """Feed the owner's operation a reply (or an error, or a wake-up) now."""
        ow = st.owners[o]
        cur = ow.cur
        assert cur is not None
        gen, _ = self._replay(o, ow)
        cur = cur._replace(inputs=(*cur.inputs, (0, how, value)), pending=None, net=None)
        self.now = 0.0
        try:
            req = self._feed(gen, how, value)
        except StopIteration as stop:
            return self._finish(st, o, cur, stop.value, None)
        except Exception as exc:
            return self._finish(st, o, cur, None, exc)
        return self._handle(st, o, cur, gen, req)

    def _handle(
        self, st: State, o: int, cur: Cur, gen: Generator[Any, Any, Any], req: Any
    ) -> State:
        """Answer what can be answered at once; stop at a call or a wait."""
        for _ in range(100):
            value: Any
            how, value = "s", None
            if isinstance(req, Subscribe):
                cur = cur._replace(leave=None if req.leave is None else self._call_t(req.leave))
                listening = st.procs[self.proc_of[o]].listening
                if req.only_if_live:
                    value = listening
                else:
                    st = self._listen(st, o)
                    value = True
                cur = cur._replace(registered=cur.registered or bool(value))
            elif isinstance(req, Sleep):
                value = None
            elif isinstance(req, WaitWake):
                if cur.mailbox is None:
                    return self._set(st, o, st.owners[o]._replace(cur=cur))
                value, cur = cur.mailbox, cur._replace(mailbox=None)
            elif isinstance(req, Call):
                call = self._call_t(req)
                if cur.kind == "acq" and call[0].endswith("_leave"):
                    st, cur = self._abandon(st, o, cur)
                if cur.hung and call[0].endswith(GIVE_BACKS):
                    st = st._replace(bg=(*st.bg, (o, call)))
                    how = "t"
                else:
                    cur = cur._replace(pending=call, net=None)
                    return self._set(st, o, st.owners[o]._replace(cur=cur))
            else:
                raise AssertionError(req)
            cur = cur._replace(inputs=(*cur.inputs, (0, how, value)))
            self.now = 0.0
            try:
                req = self._feed(gen, how, value)
            except StopIteration as stop:
                return self._finish(st, o, cur, stop.value, None)
            except Exception as exc:
                return self._finish(st, o, cur, None, exc)
        raise AssertionError("an operation that never waits")

    def _finish(self, st: State, o: int, cur: Cur, result: Any, exc: BaseException | None) -> State:
        ow = st.owners[o]
        field = self.fields[o]
        rec = self.rec_of(ow, cur.side)
        done = ow._replace(cur=None, op=ow.op + 1, seq=ow.seq + 1, retries=0)
        if cur.kind == "rel":
            if exc is None:
                table, hold = self._table(o, rec)
                table.released(NAME, field, int(result))
                rec = self._rec(table.get(NAME, field), rec)
                if rec is not None:
                    rec = rec._replace(release_id=None, unsure=False)
            elif isinstance(exc, LeaseLostError):
                rec = None
            elif not isinstance(exc, ServerUnavailableError):
                raise exc
            if cur.settle:
                if isinstance(exc, ServerUnavailableError):
                    # _settled_first raised: the acquire raises (_acquire_raised)
                    if rec is not None:
                        rec = rec._replace(unsure=True)
                    return self._set(st, o, self.put_rec(done, cur.side, rec))
                st = self._set(st, o, self.put_rec(ow, cur.side, rec)._replace(cur=None))
                st, wait = self._mint(st, o)
                return self._begin(st, o, "acq", cur.letter, wait, False)
            if isinstance(exc, ServerUnavailableError) and ow.retries < self.config.release_retries:
                return self._set(
                    st,
                    o,
                    self.put_rec(ow, cur.side, rec)._replace(cur=None, retries=ow.retries + 1),
                )
            return self._set(st, o, self.put_rec(done, cur.side, rec))
        # an acquire
        if exc is not None:
            unknown = isinstance(exc, ServerUnavailableError) or not isinstance(exc, RedleaseError)
            if unknown and rec is not None:
                rec = rec._replace(unsure=True)  # ClientState.maybe_reentered
            ghost = st.ghost._replace(excused=st.ghost.excused | {(field, cur.id)})
            st = st._replace(ghost=ghost)
            if cur.leave is not None:
                st, cur = self._abandon(st, o, cur)
            if cur.leave is not None and cur.hung:
                st = st._replace(bg=(*st.bg, (o, cur.leave)))
            elif cur.leave is not None:
                # the shell's finally: the leave, synchronously, its error suppressed
                cur = cur._replace(pending=cur.leave, net=None, final="raised", registered=False)
                return self._set(st, o, self.put_rec(ow, cur.side, rec)._replace(cur=cur))
            return self._set(st, o, self.put_rec(done, cur.side, rec))
        if result is None:
            if self.gone:
                rec = None  # acquire_failed(gone=True)
            return self._set(st, o, self.put_rec(done, cur.side, rec))
        assert isinstance(result, Acquired)
        if result.count == 1:
            mine = (result.token, field, cur.id)
            if mine not in st.ghost.issued:
                who = [(f, w) for t, f, w in st.ghost.issued if t == result.token]
                _fail(
                    self.config,
                    "I2c",
                    f"I2: {self.names[o]}'s acquire call {cur.id} takes token "
                    f"{result.token}, handed out for {who or 'no call'}",
                )
        watched = self.watched(cur.letter)
        lease = None if watched else float(self.config.lease)
        table, _ = self._table(o, rec)
        hold = table.granted(self.hold_keys(cur.side), field, result, lease)
        requested = result.requested_at / self.unit  # <= 0: units relative to now
        if watched:
            if rec is None or result.count == 1:
                short = result.ttl / self.unit < self.config.watchdog
                deadline = requested + (result.ttl / self.unit if short else self.config.watchdog)
            else:
                deadline = rec.deadline
        else:
            deadline = -cur.start + self.config.lease
            if rec is not None and result.count > 1:
                deadline = max(deadline, rec.deadline)
        new = Rec(
            tuple(hold.leases), hold.token, hold.epoch, None, False, False, int(deadline // 1)
        )
        if watched and self.keys.holder_prefix:
            # the client listens on its own channel of the lock while a watched hold lasts
            # (subscribed in the background: a message sent before may be lost, a move the
            # adversary has anyway)
            st = self._listen(st, o)
        return self._set(st, o, self.put_rec(done, cur.side, new))

    def _table(self, o: int, rec: Rec | None) -> tuple[HoldTable, Hold | None]:
        table = HoldTable()
        if rec is None:
            return table, None
        hold = Hold(
            keys=self.keys, owner=self.fields[o], epoch=rec.epoch, renewed_at=0.0,
            token=rec.token, leases=list(rec.leases), release_id=rec.release_id,
            unsure=rec.unsure, releasing=rec.releasing,
        )  # fmt: skip
        table._holds[(NAME, self.fields[o])] = hold
        table._epochs = itertools.count(rec.epoch + 1)
        return table, hold

    @staticmethod
    def _rec(hold: Hold | None, old: Rec | None) -> Rec | None:
        if hold is None or old is None:
            return None
        return old._replace(leases=tuple(hold.leases))

    # the server

    def _source(self, name: str) -> bytes:
        if name in self.sources:
            return self.sources[name]
        return scripts.LOADED[name].source

    def _run(self, st: State, call: CallT, meta: tuple[Any, ...]) -> tuple[State, Any]:
        """Run ``call`` on the server state; server-side invariants (I2 hand-outs, I4, I5)."""
        name, keys, args = call
        wanted = tuple(
            self.channels[p] if proc.listening else () for p, proc in enumerate(st.procs)
        )
        key = (name, st.server, keys, args, wanted)
        step = self.cache.get(key)
        if step is None:
            self.engine.listen({f"p{p}": ch for p, ch in enumerate(wanted)})
            run_keys = keys
            if name == "lock_renew" and name in self.sources:
                # the unfixed copy took the lock keys only, not their fencing counters after
                run_keys = keys[: len(keys) // 2]
            step = self.engine.run(
                st.server, self._source(name), run_keys, args, self.channel_names, self.times
            )
            self.server_runs += 1
            if isinstance(step.reply, RespError):
                raise RuntimeError(f"{name}{args}: {step.reply}")
            self.cache[key] = step
        ghost = self._server_checks(st, step.state, step.reply, meta)
        self.renumber = True
        msgs = list(st.msgs)
        copies = 2 if self.config.messages else 1
        for channel, payload in step.published:
            p = self.client_of.get(channel)
            if p is None or not st.procs[p].listening:
                continue
            notice = lost_notice(channel, payload)
            if notice is not None:  # a force release tells a holder: ("L", token)
                msgs.append((notice.owner, ("L", notice.token), copies))
                continue
            owner, _, grant = payload.partition(" ")
            h = parse_handed(grant)
            if h is not None:
                msgs.append((owner, ("H", h.token, h.lease_ms, h.wait), copies))
        return st._replace(server=step.state, msgs=tuple(msgs), ghost=ghost), step.reply

    def lock_hash(self, server: tuple[Any, ...]) -> tuple[dict[str, str], int]:
        for key, kind, ttl, value in server:
            if key == self.keys.name and kind == "hash":
                return dict(value), ttl
        return {}, -2

    def _server_checks(
        self, st: State, post: tuple[Any, ...], reply: Any, meta: tuple[Any, ...]
    ) -> Ghost:
        ghost = st.ghost
        pre_h, pre_ttl = self.lock_hash(st.server)
        post_h, post_ttl = self.lock_hash(post)
        pre_fence = int(pre_h.get("redlease:fence", 0))
        post_fence = int(post_h.get("redlease:fence", 0))
        holders = [f for f, c in post_h.items() if not f.startswith("redlease:") and int(c) > 0]
        kind, o = meta[0], meta[1]
        who = f"{self.names[o]}'s {kind}" if o >= 0 else "a force release"
        if kind == "java":
            who = "the Java thread"
        if post_fence and holders and (not pre_h or pre_fence != post_fence):
            if post_fence <= ghost.top:
                _fail(
                    self.config,
                    "I2h",
                    f"I2: {who} hands out token {post_fence}, not above {ghost.top} "
                    "already handed out",
                )
            wait = post_h.get("redlease:wait", "")
            if kind == "acq" and holders == [self.fields[o]]:
                wait = meta[3]  # made by this call (whatever the script records)
            ghost = ghost._replace(
                top=post_fence,
                issued=ghost.issued | {(post_fence, f, wait) for f in holders},
            )
        if o < 0:
            return ghost
        field = self.fields[o]
        token = meta[2] if len(meta) > 2 else 0
        if token and field in pre_h and pre_fence != token:
            same = post_fence == pre_fence and field in post_h
            changed = (
                (same and (post_h[field] != pre_h[field] or post_ttl > pre_ttl))
                or (field not in post_h and post_fence in (0, pre_fence))
                or (kind == "renew" and int(_as_list(reply)[0]) == 1)
            )
            if changed:
                _fail(
                    self.config,
                    "I4",
                    f"I4: {who} (token {token}) acts on a hold of its owner field with "
                    f"token {pre_fence}",
                )
        carried = set(pre_h.get("redlease:released", "").split())
        if (
            kind == "leave"
            and carried
            and not post_h
            and "leave-drops-receipts" in self.config.known
        ):
            # a known gap (see Config.known): the leave gives back a hold handed over with
            # the receipts it carries, and they go with it
            ghost = ghost._replace(done=frozenset(d for d in ghost.done if d[1] not in carried))
        if kind == "rel":
            rid = meta[3]
            present = field in pre_h and int(pre_h[field]) > 0 and (pre_fence == token or not token)
            code, remaining = int(reply[0]), int(reply[1])
            ran = {(f, r) for f, r, _ in ghost.done}
            if code == 1 and not present and (field, rid) not in ran:
                _fail(
                    self.config,
                    "I5g",
                    f"I5: {who} (request {rid}) of a hold that is gone answers RELEASED",
                )
            if code != 1 and (field, rid, ghost.losses) in ghost.done:
                _fail(
                    self.config,
                    "I5r",
                    f"I5: {who} (request {rid}) ran before and freed the lock, but its "
                    "retry is not recognised (LOST)",
                )
            if code == 1 and remaining == 0 and present:
                ghost = ghost._replace(done=ghost.done | {(field, rid, ghost.losses)})
            if code != 1 and present and not ghost.losses:
                _fail(
                    self.config,
                    "I5l",
                    f"I5: {who} (request {rid}) of a hold that is there answers LOST",
                )
        there = field in pre_h and pre_fence == token and not ghost.losses
        if kind == "renew" and there and int(_as_list(reply)[0]) != 1:
            _fail(self.config, "I5l", f"I5: {who} finds its hold gone, but it is there")
        if kind == "renew" and int(_as_list(reply)[0]) == 2 and not ghost.losses:
            _fail(self.config, "I5l", f"I5: {who} says the server lost data, but it did not")
        return ghost

    # the adversary and the owners: every step from a state

    def successors(self, st: State) -> Iterator[tuple[str, Callable[[], State]]]:
        cfg = self.config
        for o, ow in enumerate(st.owners):
            n = self.names[o]
            cur = ow.cur
            if cur is None:
                if ow.op < len(cfg.scripts[o]):
                    yield f"{n}: start", partial(self._labelled_start, st, o)
            elif cur.pending is not None:
                if cur.net is None:
                    yield f"{n}: server runs", partial(self._owner_run, st, o, False)
                    if st.ghost.dups < cfg.dups:
                        yield (
                            f"{n}: server runs, reply lost, sent again",
                            partial(self._owner_run, st, o, True),
                        )
                else:
                    yield f"{n}: reply arrives", partial(self._owner_reply, st, o)
                if cfg.lose:
                    yield f"{n}: no reply in time", partial(self._owner_timeout, st, o)
            else:
                yield f"{n}: wake-up (re-check)", partial(self._advance, st, o, "s", False)
            yield from self._renewal_steps(st, o)
        for i, (o, call, *_) in enumerate(st.bg):
            yield (
                f"server runs {self.names[o]}'s background {call[0]}",
                partial(self._bg_run, st, i),
            )
            yield (
                f"{self.names[o]}'s background {call[0]} is lost",
                partial(_without_bg, st, i),
            )
        for i, msg in enumerate(st.msgs):
            yield (
                f"hand-over message {msg[1][1:]} to {self._name(msg[0])} arrives",
                partial(self._deliver, st, i),
            )
            if cfg.messages:
                yield (
                    f"hand-over message to {self._name(msg[0])} is lost",
                    partial(_without_msg, st, i),
                )
        g = st.ghost
        if g.ticks < cfg.ticks:
            yield "time passes (one unit)", lambda: self._tick(st)
        if cfg.losses:
            if st.replica != st.server:
                yield "the replica copies the server", lambda: st._replace(replica=st.server)
            if g.losses < cfg.losses:
                if st.replica != st.server:
                    yield "failover to the replica's copy", lambda: self._lose(st, st.replica)
                if cfg.restart and st.server:
                    yield "the server restarts empty", lambda: self._lose(st, ())
        if g.java < cfg.java:
            yield "a Java thread's RFencedLock tries the lock", lambda: self._java(st)
        if g.forced < cfg.force and self.held_now(st.server):
            yield "another client force-releases the lock", lambda: self._force(st)
        if cfg.unsubscribe:
            for p, proc in enumerate(st.procs):
                busy = any(
                    ow.cur is not None and ow.cur.registered
                    for o, ow in enumerate(st.owners)
                    if self.proc_of[o] == p
                )
                if proc.listening and not busy:
                    yield f"process {p} stops listening", partial(self._unlisten, st, p)

    def _name(self, field: str) -> str:
        o = self.owner_of.get(field)
        return "?" if o is None else self.names[o]

    label_extra = ""

    def _labelled(self, pair: tuple[str, State]) -> State:
        self.label_extra = pair[0]
        return pair[1]

    def _labelled_start(self, st: State, o: int) -> State:
        return self._labelled(self._start(st, o))

    def _meta(self, o: int, cur: Cur) -> tuple[Any, ...]:
        name = cur.pending[0] if cur.pending else ""
        if cur.final is not None or name.endswith("_leave"):
            return ("leave", o)
        if cur.kind == "rel":
            return ("rel", o, cur.token, cur.id)
        if name.endswith("_acquire"):
            return ("acq", o, cur.token if cur.held else 0, cur.id)
        return ("give-back", o)

    def _owner_run(self, st: State, o: int, dup: bool) -> State:
        ow = st.owners[o]
        cur = ow.cur
        assert cur is not None and cur.pending is not None
        st, reply = self._run(st, cur.pending, self._meta(o, cur))
        self.label_extra = f"{cur.pending[0]}{_args(cur.pending[2])} -> {_short(reply)}"
        if dup:
            return st._replace(ghost=st.ghost._replace(dups=st.ghost.dups + 1))
        return self._set(st, o, ow._replace(cur=cur._replace(net=("reply", reply))))

    def _owner_reply(self, st: State, o: int) -> State:
        cur = st.owners[o].cur
        assert cur is not None and cur.net is not None
        if cur.kind == "acq" and cur.pending is not None and cur.pending[0].endswith("_leave"):
            # the leave is confirmed: no turn can come to that wait any more
            gone = st.ghost.abandoned - {(self.fields[o], cur.id)}
            st = st._replace(ghost=st.ghost._replace(abandoned=gone))
        if cur.final is not None:
            return self._end_final(st, o)
        return self._advance(st, o, "s", cur.net[1])

    def _owner_timeout(self, st: State, o: int) -> State:
        ow = st.owners[o]
        cur = ow.cur
        assert cur is not None
        if cur.final is not None:
            return self._end_final(st, o)
        st = self._set(st, o, ow._replace(cur=cur._replace(hung=True)))
        return self._advance(st, o, "t", None)

    def _end_final(self, st: State, o: int) -> State:
        ow = st.owners[o]
        return self._set(st, o, ow._replace(cur=None, op=ow.op + 1, seq=ow.seq + 1, retries=0))

    def _bg_run(self, st: State, i: int) -> State:
        o, call, *meta = st.bg[i]
        st = st._replace(bg=st.bg[:i] + st.bg[i + 1 :])
        st, reply = self._run(st, call, meta[0] if meta else ("leave", o))
        self.label_extra = f"{call[0]}{_args(call[2])} -> {_short(reply)}"
        return st

    def _deliver(self, st: State, i: int) -> State:
        field, h, copies = st.msgs[i]
        rest = st.msgs[:i] + st.msgs[i + 1 :]
        if copies > 1:
            rest = (*rest, (field, h, copies - 1))
        st = st._replace(msgs=rest)
        o = self.owner_of.get(field)
        if o is None:
            return st
        ow = st.owners[o]
        if h[0] == "L":
            return self._told_lost(st, o, h[1])
        cur = ow.cur
        if cur is None or cur.kind != "acq" or not cur.registered or cur.final is not None:
            if (field, h[3]) in st.ghost.abandoned:
                self.label_extra = "nobody waits, an abandoned wait's: given back"
                return self._grant_back(st, o, h)
            self.label_extra = "nobody waits: dropped"
            return st
        if cur.pending is None:  # waiting now: woken with it
            return self._advance(st, o, "s", h)
        return self._set(st, o, ow._replace(cur=cur._replace(mailbox=h)))

    def _abandon(self, st: State, o: int, cur: Cur) -> tuple[State, Cur]:
        """The shell sends the leave of the acquire ``cur`` (``Client._abandon``): until it
        is confirmed, a hand-over to that wait is given back; one that came already and was
        never taken (its mailbox) is given back now."""
        field = self.fields[o]
        st = st._replace(ghost=st.ghost._replace(abandoned=st.ghost.abandoned | {(field, cur.id)}))
        h = cur.mailbox
        if h is not None and h[0] == "H" and h[3] == cur.id:
            cur = cur._replace(mailbox=None)
            st = self._set(st, o, st.owners[o]._replace(cur=cur))
            st = self._grant_back(st, o, h)
        return st, cur

    def _grant_back(self, st: State, o: int, h: tuple[Any, ...]) -> State:
        """The shell gives back the hand-over ``h`` to an abandoned wait of ``o`` (the core's
        ``grant_back``: a release of the hold with the hand-over's token, handing the lock
        on), in the background: run any time later, or lost."""
        field = self.fields[o]
        st = st._replace(ghost=st.ghost._replace(abandoned=st.ghost.abandoned - {(field, h[3])}))
        st, rid = self._mint(st, o)
        call = self.layout.release_call(
            self.keys,
            field,
            1,
            request_id=rid,
            token=h[1],
            handover_ms=self.config.window * self.config.unit_ms,
        )
        return st._replace(bg=(*st.bg, (o, self._call_t(call), ("rel", o, h[1], rid))))

    def _told_lost(self, st: State, o: int, token: int) -> State:
        """A force release's message "lost <owner> <token>" reaches the owner's client
        (``ClientState.forced``): only its hold with that very token is lost; one being
        released is left to its release. Checked: the hold told lost is not on the server
        (tokens are unique per hold, so a message that arrives late or twice never names a
        newer hold), unless data was lost on the path (a stale copy may bring it back)."""
        ow = st.owners[o]
        rec = ow.rec
        if rec is None or rec.token != token or rec.releasing:
            self.label_extra = "no such hold: ignored"
            return st
        h, _ = self.lock_hash(st.server)
        field = self.fields[o]
        if (
            not st.ghost.losses
            and int(h.get(field, "0")) > 0
            and int(h.get("redlease:fence", "0")) == token
        ):
            _fail(self.config, "I-L", f"I-L: {self.names[o]} told hold {token} lost; it is held")
        return self._set(st, o, ow._replace(rec=None))

    def _renewal_steps(self, st: State, o: int) -> Iterator[tuple[str, Callable[[], State]]]:
        ow = st.owners[o]
        rec, ren, n = ow.rec, ow.renewal, self.names[o]
        if ren is None:
            if (
                self.config.renewals
                and rec is not None
                and any(lease is None for lease in rec.leases)
                and not rec.releasing
                and rec.deadline > 0
            ):
                yield f"{n}: the watchdog sends a renewal", lambda: self._renew_send(st, o)
            return
        if ren.net is None:
            yield f"{n}: server runs the renewal", lambda: self._renew_run(st, o)
        else:
            yield f"{n}: renewal reply arrives", lambda: self._renew_reply(st, o)
        yield f"{n}: renewal gets no reply", lambda: self._set(st, o, ow._replace(renewal=None))

    def _renew_send(self, st: State, o: int) -> State:
        ow = st.owners[o]
        rec = ow.rec
        assert rec is not None
        _, hold = self._table(o, rec)
        assert hold is not None
        [(_, call)] = self.policy.calls([hold])
        ren = Renewal(self._call_t(call), 0, rec.epoch, rec.token, None)
        return self._set(st, o, ow._replace(renewal=ren))

    def _renew_run(self, st: State, o: int) -> State:
        ren = st.owners[o].renewal
        assert ren is not None
        st, reply = self._run(st, ren.call, ("renew", o, ren.token))
        self.label_extra = f"-> {_short(reply)}"
        ow = st.owners[o]
        return self._set(st, o, ow._replace(renewal=ren._replace(net=("reply", reply))))

    def _renew_reply(self, st: State, o: int) -> State:
        ow = st.owners[o]
        ren, rec = ow.renewal, ow.rec
        assert ren is not None and ren.net is not None
        ow = ow._replace(renewal=None)
        if rec is None or rec.epoch != ren.epoch:
            return self._set(st, o, ow)
        if int(ren.net[1][0]) == 1:  # ClientState.renewal_done (0, 2: gone)
            rec = rec._replace(deadline=self.config.watchdog - ren.sent)
        elif not rec.releasing:
            rec = None  # lease_lost: the record goes, the owner is told
        return self._set(st, o, ow._replace(rec=rec))

    def _force(self, st: State) -> State:
        call = self._call_t(self.layout.force_release_call(self.keys))
        st, reply = self._run(st, call, ("force", -1))
        self.label_extra = f"-> {reply}"
        return st._replace(ghost=st.ghost._replace(forced=st.ghost.forced + 1))

    def _java(self, st: State) -> State:
        """One try of a Java thread's ``RFencedLock``: its script (the stand-in's), with the
        keys and arguments its Java code computes. A token it takes must be above every token
        handed out before, unless data was lost on the path (I2j); redlease's next must be
        above it (I2h: ``top``)."""
        lease_ms = self.config.lease * self.config.unit_ms
        call = (JAVA_SCRIPT, (NAME, lock_token_key(NAME)), (lease_ms, JAVA_FIELD))
        st, reply = self._run(st, call, ("java", -1))
        ttl, token = (int(x) for x in _as_list(reply))
        self.label_extra = f"-> {ttl} {token}"
        g = st.ghost._replace(java=st.ghost.java + 1)
        if ttl == -1:
            if token <= g.top and not g.losses:
                _fail(
                    self.config,
                    "I2j",
                    f"I2: the Java thread's RFencedLock takes token {token}, not above "
                    f"{g.top} already handed out",
                )
            g = g._replace(top=max(g.top, token))
        return st._replace(ghost=g)

    def _unlisten(self, st: State, p: int) -> State:
        procs = list(st.procs)
        procs[p] = procs[p]._replace(listening=False)
        return st._replace(procs=tuple(procs))

    def _lose(self, st: State, server: tuple[Any, ...]) -> State:
        """A failover to ``server`` (the replica's copy) or a restart (empty). Places in line
        that the copy brings back (of waits over, or that end with their grant on the lost
        master) lapse as dead places do (their turn comes, or a free lock meets them):
        excused."""
        self.renumber = True
        g = st.ghost
        excused = g.excused | set(self.places(server))
        ghost = g._replace(losses=g.losses + 1, excused=frozenset(excused))
        return st._replace(server=server, replica=server, ghost=ghost)

    def _live(self, st: State, field: str, wait: str) -> bool:
        """The acquire call ``wait`` of ``field`` is under way (``*``: any of its calls)."""
        o = self.owner_of.get(field)
        if o is None:
            return False
        cur = st.owners[o].cur
        return cur is not None and cur.kind == "acq" and wait in (cur.id, "*")

    def places(self, server: tuple[Any, ...]) -> list[tuple[str, str]]:
        """The places in line: (owner field, wait id; ``*`` where the layout names none)."""
        out: list[tuple[str, str]] = []
        for key, kind, _, value in server:
            if key == self.keys.line and kind == "zset":  # redlease's line
                out += [(m.split(" ")[0], m.split(" ")[1]) for m, _ in value]
            elif key == self.keys.line and kind == "list":  # Redisson's line
                out += [(member, "*") for member in value]
            elif key == self.keys.places and kind == "zset" and self.times:
                out += [(member, "*") for member, _ in value]  # Redisson's places
        return out

    def _tick(self, st: State) -> State:
        self.renumber = True

        def later(value: Any) -> Any:  # a server time relative to now ("@<units>")
            if isinstance(value, tuple):
                return tuple(later(v) for v in value)
            if isinstance(value, str) and value.startswith("@"):
                return f"@{int(value[1:]) - 1}"
            return value

        def keys(server: tuple[Any, ...]) -> tuple[Any, ...]:
            out = []
            for key, kind, ttl, value in server:
                if ttl > 1 or ttl == -1:
                    value = later(value) if key in self.times else value
                    out.append((key, kind, ttl if ttl == -1 else ttl - 1, value))
            return tuple(out)

        owners = []
        for ow in st.owners:
            rec, cur, ren = self.tick_rec(ow.rec), ow.cur, ow.renewal
            if cur is not None:
                cur = cur._replace(
                    start=cur.start + 1, inputs=tuple((a + 1, h, v) for a, h, v in cur.inputs)
                )
            if ren is not None:
                ren = ren._replace(sent=ren.sent + 1)
            owners.append(ow._replace(rec=rec, cur=cur, renewal=ren))
        g = st.ghost._replace(ticks=st.ghost.ticks + 1)
        server = keys(st.server)
        h, _ = self.lock_hash(st.server)
        if h and not self.lock_hash(server)[0] and self.config.carried_receipts_expire:
            # the documented exception (lock_release.lua): a hold handed over that ends by
            # expiry takes the receipts it carries with it
            carried = set(h.get("redlease:released", "").split())
            g = g._replace(done=frozenset(d for d in g.done if d[1] not in carried))
        return st._replace(server=server, replica=keys(st.replica), owners=tuple(owners), ghost=g)

    # invariants on a state

    def check(self, st: State) -> None:
        g = st.ghost
        h, ttl = self.lock_hash(st.server)
        if h and ttl == -1:
            _fail(self.config, "I6t", "I6: the lock key has no TTL")
        for owner, wait in self.places(st.server):
            excused = (owner, wait) in g.excused or (
                wait == "*" and any(f == owner for f, _ in g.excused)
            )
            if not excused and not self._live(st, owner, wait):
                _fail(
                    self.config,
                    "I6l",
                    f"I6: {self._name(owner)}'s place in line (wait {wait}) outlives its wait",
                )
        if g.losses or g.forced:
            return  # a lost write or a force release breaks exclusion by design
        believers = [
            o
            for o, ow in enumerate(st.owners)
            if ow.rec is not None and not ow.rec.releasing and ow.rec.deadline > 0
        ]
        if len(believers) > 1:
            _fail(
                self.config,
                "I1",
                "I1: " + " and ".join(self.names[o] for o in believers) + " both believe they "
                "hold the lock",
            )
        fence = int(h.get("redlease:fence", 0))
        for o in believers:
            rec = st.owners[o].rec
            assert rec is not None
            field = self.fields[o]
            if field not in h or fence != rec.token or ttl < rec.deadline:
                server = f"count {h.get(field)}, token {fence}, TTL {ttl}" if h else "no hold"
                _fail(
                    self.config,
                    "I3",
                    f"I3: {self.names[o]} believes it holds (token {rec.token}, "
                    f"{rec.deadline} units left) but the server has {server}",
                )


def _letter(letter: str) -> str:
    return {
        "A": "acquire(timeout) (watchdog)",
        "L": "acquire(timeout, lease)",
        "T": "acquire(blocking=False, lease)",
        "U": "acquire(blocking=False) (watchdog)",
    }[letter]


def _short(reply: Any) -> str:
    return str(reply).replace(" ", "")


def _args(args: tuple[Any, ...]) -> str:
    return "(" + ",".join(str(a).split(":")[-1][:12] for a in args) + ")"


# --- the explorer -----------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    states: int
    depth: int
    seconds: float
    server_runs: int
    server_seconds: float
    violation: str | None = None
    trace: list[str] = dataclasses.field(default_factory=list)

    def report(self) -> str:
        head = (
            f"{self.states} states, depth {self.depth}, {self.seconds:.1f} s "
            f"({self.server_runs} script runs on the server, {self.server_seconds:.1f} s)"
        )
        if self.violation is None:
            return head + ": no violation"
        steps = "\n".join(f"  {i + 1:2}. {step}" for i, step in enumerate(self.trace))
        return f"{head}\nviolation: {self.violation}\ntrace:\n{steps}"


def explore(config: Config, engine: ServerEngine) -> Result:
    """Breadth-first over every interleaving up to ``config.depth`` steps, each state once;
    stops at the first violation (a shortest counterexample) and returns its trace."""
    if config.layout in ("rw", "redisson-rw"):
        from .rwmodel import RwModel

        model: Model = RwModel(config, engine)
    elif config.layout == "group":
        from .groupmodel import GroupModel

        model = GroupModel(config, engine)
    else:
        model = Model(config, engine)
    _NUMS.clear()
    patched = [m for m in (core, fair, rwlock, group) if hasattr(m, "uuid")]
    saved = [m.uuid for m in patched]
    for m in patched:
        m.uuid = model.uuid  # type: ignore[attr-defined]
    began = time.monotonic()
    runs0, secs0 = engine.steps, engine.seconds
    try:
        start = model.initial()
        parent: dict[State, tuple[State | None, str]] = {start: (None, "")}
        frontier = [start]
        depth = 0

        def result(violation: str | None = None, trace: list[str] | None = None) -> Result:
            return Result(
                len(parent), depth, time.monotonic() - began, engine.steps - runs0,
                engine.seconds - secs0, violation, trace or [],
            )  # fmt: skip

        while frontier and depth < config.depth and len(parent) < config.max_states:
            depth += 1
            nxt: list[State] = []
            for st in frontier:
                for label, make in model.successors(st):
                    model.label_extra = ""
                    model.renumber = False
                    try:
                        new = make()
                        if model.renumber:
                            new = renumber(new)
                        if new in parent:
                            continue
                        model.check(new)
                    except Violation as v:
                        full = label + (f": {model.label_extra}" if model.label_extra else "")
                        return result(str(v), [*_trace(parent, st), full])
                    full = label + (f": {model.label_extra}" if model.label_extra else "")
                    parent[new] = (st, full)
                    nxt.append(new)
            frontier = nxt
        return result()
    finally:
        for m, old in zip(patched, saved, strict=True):
            m.uuid = old  # type: ignore[attr-defined]


def _trace(parent: dict[State, tuple[State | None, str]], st: State) -> list[str]:
    steps: list[str] = []
    cur: State | None = st
    while cur is not None:
        prev, label = parent[cur]
        if prev is not None:
            steps.append(label)
        cur = prev
    return steps[::-1]


__all__ = ["Config", "Model", "Result", "Violation", "explore"]
