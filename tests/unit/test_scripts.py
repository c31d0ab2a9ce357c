"""The Lua scripts: identity, documented interface, and how the core calls them."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path

import pytest

from redlease._core import fence, lock, scripts, watchdog
from redlease._core.keys import LockKeys
from redlease._core.lock import Acquired, HoldTable
from redlease._core.requests import Call
from redlease._core.watchdog import BATCH, RenewalPolicy

from ._fakes import KEYS, OWNER, as_call, first_call

LUA_DIR = Path(str(resources.files("redlease").joinpath("lua")))
LUA_FILES = sorted(LUA_DIR.glob("*.lua"))


def _source(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text()


def test_there_are_lua_files() -> None:
    assert len(LUA_FILES) >= 5


@pytest.mark.parametrize("script", scripts.ALL, ids=lambda s: s.name)
def test_sha_is_sha1_of_the_source(script: scripts.Script) -> None:
    on_disk = (LUA_DIR / f"{script.name}.lua").read_bytes()
    assert script.source == on_disk
    assert script.sha == hashlib.sha1(on_disk).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{40}", script.sha)


def test_every_lua_file_is_a_loaded_script_and_names_are_unique() -> None:
    import importlib
    import pkgutil

    import redlease._core

    for module in pkgutil.iter_modules(redlease._core.__path__):
        importlib.import_module(f"redlease._core.{module.name}")
    loaded = list(scripts.LOADED.values())
    assert len({s.sha for s in loaded}) == len(loaded)
    assert sorted(s.name for s in loaded) == sorted(p.stem for p in LUA_FILES)


# --- the header comment ---------------------------------------------------------------------

_ENTRY = re.compile(r"\b(KEYS|ARGV)\[(\d+)(?:\.\.(\d*)n(?:\+(\d+))?)?\]")


def _header(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    return lines


def _documented(text: str, which: str) -> tuple[list[int], tuple[int, int] | None]:
    """Fixed indices documented for KEYS/ARGV, and the ``(m, k)`` of a variadic
    ``[i..mn+k]`` (``m`` entries per lock)."""
    fixed: list[int] = []
    variadic: tuple[int, int] | None = None
    for line in _header(text):
        m = _ENTRY.match(line)
        if m is None or m.group(1) != which:
            continue
        if ".." in line.split()[0]:
            assert variadic is None, f"two variadic {which} entries"
            variadic = (int(m.group(3) or 1), int(m.group(4) or 0))
            # A range must follow the fixed entries without a gap.
            assert int(m.group(2)) == len(fixed) + 1
        else:
            fixed.append(int(m.group(2)))
    assert fixed == list(range(1, len(fixed) + 1)), f"{which} entries {fixed} are not 1..n"
    return fixed, variadic


def header_arity(name: str, n: int) -> tuple[int, int]:
    """The number of KEYS and ARGV that the header of ``name``.lua documents, for ``n`` locks."""
    text = _source(name)
    counts = []
    for which in ("KEYS", "ARGV"):
        fixed, variadic = _documented(text, which)
        counts.append(len(fixed) if variadic is None else variadic[0] * n + variadic[1])
    return counts[0], counts[1]


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.stem)
def test_header_states_keys_argv_and_reply(path: Path) -> None:
    text = path.read_text()
    header = _header(text)
    assert header, "no header comment"
    assert header[0] and not _ENTRY.match(header[0]), "first line should say what the script does"
    assert any(line.startswith("KEYS[") for line in header)
    assert any(line.startswith("Reply") for line in header)
    body = "\n".join(text.splitlines()[len(header) :])
    if "ARGV" in body:
        assert any(line.startswith("ARGV[") for line in header)
    else:
        assert not any(line.startswith("ARGV[") for line in header)


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.stem)
def test_body_uses_only_documented_indices(path: Path) -> None:
    text = path.read_text()
    body = "\n".join(text.splitlines()[len(_header(text)) :])
    for which in ("KEYS", "ARGV"):
        fixed, variadic = _documented(text, which)
        used = {int(i) for i in re.findall(rf"\b{which}\[(\d+)\]", body)}
        if variadic is None:
            assert used <= set(fixed), f"{which}{sorted(used - set(fixed))} not documented"
            assert set(fixed) <= used, f"{which}{sorted(set(fixed) - used)} documented, unused"


def _hold(name: str, owner: str, table: HoldTable) -> lock.Hold:
    keys = LockKeys.for_name(name)
    return table.granted(keys, owner, Acquired(count=1, ttl=30.0, requested_at=0.0, token=7), None)


def _core_calls() -> list[tuple[Call, int]]:
    """Every kind of Call the core builds, with the number of locks it is about."""
    calls: list[tuple[Call, int]] = []
    acq = lock.acquire(KEYS, OWNER, held=0, lease=30.0, blocking=False, timeout=None, wait_id="w")
    calls.append((first_call(acq), 1))
    reentry = lock.acquire(KEYS, OWNER, held=2, lease=0.5, blocking=True, timeout=1.0, wait_id="w")
    next(reentry)  # listen first (Subscribe, only if live)
    calls.append((as_call(reentry.send(False)), 1))
    calls.append((first_call(lock.release(KEYS, OWNER, held=1, request_id="r", token=7)), 1))
    calls.append((first_call(lock.force_release(KEYS)), 1))
    calls.append((first_call(lock.status(KEYS)), 1))
    calls.append((lock.leave_call(KEYS, OWNER, "w", "w30000"), 1))
    fenced = fence.fenced_set("orders:42:stock", "7", 123, 0)
    calls.append((first_call(fenced), 1))
    calls.append((first_call(fence.fenced_get("orders:42:stock", 123)), 1))
    undo = calls[0][0].undo
    assert undo is not None
    undo_call = undo([1, 1, 30000])
    assert undo_call is not None
    calls.append((undo_call, 1))
    table = HoldTable()
    policy = RenewalPolicy(30.0)
    for n in (1, 2, 7, BATCH, BATCH + 3):
        holds = [_hold(f"lock-{i}", f"owner-{i % 3}", table) for i in range(n)]
        for batch, call in policy.calls(holds):
            calls.append((call, len(batch)))
    return calls


def test_calls_cover_every_script() -> None:
    assert {c.script.name for c, _ in _core_calls()} == {s.name for s in scripts.ALL}


@pytest.mark.parametrize(
    ("call", "n"), _core_calls(), ids=lambda v: v.script.name if isinstance(v, Call) else str(v)
)
def test_calls_match_the_script_headers(call: Call, n: int) -> None:
    assert header_arity(call.script.name, n) == (len(call.keys), len(call.args))
    assert all(isinstance(k, str) and k for k in call.keys)
    assert all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in call.args)


def test_known_arities() -> None:
    """The brief's table, so that a header edit alone cannot change the interface silently."""
    assert header_arity("lock_acquire", 1) == (4, 10)
    assert header_arity("lock_release", 1) == (6, 10)
    assert header_arity("lock_force_release", 1) == (3, 3)
    assert header_arity("lock_status", 1) == (2, 0)
    assert header_arity("lock_renew", 4) == (8, 9)


