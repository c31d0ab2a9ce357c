"""What every ``redlease`` subcommand shares: exit statuses, errors, the parser class, URL
masking, argument types, the server to use and the connection to it."""

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

if TYPE_CHECKING:
    from .._sync.client import Client

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


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``redlease run: error: ...``), passwords scrubbed."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {one_line(scrub(message))}{hint}\n")


if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[Parser]


def version_text() -> str:
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


def scrub(text: str) -> str:
    return redact(text, None)


def remember_urls(argv: Sequence[str]) -> None:
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


def one_line(text: str) -> str:
    return " ".join(cli_words(text).split()) or "unknown error"


def warn(message: str, url: str | None) -> None:
    print(f"{PROG}: warning: {one_line(redact(message, url))}", file=sys.stderr, flush=True)
