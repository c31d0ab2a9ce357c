"""The ``redlease`` command line: ``redlease demo`` now; ``run``, ``status``, ``list``,
``release`` and ``bench`` slot in as further subcommands (one ``_add_*`` function each).

Errors a user can cause end in one line on stderr, never a traceback: exit 2 for usage errors
(argparse's convention), 1 for runtime errors (server down, wrong password). A password in a
URL is never printed: commands show ``host:port`` and every error message is scrubbed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.exceptions
from redis.connection import parse_url as _untyped_parse_url

from .errors import RedleaseError

__all__ = ["build_parser", "main"]

PROG = "redlease"
_parse_url: Callable[[str], dict[str, Any]] = _untyped_parse_url  # redis-py leaves it untyped
Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A runtime failure a command reports as one line on stderr (exit status 1)."""


def _version() -> str:
    try:
        return version("redlease")
    except PackageNotFoundError:
        return "unknown"


def secrets_of(url: str) -> list[str]:
    """The password (raw and percent-decoded) in ``url``, to scrub from anything printed."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    if not password:
        return []
    return sorted({password, unquote(password)}, key=len, reverse=True)


def redact(text: str, url: str | None) -> str:
    """``text`` with the URL's password replaced by ``***``."""
    if url:
        for secret in secrets_of(url):
            text = text.replace(secret, "***")
    return text


def address_of(url: str) -> str:
    """``host:port`` (or ``unix:/path``) of a Redis URL: what is safe to print about it."""
    parts = _parse_url(url)
    if "path" in parts:
        return f"unix:{parts['path']}"
    host = str(parts.get("host") or "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.get('port') or 6379}"


def redis_url(value: str) -> str:
    """argparse type: a URL redis-py accepts (redis://, rediss://, unix://)."""
    try:
        address_of(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not a Redis URL: {redact(str(exc), value)}"
            " (use redis://[:password@]host[:port][/db], rediss://... or unix:///path)"
        ) from None
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


def _cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo on ``--url``, or on a private server started (and stopped) for it."""
    from .demo import DemoError, run_demo

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
        from .testing import RedisServer

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


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    """The ``redlease`` parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Redisson-compatible distributed locks on Redis and Valkey."
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_demo(commands)
    return parser


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "unknown error"


def _warn(message: str, url: str | None) -> None:
    print(f"{PROG}: warning: {_one_line(redact(message, url))}", file=sys.stderr, flush=True)


def _fail(message: str, url: str | None) -> int:
    print(f"{PROG}: error: {_one_line(redact(message, url))}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the command, return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage error (2), --help or --version (0)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    handler: Handler = args.handler
    url: str | None = getattr(args, "url", None)
    try:
        return handler(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except CommandError as exc:
        return _fail(str(exc), url)
    except redis.exceptions.AuthenticationError as exc:
        return _fail(f"authentication failed: {exc}", url)
    except (RedleaseError, redis.exceptions.RedisError, OSError, RuntimeError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}", url)