def test_watchdog_uses_the_renew_script() -> None:
    assert watchdog.scripts.LOCK_RENEW is scripts.LOCK_RENEW  # type: ignore[attr-defined]  # the module's own import


# --- what the scripts do with keys ----------------------------------------------------------


def _redis_calls(text: str) -> list[tuple[str, list[str]]]:
    """(command, argument texts) of every redis.call / redis.pcall, with nested parentheses."""
    out = []
    for m in re.finditer(r"redis\.p?call\s*\(", text):
        depth, i, args, start = 1, m.end(), [], m.end()
        while depth:
            ch = text[i]
            if ch in "({[":
                depth += 1
            elif ch in ")}]":
                depth -= 1
            elif ch == "," and depth == 1:
                args.append(text[start:i].strip())
                start = i + 1
            i += 1
        args.append(text[start : i - 1].strip())
        command = args[0].strip("'\"").lower()
        out.append((command, args[1:]))
    return out


FORBIDDEN = {"keys", "scan", "randomkey", "flushall", "flushdb", "eval", "evalsha", "select"}


_PUBLISH_ARG = re.compile(r"argv\[(\d+)\]")


def publish_argument(text: str) -> int | None:
    """The ARGV index of a script's publish command (documented and checked), else None."""
    documented = [
        int(m.group(2))
        for line in _header(text)
        if (m := _ENTRY.match(line)) and m.group(1) == "ARGV" and "publish command" in line
    ]
    if not documented:
        return None
    (index,) = documented
    return index


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.stem)
def test_publish_command_is_an_argument_checked_first(path: Path) -> None:
    """A script that publishes takes the command ('publish' or 'spublish') as an argument,
    as Redisson's do, and refuses any other value before it changes anything."""
    text = path.read_text()
    calls = _redis_calls(text)
    index = publish_argument(text)
    publishes = [c for c, _ in calls if _PUBLISH_ARG.fullmatch(c)]
    assert "publish" not in {c for c, _ in calls} and "spublish" not in {c for c, _ in calls}
    if index is None:
        assert not publishes
        return
    assert publishes and set(publishes) == {f"argv[{index}]"}
    body = text.splitlines()[len(_header(text)) :]
    assert body[:3] == [
        f"if ARGV[{index}] ~= 'publish' and ARGV[{index}] ~= 'spublish' then",
        f"  return redis.error_reply('ERR redlease: ARGV[{index}] must be publish or spublish')",
        "end",
    ]


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.stem)
def test_every_key_comes_from_KEYS(path: Path) -> None:
    text = path.read_text()
    calls = _redis_calls(text)
    assert calls, "the script calls nothing"
    for command, args in calls:
        if (m := _PUBLISH_ARG.fullmatch(command)) is not None:  # 'publish' or 'spublish'
            assert int(m.group(1)) == publish_argument(text)
            command = "publish"
        assert re.fullmatch(r"[a-z]+", command), f"command {command!r} is not a literal"
        assert command not in FORBIDDEN
        if command == "time":  # the server's clock: the one command that takes no key
            assert not args
            continue
        assert args, f"{command} without a key"
        if command == "pubsub":  # who listens on the lock's channels (lock_release.lua)
            assert args in (
                ["'numsub'", "KEYS[2]"],
                ["'shardnumsub'", "KEYS[2]"],
                ["'channels'", "pattern"],
                ["'shardchannels'", "pattern"],
                # whether a waiter's client still listens on its own channel (a channel, not a
                # key: the prefix from ARGV, in the lock's slot, and the waiter's client id)
                ["'numsub'", "channel"],
                ["'shardnumsub'", "channel"],
            ), args
            if args[1] == "channel":
                assert path.stem in ("lock_acquire", "lock_release")
                assert re.search(r"local channel = ARGV\[\d\] \.\. ", text)
            continue
        if command == "publish" and path.stem == "lock_release" and args[0] != "KEYS[2]":
            # the one name built in a script: the channel of the client of the waiter whose
            # turn it is (a channel, not a key; in the lock's slot, by the prefix's hash tag)
            assert args[0] == "channel", args[0]
            assert "    local channel = ARGV[6] .. client_of(head)" in text.splitlines()
            continue
        if command == "publish" and path.stem in FORCE_RELEASES and args[0].endswith(" .. client"):
            # a force release tells each holder on its client's own channel of the lock: the
            # prefix from ARGV (in the lock's slot, by its hash tag) and the client id part of
            # the holder's owner field (a channel, not a key)
            assert args[0] == f"{FORCE_RELEASES[path.stem]} .. client", args[0]
            assert re.search(
                r"\n +local client = string\.match\([^,]+, "
                r"'\^\(%x\+%-%x\+%-%x\+%-%x\+%-%x\+\):%d\+\$'\)\n",
                text,
            )
            continue
        if command == "publish" and path.stem.startswith("redisson_fair_"):
            # Redisson's fair lock wakes the first waiter on its own channel: the unlock
            # channel (KEYS[4]) followed by ":<owner field>" (a channel, not a key; in the
            # lock's slot, by the unlock channel's hash tag), and only there
            assert args[0] == "KEYS[4] .. ':' .. head", args[0]
            continue
        if path.stem.startswith("redisson_rw_") and args[0].startswith("hold_key("):
            # Redisson's read-write layout names each read hold's lease key from the holder's
            # field and count; the prefix comes from KEYS (the name's tag: the lock's slot)
            assert _HOLD_KEY.search(text), "hold_key must build on a KEYS prefix"
            continue
        assert re.fullmatch(r"KEYS\[[^\]]+\]", args[0]), f"{command} on {args[0]!r}"
        # a hash's field names may be built (Redisson's group lock names a value's fields
        # "<value>:<owner>:expire_time"), and what APPEND adds to a string (the receipts):
        # fields and values are not keys; a key never is
        names = args[:1] if command.startswith("h") or command == "append" else args
        for arg in names:
            assert ".." not in arg, f"{command} builds a name: {arg!r}"


