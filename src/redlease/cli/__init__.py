"""The ``redlease`` command line: ``run`` (a distributed flock), ``status``, ``list``,
``release --force``, ``demo`` and ``bench``, one ``_add_*`` function each.

Errors a user can cause end in one line on stderr, never a traceback: exit 2 for usage errors
(argparse's convention, and no server given), 1 for runtime errors (server down, wrong
password). A password in a URL is never printed: commands show ``host:port`` and every message
shows every URL masked (its password as ``***``, found by the URL's structure).

``run`` lives in ``run.py``, ``status``/``list``/``release`` in ``locks.py``, ``bench`` in
``bench.py``; they import from here, and are imported only when their command runs.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, NoReturn

import redis.exceptions
from redis.connection import parse_url as _untyped_parse_url

from .._redis.urls import checked_url, is_sentinel_url, masked_url, parse_sentinel_url
from ..errors import RedleaseError

if TYPE_CHECKING:
    from .._sync.client import Client

__all__ = ["EX_LEASE_LOST", "EX_NOT_ACQUIRED", "build_parser", "main"]

PROG = "redlease"
URL_ENV = "REDLEASE_URL"
EX_NOT_ACQUIRED = 75
"""``run``: the lock was not acquired within ``--wait`` (EX_TEMPFAIL, as ``flock -E`` users
often choose)."""
EX_LEASE_LOST = 76
"""``run``: the lease was lost while the command ran."""
_parse_url: Callable[[str], dict[str, Any]] = _untyped_parse_url  # redis-py leaves it untyped
Handler = Callable[[argparse.Namespace], int]

_known_urls: list[str] = []
"""Every URL-like word of this invocation (argv, ``REDLEASE_URL``): their passwords are scrubbed
from everything printed, including argparse's own messages."""


class CommandError(Exception):
    """A runtime failure a command reports as one line on stderr (exit status 1)."""


