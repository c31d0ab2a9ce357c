"""``redlease run NAME COMMAND``: run a command only while holding a lock, like flock(1)
across machines.

The main thread takes the lock, starts COMMAND (``subprocess.Popen``; a shell only for ``-c``)
and supervises it: it polls the child, forwards SIGINT/SIGTERM/SIGHUP to it, and stops it
(SIGTERM, then SIGKILL after ``--grace``) when the lease is lost. A loss is reported through
``on_lease_lost`` by the client's subscriber thread the moment a force release (``redlease
release --force``) tells it, or by its watchdog thread when a renewal finds the hold gone; with
``--lease``, it is the lease running out by the local clock. Nothing else happens in the signal
handlers than recording the signal and passing it on.

Exit statuses are documented in ``redlease run --help`` (``RUN_EPILOG``, below).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis.exceptions

from .._core.arguments import lease_seconds, non_negative_seconds, wait_seconds
from .._redis.servers import Eviction
from .._shared.holders import scrub_words
from .._sync.lock import Lock
from ..errors import (
    InvalidArgumentError,
    LeaseLostError,
    NotOwnedError,
    RedleaseError,
    RedleaseWarning,
)
from .common import (
    COMMAND_TIMEOUT,
    EX_LEASE_LOST,
    EX_NOT_ACQUIRED,
    PROG,
    URL_ENV,
    UsageError,
    add_url_option,
    address_of,
    cli_words,
    connect,
    exit_code_arg,
    redact,
    seconds_arg,
    server_url,
)

if TYPE_CHECKING:
    from .common import Commands

__all__ = ["RunOptions", "run"]

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL = 0.05
"""Seconds between checks of the child, the lost-lease flag and the kill deadline."""


@dataclass(frozen=True)
class RunOptions:
    name: str
    argv: list[str]
    wait: float | None
    lease: float | None
    watchdog: float
    keep_going: bool
    grace: float
    at_least: float = 0.0
    """Keep the lock taken until this long after it was taken (``release(keep_for=)``)."""
    conflict_exit_code: int = EX_NOT_ACQUIRED
    """The exit status when the lock is busy (``flock -E``)."""
    verbose: bool = False
    """Say how long taking the lock took, or that it was busy (``flock --verbose``); a busy
    lock is otherwise silent, as ``flock -n`` is, so that cron mails nobody."""
    eviction: Eviction = "warn"
    """What to do on a server that may evict lock keys (``Client(eviction=...)``)."""


def note(message: str, url: str | None = None) -> None:
    """One line on stderr; a closed or hung-up stderr is not an error of ours."""
    text = " ".join(cli_words(redact(message, url)).split())
    with contextlib.suppress(OSError, ValueError):
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128+S when signal S ended it."""
    return 128 - returncode if returncode < 0 else returncode


def in_terminal_foreground() -> bool:
    """Whether this process is in the foreground process group of its controlling terminal:
    then a Ctrl-C's SIGINT went to the whole group, COMMAND included."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class Interrupted(Exception):
    """A forwarded signal arrived while waiting for the lock or its release: stop waiting."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


@dataclass
class Supervisor:
    """What the signal handlers, the watchdog callback and the main loop share."""

    waiting: bool = False
    """While true, a forwarded signal raises ``Interrupted``: there is no child (yet, or any
    more) and the wait for the lock or for its release is given up."""
    proc: subprocess.Popen[bytes] | None = None
    pending: list[int] = field(default_factory=list)
    """Signals that came after the lock was taken but before the child started."""
    lost: threading.Event = field(default_factory=threading.Event)
    lost_reason: str = ""

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.waiting:
            raise Interrupted(signum)
        if self.proc is None:
            self.pending.append(signum)
        else:
            self.forward(signum)

    def forward(self, signum: int) -> None:
        if self.proc is None or (signum == signal.SIGINT and in_terminal_foreground()):
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signum)  # a no-op once the child has been reaped

    def lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def on_lease_lost(self, error: LeaseLostError) -> None:
        """The hold is gone: a force release told the client's subscriber thread, or its
        watchdog thread found it gone (or unrenewable)."""
        self.lose(str(error))


