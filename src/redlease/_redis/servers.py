"""What a client learns about each server at its first use (no I/O here): whether the server's
eviction policy may delete a held lock's key, and what to do about it (warn, refuse, ignore).

Every lock key has a TTL. Under a ``volatile-*`` policy the server evicts keys with a TTL when
it reaches ``maxmemory``; under an ``allkeys-*`` policy any key. A lock key evicted while held
is a lock free for another holder, and nobody is told. ``noeviction`` (the server's default)
refuses writes instead. ``maxmemory 0`` means no limit on a 64-bit server: nothing is evicted
while it stays 0 (a 32-bit server reports an implicit 3 GB limit with ``noeviction``
instead), so a policy that would evict is not warned about then; ``status`` still shows it.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import EvictionPolicyError, InvalidArgumentError, RedleaseWarning
from ..stats import EvictionPolicy

log = logging.getLogger("redlease")

Eviction = Literal["warn", "refuse", "ignore"]
EVICTION_MODES = ("warn", "refuse", "ignore")

RECHECK = 1800.0
"""Seconds after which a client in use reads its servers' policies again (and rewrites its
holder record, see ``_shared/holders.py``): one round trip per half hour per client, never
per call."""
RETRY_AFTER_OUTAGE = 30.0
"""Seconds before a check that could not reach the server is tried again (the operation it
came with goes on as it would have without it)."""

CONFIG_PATTERN = "maxmemory*"
"""One ``CONFIG GET`` that gives both ``maxmemory`` and ``maxmemory-policy`` (Redis 6.2 takes
a single pattern)."""


def eviction_mode(value: Any) -> Eviction:
    if value not in EVICTION_MODES:
        raise InvalidArgumentError(
            f"eviction must be one of 'warn', 'refuse', 'ignore', got {value!r}"
        )
    mode: Eviction = value
    return mode


def evictable(policy: str | None, maxmemory: int | None) -> bool | None:
    """Whether a lock key (which has a TTL) may be evicted: ``None`` when not known."""
    if policy is None:
        return None
    if policy == "noeviction":
        return False
    if maxmemory == 0:
        return False  # no limit: nothing is evicted (see the module's docstring)
    if policy.startswith(("volatile-", "allkeys-")):
        return True
    return None  # a policy this version does not know


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _number(value: Any) -> int | None:
    try:
        return int(_text(value))
    except ValueError:
        return None


def from_config(reply: Any) -> tuple[str | None, int | None]:
    """(policy, maxmemory) from a ``CONFIG GET maxmemory*`` reply (a dict, or a flat list)."""
    if isinstance(reply, Mapping):
        pairs = {_text(k): v for k, v in reply.items()}
    elif isinstance(reply, (list, tuple)):
        pairs = {_text(k): v for k, v in zip(reply[::2], reply[1::2], strict=False)}
    else:
        return None, None
    return _policy_and_limit(pairs.get("maxmemory-policy"), pairs.get("maxmemory"))


def from_info(reply: Any) -> tuple[str | None, int | None]:
    """(policy, maxmemory) from an ``INFO memory`` reply (parsed by redis-py, or raw text)."""
    if isinstance(reply, (bytes, str)):
        fields = {}
        for line in _text(reply).splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        reply = fields
    if not isinstance(reply, Mapping):
        return None, None
    return _policy_and_limit(reply.get("maxmemory_policy"), reply.get("maxmemory"))


def _policy_and_limit(policy: Any, maxmemory: Any) -> tuple[str | None, int | None]:
    """The policy as text and maxmemory as a number, each ``None`` when not given."""
    return (
        None if policy is None else _text(policy),
        None if maxmemory is None else _number(maxmemory),
    )


def policy_of(address: str, config: Any, info: Any, *, denied: bool = False) -> EvictionPolicy:
    """The ``EvictionPolicy`` of ``address`` from what ``CONFIG GET`` answered (an exception
    when refused) and, when that did not tell, what ``INFO memory`` answered."""
    if not isinstance(config, BaseException) and config is not None:
        policy, maxmemory = from_config(config)
        if policy is not None:
            evicts = evictable(policy, maxmemory)
            return EvictionPolicy(address, policy, maxmemory, evicts, "config")
    if not isinstance(info, BaseException) and info is not None:
        policy, maxmemory = from_info(info)
        if policy is not None:
            evicts = evictable(policy, maxmemory)
            return EvictionPolicy(address, policy, maxmemory, evicts, "info")
    return EvictionPolicy(address, None, None, None, None)


def _size(maxmemory: int | None) -> str:
    if maxmemory is None:
        return "unknown"
    if maxmemory == 0:
        return "0 (no limit)"
    for unit, scale in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if maxmemory >= scale and maxmemory % scale == 0:
            return f"{maxmemory // scale}{unit}"
    return f"{maxmemory} bytes"


def describe(policy: EvictionPolicy) -> str:
    """One line on what the server does with lock keys (``status``, warnings, errors)."""
    if policy.policy is None:
        return "eviction policy unknown (CONFIG GET and INFO memory were not allowed)"
    limit = _size(policy.maxmemory)
    head = f"maxmemory-policy {policy.policy}, maxmemory {limit}"
    if policy.evictable is None:
        return f"{head}: whether lock keys can be evicted is unknown"
    if not policy.evictable:
        if policy.policy != "noeviction":
            return f"{head}: lock keys are not evicted while maxmemory stays 0"
        return f"{head}: lock keys are never evicted"
    return f"{head}: lock keys can be evicted"


def warning_text(policy: EvictionPolicy) -> str:
    kind = "any key" if (policy.policy or "").startswith("allkeys-") else "keys with an expiry"
    return (
        f"redis server {policy.address} may evict {kind} when memory runs short "
        f"({describe(policy)}): a held lock's key can be deleted and the lock taken by a "
        "second holder, with nobody told. Set maxmemory-policy to noeviction, or keep locks "
        "on a server of their own (see redlease's operations guide); Client(eviction='ignore')"
        " silences this, eviction='refuse' refuses such a server."
    )


@dataclass
class ServerChecks:
    """A client's first-use checks of its servers: when the next is due, what each server
    said, which were warned about."""

    mode: Eviction
    due: float = 0.0
    """``time.monotonic()`` at which the next policy check is due (0: at the next operation)."""
    record_at: float = 0.0
    """``time.monotonic()`` at which the client's holder record is due to be (re)written."""
    records: bool = True
    """Whether the client keeps a holder record at all (not a client that only looks: the
    ``redlease status``, ``list`` and ``release`` commands hold nothing to describe)."""
    policies: dict[str, EvictionPolicy] = field(default_factory=dict)
    warned: set[tuple[str, str]] = field(default_factory=set)
    """(address, policy) pairs warned about: once per client and server (a failover to a
    server with the same policy is not warned about again)."""

    def is_due(self) -> bool:
        now = time.monotonic()
        return now >= self.due or (self.records and now >= self.record_at)

    def policy_due(self) -> bool:
        return time.monotonic() >= self.due

    def record_due(self) -> bool:
        return self.records and time.monotonic() >= self.record_at

    def again_soon(self) -> None:
        """Check at the next operation (a script reload: a restarted or failed-over server,
        whose data may be gone too; a forked child: a process of its own)."""
        self.due = 0.0
        self.record_at = 0.0

    def record_written(self, refused: BaseException | None = None) -> None:
        if refused is not None:
            log.debug("holder record not written (%s): status shows no host or pid", refused)
        self.record_at = time.monotonic() + RECHECK

    def record_unreachable(self, exc: BaseException) -> None:
        log.debug("holder record not written (%s): tried again later", exc)
        self.record_at = time.monotonic() + RETRY_AFTER_OUTAGE

    def unreachable(self, address: str, exc: BaseException) -> None:
        log.debug("server check of %s failed (%s): tried again later", address, exc)
        self.due = time.monotonic() + RETRY_AFTER_OUTAGE

    def judge(self, found: list[EvictionPolicy]) -> EvictionPolicyError | None:
        """Record what the servers said; warn (once per server and policy) or return the error
        that refuses the first server that may evict lock keys (the check is then due again at
        the next operation, so a server fixed meanwhile is accepted)."""
        refused: EvictionPolicyError | None = None
        for policy in found:
            self.policies[policy.address] = policy
            if policy.policy is None:
                log.debug("eviction policy of %s unknown: CONFIG GET, INFO refused", policy.address)
                continue
            if not policy.evictable:
                continue
            if self.mode == "refuse":
                refused = refused or EvictionPolicyError(
                    f"refusing redis server {policy.address}: it may evict lock keys "
                    f"({describe(policy)}). Set maxmemory-policy noeviction (CONFIG SET "
                    "maxmemory-policy noeviction, or in redis.conf), or use a server of its own"
                    " for locks; or make the client with eviction='warn'.",
                    address=policy.address,
                    policy=policy.policy or "",
                )
                continue
            if self.mode == "warn" and (policy.address, policy.policy or "") not in self.warned:
                self.warned.add((policy.address, policy.policy or ""))
                text = warning_text(policy)
                log.warning("%s", text)
                warnings.warn(text, RedleaseWarning, stacklevel=2)
        self.due = 0.0 if refused is not None else time.monotonic() + RECHECK
        return refused
