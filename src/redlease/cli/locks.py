"""``redlease status``, ``list`` and ``release --force``: locks seen from outside.

A key is a lock when it is a hash whose fields are all Redisson owner fields
(``<36-character uuid>:<digits>``) with positive hold counts, apart from redlease's own fields
(``redlease:fence``, ``redlease:wait``: everything under ``redlease:``); a lock kept taken
after its release (``release(keep_for=)``) has the field ``<owner>:kept`` instead of a
holder's, and is shown as kept, by that owner, with the time left. The shape is read in
one ``MULTI`` (TYPE, a bounded HSCAN, PTTL) before anything else touches the key, so ``status``
never misreads a user's hash and ``release --force`` never deletes a key that is not a lock.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

import redis
import redis.exceptions

from .._core.keys import FENCE_FIELD, KEPT_SUFFIX, kept_by
from .._redis.connections import describe
from .._redis.errors import raise_translated
from .._redis.servers import describe as describe_policy
from .._sync.client import Client
from ..stats import EvictionPolicy, HolderInfo
from .common import PROG, CommandError, UsageError, add_url_option, connect, int_range, server_url

if TYPE_CHECKING:
    from .common import Commands

__all__ = ["LockView", "force_release", "list_locks", "status"]

OWNER_FIELD = re.compile(
    rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}:[0-9]+"
)
KEPT_FIELD = re.compile(OWNER_FIELD.pattern + re.escape(KEPT_SUFFIX.encode()))
OWN_FIELDS = b"redlease:"
"""Prefix of the fields redlease keeps in a lock hash besides its holders (the hold's lease,
fencing token): never holders (the same rule as ``Lock.statistics()``)."""
SHAPE_FIELDS = 64
"""HSCAN COUNT of the shape check: a lock has a field or two; a hash that does not fit in one
HSCAN reply of this size is not a lock."""
SCAN_COUNT = 1000
MAX_SCAN_CALLS = 10_000
"""``list`` stops after this many SCAN calls (about ten million keys looked at)."""


@dataclass(frozen=True)
class LockView:
    """A lock as ``status`` and ``list`` show it."""

    name: str
    ttl: float | None
    """Seconds left on the lease; ``None`` when free, ``inf`` when the key has no expiry."""
    holders: dict[str, int]
    fencing_token: int | None = None
    """The current hold's token (``None`` when free or unknown)."""
    waiters: int | None = None
    """Waiters in line on the server (``None`` when not read: a name no lock can have)."""
    server: EvictionPolicy | None = None
    """What the server does with lock keys when memory runs short."""
    holder_info: dict[str, HolderInfo] = dataclass_field(default_factory=dict)
    """Who each holder (and the owner in ``kept_by``) is (host, pid, process, description),
    by owner."""
    kept_by: str | None = None
    """The owner whose ``release(keep_for=)`` keeps the lock taken, by nobody, for ``ttl``
    more seconds (``holders`` is then empty); ``None`` when not kept."""

    @property
    def locked(self) -> bool:
        return self.ttl is not None

    @property
    def owners(self) -> list[str]:
        """The holders, and the owner that kept the lock: whose records are shown."""
        return [*self.holders, *([self.kept_by] if self.kept_by else [])]

    def as_json(self) -> dict[str, Any]:
        ttl = None if self.ttl is None else (-1 if math.isinf(self.ttl) else round(self.ttl, 3))
        out: dict[str, Any] = {
            "name": self.name,
            "locked": self.locked,
            "ttl": ttl,
            "holders": self.holders,
            "kept_by": self.kept_by,
            "holder_info": {
                owner: self.holder_info.get(owner, HolderInfo()).as_json() for owner in self.owners
            },
        }
        out["fencing_token"] = self.fencing_token
        out["waiters"] = self.waiters
        if self.server is not None:
            out["server"] = server_json(self.server)
        return out

    def line(self) -> str:
        name = printable(self.name)
        if self.ttl is None:
            return f"{name}: free"
        if self.kept_by is not None:
            held = (
                f"kept after its release by {self.kept_by}{who(self.holder_info.get(self.kept_by))}"
            )
        else:
            held = "held by " + ", ".join(
                f"{owner} ({count} hold{'' if count == 1 else 's'})"
                f"{who(self.holder_info.get(owner))}"
                for owner, count in self.holders.items()
            )
        ttl = "no expiry" if math.isinf(self.ttl) else f"ttl {self.ttl:.1f} s"
        extra = ""
        if self.fencing_token is not None:
            extra += f", fencing token {self.fencing_token}"
        if self.waiters:
            extra += f", {self.waiters} waiting"
        return f"{name}: {held}, {ttl}{extra}"