@contextlib.contextmanager
def signals_to(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    old: dict[int, Any] = {}
    try:
        for signum in FORWARDED:
            old[signum] = signal.signal(signum, handler)
        yield
    finally:
        for number, previous in old.items():
            signal.signal(number, previous)


class _OneLineWarnings(logging.Handler):
    """redlease's log warnings as ``redlease: warning: ...`` lines, each text once; the
    lease-lost warning is left out (``run`` says it in its own words)."""

    def __init__(self, url: str) -> None:
        super().__init__(logging.WARNING)
        self.url = url
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if any(isinstance(a, LeaseLostError) for a in args):
            return
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        if text not in self.seen:
            self.seen.add(text)
            note(f"warning: {text}", self.url)


@contextlib.contextmanager
def quiet_background(url: str) -> Iterator[None]:
    """Library warnings and background-thread crashes as one line each, never a traceback."""
    logger = logging.getLogger("redlease")
    handler = _OneLineWarnings(url)
    old_hook, old_propagate = threading.excepthook, logger.propagate

    def thread_died(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "a thread"
        note(
            f"warning: background thread {name} failed: {args.exc_type.__name__}: {args.exc_value}",
            url,
        )

    logger.addHandler(handler)
    logger.propagate = False
    threading.excepthook = thread_died
    try:
        with warnings.catch_warnings():
            # a RedleaseWarning is also logged: said once, as one line, by the handler
            warnings.simplefilter("ignore", RedleaseWarning)
            yield
    finally:
        threading.excepthook = old_hook
        logger.removeHandler(handler)
        logger.propagate = old_propagate


def run(url: str, options: RunOptions) -> int:
    """Take the lock, run the command, release; return the exit status (see the module)."""
    _check_durations(options)
    sup = Supervisor()
    with signals_to(sup.on_signal), quiet_background(url):
        try:
            return _run(url, options, sup)
        except Interrupted as exc:
            sup.waiting = False
            note(
                f"interrupted by {signal_name(exc.signum)} while waiting for lock {options.name!r}"
            )
            return 128 + exc.signum


def _check_durations(options: RunOptions) -> None:
    """``--lease``, ``--watchdog``, ``--wait``, ``--at-least`` and ``--grace`` as the library
    takes them (a lease or watchdog lease from 10 ms to 10 years), refused as a usage error
    before anything is sent."""
    try:
        if options.lease is not None:
            lease_seconds(options.lease, "--lease")
        lease_seconds(options.watchdog, "--watchdog")
        wait_seconds(options.wait, "--wait")
        non_negative_seconds(options.at_least, "--at-least")
        non_negative_seconds(options.grace, "--grace")
    except InvalidArgumentError as exc:
        raise UsageError(str(exc)) from None
    if options.lease is not None and options.at_least > options.lease:
        raise UsageError(
            f"--at-least ({options.at_least:g} s) must not be longer than --lease"
            f" ({options.lease:g} s)"
        )


def _socket_timeout(options: RunOptions) -> float:
    """Short enough that an unreachable server is noticed well within a watchdog lease."""
    if options.lease is not None:
        return COMMAND_TIMEOUT
    return max(1.0, min(COMMAND_TIMEOUT, options.watchdog / 3))


def _run(url: str, options: RunOptions, sup: Supervisor) -> int:
    sup.waiting = True  # from here a forwarded signal stops the wait (and the connect)
    client = connect(
        url,
        watchdog_timeout=options.watchdog,
        socket_timeout=_socket_timeout(options),
        # status and list show the command beside the host and pid (passwords masked)
        holder_info=shlex.join(scrub_words(options.argv)),
        eviction=options.eviction,
    )
    try:
        try:
            lock = client.lock(options.name, lease=options.lease, on_lease_lost=sup.on_lease_lost)
        except ValueError as exc:  # e.g. braces that do not form a hash tag
            raise UsageError(f"bad lock NAME: {exc}") from None
        started = time.monotonic()
        try:
            got = _acquire(lock, options.wait)
            sup.waiting = False
        except Interrupted:
            sup.waiting = False
            _give_back(lock)  # in case the grant landed just before the signal
            raise
        if not got:
            if not options.verbose:
                pass  # silent, as flock -n: the exit status says it (cron mails nobody)
            elif options.wait == 0:
                note(f"lock {options.name!r} is busy (--wait 0: tried once)")
            else:
                note(f"lock {options.name!r} is busy: not acquired within {options.wait:g} s")
            return options.conflict_exit_code
        acquired_at = time.monotonic()
        if options.verbose:
            note(f"took lock {options.name!r} in {acquired_at - started:.6f} s")
        try:
            deadline = _lease_deadline(lock, options.lease, sup)
        except (RedleaseError, redis.exceptions.RedisError, OSError):
            _give_back(lock)
            raise
        status = _run_child(options, sup, deadline)
        return _finish(lock, options, sup, status, url, acquired_at)
    finally:
        sup.waiting = False
        client.close()


def _acquire(lock: Lock, wait: float | None) -> bool:
    if wait is None:
        return lock.acquire()
    if wait == 0:
        return lock.acquire(blocking=False)
    return lock.acquire(timeout=wait)


def _give_back(lock: Lock) -> None:
    with contextlib.suppress(RedleaseError, redis.exceptions.RedisError, OSError):
        lock.release()


def _lease_deadline(lock: Lock, lease: float | None, sup: Supervisor) -> float | None:
    """With ``--lease``: the local-clock moment the lease has certainly not yet run out on the
    server (the TTL read back, counted from before the read, minus a 1% + 2 ms allowance)."""
    if lease is None:
        return None
    before = time.monotonic()
    ttl = lock.statistics().ttl
    if ttl is None:
        sup.lose("the lock was gone right after it was acquired")
        return before
    return before + ttl - (ttl * 0.01 + 0.002)


def _start(options: RunOptions, sup: Supervisor) -> int | None:
    """Start the command; an exit status when it could not be started (or a signal came
    first), ``None`` when it runs."""
    if sup.pending:
        note(f"got {signal_name(sup.pending[0])} before the command started: not starting it")
        return 128 + sup.pending[0]
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    try:
        proc = subprocess.Popen(options.argv)
    except FileNotFoundError as exc:
        note(f"cannot run {options.argv[0]!r}: {exc.strerror or 'command not found'}")
        return 127
    except OSError as exc:
        note(f"cannot run {options.argv[0]!r}: {exc.strerror or exc}")
        return 126
    sup.proc = proc
    for signum in list(sup.pending):  # came between the check above and sup.proc being set
        sup.forward(signum)
    return None


def _run_child(options: RunOptions, sup: Supervisor, lease_deadline: float | None) -> int:
    """Start the command and wait for it, stopping it if the lease is lost."""
    not_started = _start(options, sup)
    if not_started is not None:
        return not_started
    proc = sup.proc
    assert proc is not None
    announced = False
    kill_at: float | None = None
    while True:  # ends when the child does; a stopped child ends within --grace
        if sup.lost.is_set():
            try:
                return exit_status(proc.wait(timeout=POLL))
            except subprocess.TimeoutExpired:
                pass
        else:
            sup.lost.wait(POLL)  # a loss (told by the client's threads) wakes this at once
            status = proc.poll()
            if status is not None:
                return exit_status(status)
        now = time.monotonic()
        if lease_deadline is not None and now >= lease_deadline:
            sup.lose(f"its lease of {options.lease:g} s ran out")
        if sup.lost.is_set() and not announced:
            announced = True
            what = f"lost the lock {options.name!r} while the command ran ({sup.lost_reason})"
            if options.keep_going:
                note(f"{what}; --keep-going: letting the command finish")
            else:
                note(
                    f"{what}; stopping the command: SIGTERM now, SIGKILL after {options.grace:g} s"
                )
                sup.forward(signal.SIGTERM)
                kill_at = now + options.grace
        if kill_at is not None and now >= kill_at:
            kill_at = None
            note(f"the command did not stop within {options.grace:g} s of SIGTERM: SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


def _finish(
    lock: Lock, options: RunOptions, sup: Supervisor, status: int, url: str, acquired_at: float
) -> int:
    """Release the lock after the command ended (with ``--at-least``, kept taken until that
    long after it was taken); the exit status of ``run``."""
    announced = sup.lost.is_set()
    failure: Exception | None = None
    try:
        sup.waiting = True  # a signal now gives up a release stuck on an unreachable server
        kept = options.at_least - (time.monotonic() - acquired_at)
        lock.release(keep_for=kept if kept > 0 else None)
    except (Interrupted, RedleaseError, redis.exceptions.RedisError, OSError) as exc:
        failure = exc
    finally:
        sup.waiting = False
    if isinstance(failure, Interrupted):
        note(
            f"interrupted by {signal_name(failure.signum)} while releasing lock"
            f" {options.name!r}; it is freed when its lease runs out"
        )
    elif isinstance(failure, NotOwnedError):  # LeaseLostError: noticed now or before
        sup.lose(str(failure))
    elif failure is not None:
        note(
            f"warning: could not release lock {options.name!r} at {address_of(url)}: {failure};"
            " it is freed when its lease runs out",
            url,
        )
    if not sup.lost.is_set():
        return status
    if not announced:
        note(f"lost the lock {options.name!r} while the command ran ({sup.lost_reason})")
    if sup.proc is not None:
        note(
            f"the command exited with status {status}; exiting with {EX_LEASE_LOST}"
            " because the lease was lost"
        )
    return EX_LEASE_LOST


# --- the command's arguments ------------------------------------------------------------


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


def add_run(commands: Commands) -> None:
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