class UsageError(Exception):
    """A usage mistake argparse cannot see (no server given): one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``redlease run: error: ...``), passwords scrubbed."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {_one_line(_scrub(message))}{hint}\n")


if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[_Parser]


def _version() -> str:
    try:
        return version("redlease")
    except PackageNotFoundError:
        return "unknown"


_URL_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]*")


def redact(text: str, url: str | None) -> str:
    """``text`` with every URL in it shown masked (``masked_url``: the password and any
    ``...password=`` option as ``***``, found by the URL's structure).

    The URLs of this invocation (and ``url``) are replaced whole, longest first, so a
    password with a space or a quote in it goes with its URL; any other URL-like word is
    masked where it stands. The password's own text is never searched for: a password such
    as ``1`` leaves the rest of the message as it is."""
    known = sorted({u for u in (url, *_known_urls) if u}, key=len, reverse=True)
    for each in known:
        masked = masked_url(each)
        text = text.replace(each, masked)
        quoted = repr(each)[1:-1]  # as argparse and f"{x!r}" show it
        if quoted != each:
            text = text.replace(quoted, masked)
    return _URL_WORD.sub(_masked_word, text)


def _masked_word(match: re.Match[str]) -> str:
    word = match.group(0)
    if "[[" in word.partition("@")[0]:
        return word  # a usage form, as in "redis://[[user]:password@]host[:port]"
    return masked_url(word)


def _scrub(text: str) -> str:
    return redact(text, None)


def _remember_urls(argv: Sequence[str]) -> None:
    """Note the URLs of this invocation (``--url X``, ``--url=X``, ``REDLEASE_URL``)."""
    words = [w.partition("=")[2] if w.startswith("--") else w for w in argv]
    _known_urls[:] = [w for w in (*words, os.environ.get(URL_ENV, "")) if "://" in w]


def address_of(url: str) -> str:
    """``host:port`` (or ``unix:/path``, or ``sentinel <service> at host:port,...``) of a
    Redis URL: what is safe to print about it."""
    if is_sentinel_url(url):
        return parse_sentinel_url(url).address
    checked_url(url)  # InvalidArgumentError (a ValueError) that never quotes the password
    parts = _parse_url(url)
    if "path" in parts:
        return f"unix:{parts['path']}"
    host = str(parts.get("host") or "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.get('port') or 6379}"


def redis_url(value: str) -> str:
    """argparse type: a URL redis-py accepts (redis://, rediss://, unix://), or a Sentinel
    URL (redis+sentinel://, redis-sentinel://, and their rediss forms)."""
    try:
        address_of(value)
    except ValueError as exc:
        if is_sentinel_url(value):  # the message names what is wrong, password masked
            raise argparse.ArgumentTypeError(redact(str(exc), value)) from None
        raise argparse.ArgumentTypeError(redact(str(exc), value)) from None
    return value


def int_range(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in ``[low, high]``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is out of range {low}..{high}")
        return number

    parse.__name__ = "number"
    return parse


def seconds_arg(*, zero: bool) -> Callable[[str], float]:
    """argparse type: finite seconds, positive (``zero=False``) or non-negative."""
    what = "a non-negative" if zero else "a positive"

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
        if not math.isfinite(number) or number < 0 or (number == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{value} is not {what} number of seconds")
        return number

    parse.__name__ = "seconds"
    return parse


def exit_code_arg(value: str) -> int:
    """argparse type: an exit status, 0 to 255."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an exit status (0-255)") from None
    if not 0 <= number <= 255:
        raise argparse.ArgumentTypeError(f"{value} is not an exit status (0-255)")
    return number


def server_url(args: argparse.Namespace) -> str:
    """``--url``, else ``REDLEASE_URL``; a ``UsageError`` when neither is given or valid."""
    if args.url is not None:
        return str(args.url)
    from_env = os.environ.get(URL_ENV, "").strip()
    if not from_env:
        raise UsageError(
            f"no server given: use --url URL or set {URL_ENV} (e.g. redis://127.0.0.1:6379/0)"
        )
    try:
        return redis_url(from_env)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{URL_ENV}: {exc}") from None


def add_url_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        type=redis_url,
        metavar="URL",
        help=f"the server: redis://[[user]:password@]host[:port][/db], rediss://...,"
        " unix:///path, or through Sentinel redis+sentinel://[[user]:password@]host[:port]"
        f"[,host[:port]...]/service[/db] (default: ${URL_ENV})",
    )


CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 10.0


def connect(url: str, **client_kwargs: Any) -> Client:
    """A ``redlease.Client`` on ``url`` that has answered a PING, or a one-line
    ``CommandError`` naming ``host:port`` (never the password)."""
    from .._sync.client import Client

    address = address_of(url)
    client_kwargs.setdefault("socket_connect_timeout", CONNECT_TIMEOUT)
    client_kwargs.setdefault("socket_timeout", COMMAND_TIMEOUT)
    client = Client.from_url(url, **client_kwargs)
    try:
        client.redis.ping()
    except redis.exceptions.AuthenticationError as exc:
        client.close()
        raise CommandError(
            f"authentication failed at {address} (check the user and password in the URL): {exc}"
        ) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        client.close()
        raise CommandError(f"cannot reach a Redis server at {address}: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        client.close()
        raise CommandError(f"the server at {address} refused the connection: {exc}") from None
    return client


def _cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo on ``--url``, or on a private server started (and stopped) for it."""
    from ..demo import DemoError, run_demo

    try:
        if args.url is not None:
            address = address_of(args.url)
            return run_demo(
                args.url,
                address,
                "given by --url",
                workers=args.workers,
                stock=args.stock,
                out=sys.stdout,
                warn=lambda text: _warn(text, args.url),
            )
        from ..testing import RedisServer

        with RedisServer() as server:
            return run_demo(
                server.url,
                f"{server.host}:{server.port}",
                "private, stopped at the end",
                workers=args.workers,
                stock=args.stock,
                out=sys.stdout,
                warn=lambda text: _warn(text, None),
            )
    except DemoError as exc:
        raise CommandError(str(exc)) from None


def _add_demo(commands: Commands) -> None:
    parser = commands.add_parser(
        "demo",
        help="show lost updates without a lock and exact results with one",
        description=(
            "Worker processes sell items from one Redis stock key with GET/SET, first without"
            " a lock (they oversell), then with a redlease lock around each sale (exact)."
            " Without --url a private server is started and stopped."
        ),
    )
    parser.add_argument(
        "--url",
        type=redis_url,
        metavar="URL",
        help="use this server (keys under redlease:demo:, deleted afterwards)"
        " instead of a private one",
    )
    parser.add_argument(
        "--workers",
        type=int_range(1, 64),
        default=4,
        metavar="N",
        help="worker processes (1-64, default 4)",
    )
    parser.add_argument(
        "--stock",
        type=int_range(1, 1_000_000),
        default=100,
        metavar="N",
        help="items in stock (1-1000000, default 100)",
    )
    parser.set_defaults(handler=_cmd_demo)


RUN_EPILOG = f"""\
COMMAND is the first word after NAME that is not an option of redlease's (or the
first word after '--'); it and everything after it are passed on as they are, run
directly, without a shell. With -c 'COMMAND', the one string is run by the shell
($SHELL, else /bin/sh), as flock -c does.

The lock is taken before COMMAND starts and released when it ends. Without --lease
the watchdog renews the lease while COMMAND runs (every third of --watchdog); with
--lease the hold simply lasts that long, and COMMAND is treated as having lost it
when the lease runs out. A lost lease (expired, force-released, server restarted
empty, not renewable for a whole lease) stops COMMAND: SIGTERM, then SIGKILL after
--grace seconds; with --keep-going COMMAND may finish.

With --at-least the lock stays taken until that long after it was taken, however
soon COMMAND ends (the key's TTL set to what is left of it, held by nobody): the
same job started by cron on several machines whose clocks or ticks are a little
apart runs once (ShedLock's lockAtLeastFor). --at-least tries once (--wait 0)
unless --wait is given: a machine that waited would run the job a second time.

A busy lock prints nothing (cron mails nobody) unless --verbose; the exit status
says it (75, or -E N). flock(1)'s -n, -w, -E and -c mean the same here; the one
difference is the default conflict status, 75 and not flock's 1, since 1 is
redlease's status for an error (server unreachable): give -E 1 for flock's.

SIGINT, SIGTERM and SIGHUP sent to redlease are passed on to COMMAND (SIGINT not
when redlease runs in the foreground of a terminal: Ctrl-C reaches COMMAND there
already). redlease waits for COMMAND to end, then releases the lock.

exit status:
  N    COMMAND's own exit status (128+S when a signal S ended it)
  {EX_NOT_ACQUIRED}   the lock was busy: not acquired within --wait (EX_TEMPFAIL), or the N
       of -E N (--conflict-exit-code N)
  {EX_LEASE_LOST}   the lease was lost while COMMAND ran (whether COMMAND was stopped
       or, with --keep-going, finished)
  126  COMMAND could not be started; 127 COMMAND was not found
  1    error: server unreachable, authentication failed, ...
  2    usage error, or no server given (--url or ${URL_ENV})
  128+S  interrupted by signal S while waiting for the lock

examples:
  redlease run jobs:nightly ./nightly.sh --full      # waits as long as it takes
  redlease run -n jobs:nightly ./nightly.sh          # one try: exit {EX_NOT_ACQUIRED} if busy
  redlease run -w 30 jobs:report -c 'report.sh | mail ops'
  # crontab on every machine: one run per tick, a skipped one exits 0 silently
  */5 * * * * redlease run --at-least 60 -E 0 jobs:sync ./sync.sh
"""


def _cmd_run(args: argparse.Namespace) -> int:
    from .run import RunOptions, run

    if args.shell_command is not None and args.argv:
        raise UsageError(
            f"give COMMAND or -c 'COMMAND', not both: {PROG} run [options] NAME COMMAND [ARGS...]"
        )
    if args.shell_command is not None:
        argv = [os.environ.get("SHELL") or "/bin/sh", "-c", args.shell_command]
    elif args.argv:
        argv = list(args.argv)
    else:
        raise UsageError(f"no COMMAND given: {PROG} run [options] NAME COMMAND [ARGS...]")
    if args.name == "":
        raise UsageError("the lock NAME must not be empty")
    url = server_url(args)
    wait = args.wait
    if wait is None and args.at_least > 0:
        wait = 0.0  # --at-least: one try (a waiter would run the job a second time)
    options = RunOptions(
        name=args.name,
        argv=argv,
        wait=wait,
        lease=args.lease,
        watchdog=args.watchdog,
        keep_going=args.keep_going,
        grace=args.grace,
        at_least=args.at_least,
        conflict_exit_code=args.conflict_exit_code,
        eviction=args.eviction,
        verbose=args.verbose,
    )
    return run(url, options)


def _add_run(commands: Commands) -> None:
    parser = commands.add_parser(
        "run",
        help="run a command only while holding a lock (a flock(1) across machines)",
        usage=f"{PROG} run [options] NAME COMMAND [ARGS...]\n"
        f"       {PROG} run [options] NAME -c 'COMMAND'",
        description="Run COMMAND while holding the lock NAME, then release it. Options come"
        " before COMMAND; COMMAND and its arguments are run directly (no shell) and none of"
        " them is read by redlease ('--' before COMMAND is allowed, as in flock).",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="the lock (its Redis key)")
    waiting = parser.add_mutually_exclusive_group()
    waiting.add_argument(
        "-w",
        "--wait",
        type=seconds_arg(zero=True),
        metavar="SECONDS",
        help=f"give up after waiting this long for the lock (exit {EX_NOT_ACQUIRED});"
        " 0 tries once; default: wait as long as it takes (with --at-least: 0)",
    )
    waiting.add_argument(
        "-n",
        "--nonblock",
        dest="wait",
        action="store_const",
        const=0.0,
        help="try once, do not wait: the same as --wait 0",
    )
    parser.add_argument(
        "-c",
        "--command",
        dest="shell_command",
        metavar="'COMMAND'",
        help="run this one string through the shell ($SHELL -c, else /bin/sh -c) instead of"
        " COMMAND [ARGS...], as flock -c does",
    )
    lease = parser.add_mutually_exclusive_group()
    lease.add_argument(
        "--lease",
        type=seconds_arg(zero=False),
        metavar="SECONDS",
        help="hold the lock this long at most, without renewal (default: renewed by the"
        " watchdog while COMMAND runs)",
    )
    lease.add_argument(
        "--watchdog",
        type=seconds_arg(zero=False),
        default=30.0,
        metavar="SECONDS",
        help="the lease the watchdog keeps renewing, every third of it (default 30);"
        " a server unreachable this long means the lease is lost",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help=f"when the lease is lost, let COMMAND finish (still exit {EX_LEASE_LOST})",
    )
    parser.add_argument(
        "--grace",
        type=seconds_arg(zero=True),
        default=10.0,
        metavar="SECONDS",
        help="after a lost lease, seconds between SIGTERM and SIGKILL (default 10)",
    )
    parser.add_argument(
        "--at-least",
        type=seconds_arg(zero=True),
        default=0.0,
        metavar="SECONDS",
        help="keep the lock taken until this long after it was taken, however soon COMMAND"
        " ends, so that a job started on several machines at about the same time runs once"
        " (at most --lease; default 0: released when COMMAND ends); tries once unless"
        " --wait is given",
    )
    parser.add_argument(
        "-E",
        "--conflict-exit-code",
        type=exit_code_arg,
        default=EX_NOT_ACQUIRED,
        metavar="N",
        help=f"exit status when the lock is busy (not acquired within --wait; default"
        f" {EX_NOT_ACQUIRED}, where flock's is 1), as flock -E",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="say on stderr how long taking the lock took, or that it was busy (a busy"
        " lock is otherwise silent, so that cron mails nobody)",
    )
    parser.add_argument(
        "--eviction",
        choices=("warn", "refuse", "ignore"),
        default="warn",
        help="when the server may evict lock keys (maxmemory-policy volatile-* or allkeys-*):"
        " warn on stderr and go on (default), refuse (exit 1, COMMAND not run), or ignore",
    )
    add_url_option(parser)
    parser.set_defaults(handler=_cmd_run)


def _server(args: argparse.Namespace) -> str | Client:
    """The client given to ``main(client=...)``, else the URL of ``--url`` or the environment."""
    given: Client | None = getattr(args, "client", None)
    return given if given is not None else server_url(args)


def _cmd_status(args: argparse.Namespace) -> int:
    from .locks import status

    return status(_server(args), args.names, as_json=args.json)


def _add_status(commands: Commands) -> None:
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
    from .locks import list_locks

    return list_locks(_server(args), args.pattern, limit=args.limit, as_json=args.json)


def _add_list(commands: Commands) -> None:
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
    from .locks import force_release

    return force_release(_server(args), args.name, yes=args.yes)


def _add_release(commands: Commands) -> None:
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


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import BenchOptions, bench

    url, given_by = args.url, "--url"
    if url is None and os.environ.get(URL_ENV, "").strip():
        url, given_by = server_url(args), f"${URL_ENV}"
    options = BenchOptions(
        seconds=args.seconds, threads=args.threads, as_json=args.json, given_by=given_by
    )
    return bench(url, options)


def _add_bench(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench",
        help="measure lock round trips and throughput on a server",
        description="Measure the PING round trip, then acquire+release cycles for --seconds"
        " each, uncontended (a lock per thread) and contended (one lock for all threads):"
        " cycles per second and acquire/release latency (p50, p99). Keys under"
        " redlease:bench:, expiring with their lease. Without --url (or $REDLEASE_URL) a"
        " private server is started and stopped. Comparisons with other libraries are"
        " benchmarks/bench.py in a source checkout.",
    )
    parser.add_argument(
        "--seconds",
        type=seconds_arg(zero=False),
        default=3.0,
        metavar="SECONDS",
        help="how long each run lasts (default 3)",
    )
    parser.add_argument(
        "--threads",
        type=int_range(1, 256),
        default=4,
        metavar="N",
        help="threads of one client (1-256, default 4)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_url_option(parser)
    parser.set_defaults(handler=_cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    """The ``redlease`` parser with one subparser per command."""
    parser = _Parser(
        prog=PROG,
        description="Redisson-compatible distributed locks on Redis and Valkey.",
        epilog=f"Commands that need a server take --url URL or ${URL_ENV}.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_run(commands)
    _add_status(commands)
    _add_list(commands)
    _add_release(commands)
    _add_demo(commands)
    _add_bench(commands)
    return parser


def _split_run(argv: list[str], parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """``(to parse, COMMAND)``: for ``run``, COMMAND is the first word after NAME that is not
    an option (or what follows ``--``), with everything after it, never parsed: an option of
    COMMAND is never taken for one of ours (flock's ``flock [options] FILE COMMAND [ARGS]``)."""
    start = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    if start is None or argv[start] != "run":  # before it: top-level options (no values)
        return argv, []
    options = _run_options(parser)
    parsed, words, named = argv[: start + 1], argv[start + 1 :], False
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            if named:
                return parsed, words[i + 1 :]
            return [*parsed, *words[i : i + 2]], words[i + 2 :]  # `run [options] -- NAME ...`
        if word.startswith("-") and word != "-":
            takes = _takes_value(word, options)
            parsed += words[i : i + 1 + takes]
            i += 1 + takes
        elif not named:
            parsed.append(word)
            named = True
            i += 1
        else:
            return parsed, words[i:]
    return parsed, []


def _run_options(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """``run``'s option strings, each with whether it takes a value."""
    for action in parser._actions:
        if isinstance(action.choices, dict) and "run" in action.choices:
            run: argparse.ArgumentParser = action.choices["run"]
            return {o: each.nargs != 0 for o, each in run._option_string_actions.items()}
    raise AssertionError("no run command")  # pragma: no cover


def _takes_value(word: str, options: dict[str, bool]) -> int:
    """1 when the option ``word`` takes its value from the next word, else 0 (an unknown
    option takes none: argparse reports it)."""
    if word.startswith("--"):
        if "=" in word:
            return 0
        matches = [o for o in options if o.startswith(word) and o.startswith("--")]
        exact = word in options
        if exact or len(matches) == 1:
            return int(options[word if exact else matches[0]])
        return 0
    for k, letter in enumerate(word[1:]):  # short options, grouped as in -nE0 or -w5
        takes = options.get(f"-{letter}")
        if takes is None:
            return 0
        if takes:
            return int(k == len(word) - 2)  # its value is the next word unless attached
    return 0


_CLI_SPELLINGS = (
    (
        "Client(eviction='ignore') silences this, eviction='refuse' refuses such a server.",
        "--eviction ignore silences this, --eviction refuse refuses such a server.",
    ),
    ("or make the client with eviction='warn'.", "or run with --eviction warn."),
)
"""The library's advice (eviction check) in the command line's words (``run --eviction``)."""


def cli_words(text: str) -> str:
    """``text`` with the library's advice spelled as the command line's options."""
    for library, command in _CLI_SPELLINGS:
        text = text.replace(library, command)
    return text


def _one_line(text: str) -> str:
    return " ".join(cli_words(text).split()) or "unknown error"


def _warn(message: str, url: str | None) -> None:
    print(f"{PROG}: warning: {_one_line(redact(message, url))}", file=sys.stderr, flush=True)


def _fail(message: str, url: str | None) -> int:
    print(f"{PROG}: error: {_one_line(redact(message, url))}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None, *, client: Client | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the command, return the exit status.

    ``client``: ``status``, ``list`` and ``release`` run on this client (left open) instead
    of connecting to ``--url`` or ``$REDLEASE_URL``, as a framework's own command does
    (``python manage.py redlease``: ``redlease.contrib.django``)."""
    words = list(sys.argv[1:] if argv is None else argv)
    _remember_urls(words)
    parser = build_parser()
    to_parse, passed_on = _split_run(words, parser)
    try:
        args, extras = parser.parse_known_args(to_parse)
        if extras:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exc:  # usage error (2), --help or --version (0)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command == "run":
        args.argv = passed_on
    handler: Handler = args.handler
    url: str | None = getattr(args, "url", None)
    if client is not None:
        if args.command not in ("status", "list", "release"):
            return _fail(f"{args.command} does not run on a given client", None)
        args.client = client
    try:
        return handler(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except UsageError as exc:
        _fail(str(exc), url)
        return 2
    except CommandError as exc:
        return _fail(str(exc), url)
    except redis.exceptions.AuthenticationError as exc:
        return _fail(f"authentication failed: {exc}", url)
    except (RedleaseError, redis.exceptions.RedisError, OSError, RuntimeError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}", url)