def who(info: HolderInfo | None) -> str:
    """A holder's record as ``status`` shows it after its owner: `` [host pid N process:
    info]``, or nothing when its client left none."""
    if info is None or info == HolderInfo():
        return ""
    parts = [printable(info.host or "?")]
    if info.pid is not None:
        parts.append(f"pid {info.pid}")
    if info.process:
        parts.append(printable(info.process))
    text = " ".join(parts)
    if info.info:
        text += f": {printable(info.info)}"
    return f" [{text}]"


def server_json(policy: EvictionPolicy) -> dict[str, Any]:
    """A server's eviction policy as ``status --json`` and ``list --json`` show it."""
    return {
        "address": policy.address,
        "maxmemory_policy": policy.policy,
        "maxmemory": policy.maxmemory,
        "evictable": policy.evictable,
    }


def server_line(policy: EvictionPolicy) -> str:
    """The first line of ``status`` and ``list``: the server and what it does with lock keys."""
    return f"server {policy.address}: {describe_policy(policy)}"


def _policy(client: Client) -> EvictionPolicy:
    (policy,) = client.eviction_policies()  # not a cluster: one server
    return policy


def printable(name: str) -> str:
    """A name as printed: as is, or quoted with escapes when it has control characters."""
    return name if name.isprintable() else ascii(name)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _probe(pipe: Any, key: str | bytes) -> None:
    pipe.type(key)
    pipe.hscan(key, 0, count=SHAPE_FIELDS)
    pipe.pttl(key)


def _classify(name: str, kind: Any, scanned: Any, pttl: Any) -> LockView | str:
    """The lock at ``name`` from its TYPE, HSCAN and PTTL replies, or why it is not a lock."""
    kind = _text(kind)
    if kind == "none":
        return LockView(name, None, {})
    if kind != "hash":
        return f"{printable(name)!r} is a {kind} key, not a lock"
    if isinstance(scanned, Exception):
        return f"{printable(name)!r} could not be read: {scanned}"
    cursor, fields = scanned
    if int(cursor) != 0:
        return f"{printable(name)!r} is a hash with many fields, not a lock"
    holders: dict[str, int] = {}
    kept: list[str] = []
    token: int | None = None
    for field, value in fields.items():
        if bytes(field) == FENCE_FIELD.encode() and _text(value).isdigit():
            token = int(_text(value))
        if bytes(field).startswith(OWN_FIELDS):
            continue  # e.g. the fencing token or the hold's recorded lease: not a holder
        count = _text(value)
        owner = OWNER_FIELD.fullmatch(field) or KEPT_FIELD.fullmatch(field)
        if not owner or not count.isdigit() or int(count) <= 0:
            return f"{printable(name)!r} is a hash whose fields are not lock owners, not a lock"
        keeper = kept_by(_text(field))
        if keeper is not None:
            kept.append(keeper)
        else:
            holders[_text(field)] = int(count)
    if not (holders or kept) or int(pttl) == -2:
        return LockView(name, None, {})
    ttl = math.inf if int(pttl) == -1 else int(pttl) / 1000
    return LockView(
        name,
        ttl,
        dict(sorted(holders.items())),
        fencing_token=token,
        kept_by=None if holders else min(kept),
    )


def _shapes(r: redis.Redis, names: Sequence[str]) -> list[LockView | str]:
    """Each name's lock (held or free) or why it is not one, read in one MULTI."""
    if not names:
        return []
    try:
        with r.pipeline(transaction=True) as pipe:
            for name in names:
                _probe(pipe, name)
            replies = pipe.execute(raise_on_error=False)
    except redis.exceptions.ResponseError as exc:  # a user the server denies TYPE or HSCAN
        raise_translated(exc, describe(r), names[0] if len(names) == 1 else None)
    return [_classify(name, *replies[3 * i : 3 * i + 3]) for i, name in enumerate(names)]