FORCE_RELEASES = {
    "lock_force_release": "ARGV[3]",
    "redisson_fair_force_release": "ARGV[2]",
    "rw_force_release": "ARGV[3]",
    "redisson_rw_force_release": "ARGV[3]",
}
"""The force releases and the argument of their holders' channels' prefix."""

_HOLD_KEY = re.compile(
    r"local function hold_key\(field, n\)[^\n]*\n"
    r"  return KEYS\[\d\] \.\. field \.\. ':rwlock_timeout:' \.\. n\n"
)


def test_redis_call_parser_sees_nested_calls() -> None:
    calls = _redis_calls(_source("lock_status"))
    assert [c for c, _ in calls] == ["pttl", "zcard", "hgetall"]
    assert _redis_calls("redis.call('get', 'x' .. KEYS[1])") == [("get", ["'x' .. KEYS[1]"])]


def test_release_receipt_lifetime_matches_the_core_constant() -> None:
    from redlease._core.lock import RECEIPT_MS

    # every write of the receipts key keeps it that long: the append's PEXPIRE, the rewrite's
    # SET ... PX, in the release and in the scripts that write the key as it does
    for script, key in (
        (scripts.LOCK_RELEASE, "KEYS[3]"),
        (scripts.LOCK_LEAVE, "KEYS[4]"),
        (scripts.LOCK_FORCE_RELEASE, "KEYS[3]"),
        (scripts.Script.load("lock_release_keep"), "KEYS[2]"),
    ):
        source = script.source.decode()
        assert f"redis.call('pexpire', {key}, {RECEIPT_MS})" in source, script.name
        assert f"'px', {RECEIPT_MS})" in source, script.name
        assert f"redis.call('append', {key}, " in source, script.name
