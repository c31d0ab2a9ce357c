"""The ``redlease`` command line: ``run`` (a distributed flock), ``status``, ``list``,
``release --force``, ``demo`` and ``bench``; here the parser and ``main``.

Errors a user can cause end in one line on stderr, never a traceback: exit 2 for usage errors
(argparse's convention, and no server given), 1 for runtime errors (server down, wrong
password). A password in a URL is never printed: commands show ``host:port`` and every message
shows every URL masked (its password as ``***``, found by the URL's structure).

Each command's arguments (its ``add_*`` function) live with its handler: ``run`` in
``run.py``, ``status``/``list``/``release`` in ``locks.py``, ``bench`` in ``bench.py``,
``demo`` in ``demo.py``; what they share (errors, exit statuses, URL masking, argument types,
the connection) in ``common.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis.exceptions

from ..errors import RedleaseError
from .bench import add_bench
from .common import (
    EX_LEASE_LOST,
    EX_NOT_ACQUIRED,
    PROG,
    URL_ENV,
    CommandError,
    Handler,
    Parser,
    UsageError,
    one_line,
    redact,
    remember_urls,
    version_text,
)
from .demo import add_demo
from .locks import add_list, add_release, add_status
from .run import add_run

if TYPE_CHECKING:
    from .._sync.client import Client

__all__ = ["EX_LEASE_LOST", "EX_NOT_ACQUIRED", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``redlease`` parser with one subparser per command."""
    parser = Parser(
        prog=PROG,
        description="Redisson-compatible distributed locks on Redis and Valkey.",
        epilog=f"Commands that need a server take --url URL or ${URL_ENV}.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version_text()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_run(commands)
    add_status(commands)
    add_list(commands)
    add_release(commands)
    add_demo(commands)
    add_bench(commands)
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


def _fail(message: str, url: str | None) -> int:
    print(f"{PROG}: error: {one_line(redact(message, url))}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None, *, client: Client | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the command, return the exit status.

    ``client``: ``status``, ``list`` and ``release`` run on this client (left open) instead
    of connecting to ``--url`` or ``$REDLEASE_URL``, as a framework's own command does
    (``python manage.py redlease``: ``redlease.contrib.django``)."""
    words = list(sys.argv[1:] if argv is None else argv)
    remember_urls(words)
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