def _read(client: Client, name: str) -> LockView:
    """The lock ``name`` (shape checked raw, state read by ``Lock.statistics()``), or a
    ``CommandError`` when the key is not a lock."""
    shape = _shapes(client.redis, [name])[0]
    if isinstance(shape, str):
        raise CommandError(shape)
    try:
        stats = client.lock(name).statistics()
    except ValueError as exc:  # a name the lock API refuses (braces that are no hash tag)
        raise CommandError(f"{printable(name)!r} cannot be a lock name: {exc}") from None
    except redis.exceptions.ResponseError as exc:  # replaced by a non-lock meanwhile
        raise CommandError(f"{printable(name)!r} is not a lock: {exc}") from None
    return LockView(
        name,
        stats.ttl,
        dict(sorted(stats.holders.items())),
        fencing_token=stats.fencing_token,
        waiters=stats.waiters,
        holder_info=dict(stats.holder_info),
        kept_by=stats.kept_by,
    )


def _say(text: str) -> None:
    print(text, flush=True)


def _error(text: str) -> None:
    print(f"{PROG}: error: {' '.join(text.split())}", file=sys.stderr, flush=True)


def _note(text: str) -> None:
    print(f"{PROG}: {' '.join(text.split())}", file=sys.stderr, flush=True)


def _connected(target: str | Client) -> contextlib.AbstractContextManager[Client]:
    """A client on the URL ``target`` (closed after; its eviction policy is shown, not warned
    about; it writes no holder record: it holds nothing, and a monitor running status every
    minute would leave a record per run for 90 minutes), or the client ``target`` (left
    open)."""
    if isinstance(target, str):
        client = connect(target, eviction="ignore")
        client._checks.records = False
        return client
    return contextlib.nullcontext(target)


def status(target: str | Client, names: Sequence[str], *, as_json: bool) -> int:
    """Print each lock's state; exit 1 when a name is not a lock (the others are printed)."""
    views: list[LockView] = []
    failed = False
    with _connected(target) as client:  # shown below, not warned about
        server = _policy(client)
        for name in names:
            try:
                views.append(replace(_read(client, name), server=server))
            except CommandError as exc:
                _error(str(exc))
                failed = True
    if as_json:
        _say(json.dumps([v.as_json() for v in views], indent=2))
    else:
        _say(server_line(server))
        for view in views:
            _say(view.line())
    return 1 if failed else 0


def list_locks(target: str | Client, pattern: str, *, limit: int, as_json: bool) -> int:
    """Print the held locks among the keys matching ``pattern`` (SCAN, bounded)."""
    found: list[LockView] = []
    calls = looked_at = 0
    complete = True
    with _connected(target) as client:
        server = _policy(client)
        r = client.redis
        cursor = 0
        while len(found) <= limit:
            cursor, keys = r.scan(cursor=cursor, match=pattern, count=SCAN_COUNT)
            calls += 1
            looked_at += len(keys)
            found.extend(_held_among(r, keys))
            if int(cursor) == 0:
                break
            if calls >= MAX_SCAN_CALLS:
                complete = False
                break
        more = len(found) > limit
        found = [_with_line(client, v) for v in found[:limit]]
        infos = client._holder_infos({owner for v in found for owner in v.owners})
    found = sorted(
        (replace(v, server=server, holder_info=infos) for v in found), key=lambda v: v.name
    )
    if as_json:
        _say(json.dumps([v.as_json() for v in found], indent=2))
    else:
        _say(server_line(server))
        for view in found:
            _say(view.line())
        if not found and complete:
            _note(f"no locks matching {pattern!r}")
    if more:
        _note(
            f"showing the first {limit} lock{'' if limit == 1 else 's'} found"
            f" (--limit {limit}); there are more"
        )
    elif not complete:
        _note(
            f"stopped after {calls} SCAN calls ({looked_at} keys looked at): the list may be"
            " incomplete; narrow it with a PATTERN"
        )
    return 0


def _with_line(client: Client, view: LockView) -> LockView:
    """``view`` with its waiters and fencing token read as ``status`` reads them (one round
    trip), so that ``list`` and ``status`` show a lock alike."""
    try:
        now = client.lock(view.name)._status()
    except (ValueError, redis.exceptions.ResponseError):  # no lock name, or replaced meanwhile
        return view
    return replace(view, waiters=now.waiters, fencing_token=now.token)


def _held_among(r: redis.Redis, keys: Sequence[bytes | str]) -> list[LockView]:
    names: list[str] = []
    for key in keys:
        try:
            names.append(key.decode() if isinstance(key, bytes) else key)
        except UnicodeDecodeError:
            continue  # not a name a lock client could have used
    return [v for v in _shapes(r, names) if isinstance(v, LockView) and v.locked]


def _confirm(question: str) -> bool:
    print(question, end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in {"y", "yes"}


def force_release(target: str | Client, name: str, *, yes: bool) -> int:
    """Delete the lock ``name`` whoever holds it (after confirmation unless ``yes``)."""
    if not yes and not sys.stdin.isatty():
        raise UsageError(
            f"not force-releasing lock {printable(name)!r} without confirmation: stdin is not"
            " a terminal (add --yes)"
        )
    with _connected(target) as client:
        view = _read(client, name)
        if not view.locked:
            raise CommandError(f"lock {printable(name)!r} is not held: nothing to release")
        if not yes and not _confirm(f"force-release {view.line()}? [y/N] "):
            _note("not released")
            return 1
        if not client.lock(name).force_release():
            raise CommandError(f"lock {printable(name)!r} was released meanwhile: nothing to do")
    by = ", ".join(f"{owner}{who(view.holder_info.get(owner))}" for owner in view.owners)
    was = "kept after its release by" if view.kept_by is not None else "held by"
    _say(f"released lock {printable(name)} (it was {was} {by})")
    return 0


# --- the command's arguments ------------------------------------------------------------


def _server(args: argparse.Namespace) -> str | Client:
    """The client given to ``main(client=...)``, else the URL of ``--url`` or the environment."""
    given: Client | None = getattr(args, "client", None)
    return given if given is not None else server_url(args)


def _cmd_status(args: argparse.Namespace) -> int:
    return status(_server(args), args.names, as_json=args.json)


def add_status(commands: Commands) -> None:
    parser = commands.add_parser(
        "status",
        help="show whether locks are held, by whom, and for how long",
        description="For each NAME: held or free, the holders with their hold counts, and the"
        " lease left (TTL). Exit 1 if a NAME is a key that is not a lock.",
    )
    parser.add_argument("names", nargs="+", metavar="NAME", help="a lock (its Redis key)")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print a JSON list of {"name", "locked", "ttl", "holders"} (ttl in seconds,'
        " null when free, -1 when the key has no expiry; holders: owner -> hold count)",
    )
    add_url_option(parser)
    parser.set_defaults(handler=_cmd_status)


def _cmd_list(args: argparse.Namespace) -> int:
    return list_locks(_server(args), args.pattern, limit=args.limit, as_json=args.json)


def add_list(commands: Commands) -> None:
    parser = commands.add_parser(
        "list",
        help="list the locks held now (found with SCAN, never KEYS)",
        description="List the held locks whose names match PATTERN, found with SCAN: a key"
        " counts as a lock when it is a hash whose fields are all '<uuid>:<number>' owners"
        " (the Redisson layout). Stops at --limit locks and after a bounded number of SCAN"
        " calls (a note on stderr says when).",
    )
    parser.add_argument(
        "pattern",
        nargs="?",
        default="*",
        metavar="PATTERN",
        help="a SCAN MATCH glob, e.g. 'jobs:*' (default: every key)",
    )
    parser.add_argument(
        "--limit",
        type=int_range(1, 1_000_000),
        default=1000,
        metavar="N",
        help="show at most N locks (default 1000)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list, as status does")
    add_url_option(parser)
    parser.set_defaults(handler=_cmd_list)


def _cmd_release(args: argparse.Namespace) -> int:
    return force_release(_server(args), args.name, yes=args.yes)


def add_release(commands: Commands) -> None:
    parser = commands.add_parser(
        "release",
        help="force-release a lock whoever holds it (wakes its waiters)",
        usage=f"{PROG} release --force [--yes] [--url URL] NAME",
        description="Delete the lock NAME whoever holds it and wake its waiters. A redlease"
        " holder whose lease its watchdog renews is told at once, on its client's own channel"
        " of the lock (its on_lease_lost runs; `redlease run` stops its command); should that"
        " message be lost, or for another holder, it learns only when its watchdog or its"
        " release finds the lock gone, so it may still be running. Asks for confirmation"
        " unless --yes. Exit 0 when the lock was held and is now released, 1 when it was free"
        " (or is not a lock).",
    )
    parser.add_argument("name", metavar="NAME", help="the lock (its Redis key)")
    parser.add_argument(
        "--force",
        action="store_true",
        required=True,
        help="required: the only release possible from outside is a forced one",
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="do not ask for confirmation (needed when stdin is not a terminal)",
    )
    add_url_option(parser)
    parser.set_defaults(handler=_cmd_release)
