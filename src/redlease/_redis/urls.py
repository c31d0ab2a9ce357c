"""Sentinel URLs: the forms ``Client.from_url`` and ``AsyncClient.from_url`` accept for a
Sentinel-managed master (redis-py has none), and what may be printed about a URL.

Two forms, the ones users already have in their configuration:

* the Python form (redis-sentinel-url, Flask-Redis-Sentinel, redisvl)::

      redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?option=value&...]

* Lettuce's (Spring Data Redis, Java services)::

      redis-sentinel://[[user:]password@]host[:port][,host[:port]...][/db][?option=value&...]#service

  (the service may also be given as ``?sentinelMasterId=service``; a bare ``password@`` is a
  password, as in Lettuce).

``rediss+sentinel://`` and ``rediss-sentinel://`` use TLS to the sentinels and to the master.
A port defaults to 26379; an IPv6 address goes in brackets (``[::1]:26379``). The user and
the password are the master's and are percent-decoded, as in a ``redis://`` URL. An option
named ``sentinel_<option>`` (``sentinel_password``, ``sentinel_username``,
``sentinel_socket_timeout``...) is for the sentinels; ``min_other_sentinels`` is
``redis.sentinel.Sentinel``'s; Lettuce's ``timeout`` (``5s``, ``500ms``), ``database`` and
``clientName`` are understood in its form; every other option is the master's, parsed as
redis-py parses the options of a ``redis://`` URL (``socket_timeout=2``, ``db=1``,
``ssl_cert_reqs=none``...). The sentinels take the master's ``socket_*`` options (and with
TLS its ``ssl_*`` options) unless given their own, as redis-py's ``Sentinel`` does.

Parsing does no I/O, and no message here ever contains a password.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, unquote, urlencode

import redis
import redis.sentinel
from redis.connection import parse_url as _untyped_parse_url

from ..errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    import redis.asyncio

SENTINEL_PORT = 26379
"""The port of a sentinel given without one."""

_PYTHON_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
_LETTUCE_SCHEMES = {"redis-sentinel": False, "rediss-sentinel": True}
_PYTHON_FORM = "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]"
_LETTUCE_FORM = "redis-sentinel://[[user:]password@]host[:port][,host[:port]...][/db]#service"
_NOT_OPTIONS = frozenset({"host", "port", "path", "connection_class", "connection_pool"})
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)?")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

_parse_url = cast(Callable[[str], dict[str, Any]], _untyped_parse_url)  # redis-py: untyped


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` has one of the Sentinel URL schemes."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in {**_PYTHON_SCHEMES, **_LETTUCE_SCHEMES}


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed Sentinel URL. Its repr never shows the connection options (the password)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    tls: bool = False
    connection_kwargs: dict[str, Any] = field(default_factory=dict, repr=False)
    """The master's connection options given in the URL (user, password, db, options)."""
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict, repr=False)
    """The sentinels' own options given in the URL (``sentinel_<option>``)."""
    min_other_sentinels: int | None = None

    @property
    def address(self) -> str:
        """What is safe to print about it: ``sentinel <service> at host:port,...``."""
        return sentinel_address(self.service, self.sentinels)

    def arguments(self, redis_kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``redis.sentinel.Sentinel``'s keyword arguments (the master's connection options,
        with ``min_other_sentinels`` when given) and its ``sentinel_kwargs``, ``from_url``'s
        keyword arguments merged in: the URL's options win, as in ``redis.Redis.from_url``; a
        ``sentinel_kwargs`` keyword argument adds options for the sentinels."""
        extra = dict(redis_kwargs)
        explicit = dict(extra.pop("sentinel_kwargs", None) or {})
        connection = {**extra, **self.connection_kwargs}
        if self.min_other_sentinels is not None:
            connection["min_other_sentinels"] = self.min_other_sentinels
        sentinel = {k: v for k, v in connection.items() if k.startswith("socket_")}
        if self.tls:
            connection["ssl"] = True
            sentinel.update({k: v for k, v in connection.items() if k.startswith("ssl")})
        sentinel.update(explicit)
        sentinel.update(self.sentinel_kwargs)
        return connection, sentinel


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse a Sentinel URL (see the module's docstring); ``InvalidArgumentError`` naming
    what is wrong (with the URL's passwords masked) when it is not a valid one."""
    shown = masked_url(url)

    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    lettuce = scheme in _LETTUCE_SCHEMES
    form = _LETTUCE_FORM if lettuce else _PYTHON_FORM

    def bad(what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"bad Sentinel URL {shown!r}: {what} (use {form})")

    if not sep or scheme not in {**_PYTHON_SCHEMES, **_LETTUCE_SCHEMES}:
        form = f"{_PYTHON_FORM} or {_LETTUCE_FORM}"
        raise bad("not a Sentinel URL scheme")
    tls = _LETTUCE_SCHEMES[scheme] if lettuce else _PYTHON_SCHEMES[scheme]
    if ambiguous_userinfo(url):
        raise bad("its user or password holds an unencoded '/', '?' or '#': percent-encode them")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hostpart = netloc.rpartition("@")
    connection: dict[str, Any] = {}
    if at:
        user, password = _credentials(userinfo, lettuce)
        if user:
            connection["username"] = user
        if password:
            connection["password"] = password
    sentinels = tuple(_sentinel(text, bad) for text in hostpart.split(","))

    segments = path.split("/") if path else []
    if segments and not segments[-1]:
        segments.pop()  # a trailing slash
    if any(not s for s in segments):
        raise bad("an empty path segment")
    service = ""
    if not lettuce:
        if len(segments) > 2:
            raise bad("too many path segments after the hosts: expected /service[/db]")
        service = unquote(segments.pop(0)) if segments else ""
    elif len(segments) > 1 or (segments and not segments[0].isdigit()):
        raise bad("the path after the hosts is the db; the service goes after '#'")
    elif fragment:
        service = unquote(fragment)
    db_text = segments[0] if segments else None

    sentinel_options: dict[str, Any] = {}
    min_other: int | None = None
    seen: set[str] = set()
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in seen:
            raise bad(f"option {name!r} given twice")
        if not value:
            raise bad(f"option {name!r} has no value")
        seen.add(name)
        if name == "min_other_sentinels":
            min_other = _count(value, name, bad)
        elif lettuce and name == "sentinelMasterId":
            service = value
        elif lettuce and name == "timeout":
            connection["socket_timeout"] = _duration(value, name, bad)
        elif lettuce and name == "database":
            db_text = value
        elif lettuce and name == "clientName":
            connection["client_name"] = value
        elif name.startswith("sentinel_"):
            sentinel_options[name[len("sentinel_") :]] = _option(name, value, bad)
        else:
            connection[name] = _option(name, value, bad)
    if not service:
        raise bad("no service (master) name")
    if "db" not in connection and db_text is not None:
        connection["db"] = _count(unquote(db_text), "database number", bad)
    return SentinelUrl(sentinels, service, tls, connection, sentinel_options, min_other)


def sentinel_address(service: str, sentinels: Any) -> str:
    """``sentinel <service> at host:port,...``, from ``(host, port)`` pairs."""
    hosts = ",".join(f"[{h}]:{p}" if ":" in str(h) else f"{h}:{p}" for h, p in sentinels)
    return f"sentinel {service} at {hosts}"


def _split_userinfo(rest: str) -> tuple[str, str, str]:
    """``(userinfo, "@", after)`` of what follows ``scheme://``, or ``("", "", rest)``.

    The userinfo ends at the last ``@`` before the host: a password may hold any character,
    even an unencoded ``/``, ``?``, ``#``, ``@`` or ``:``. An ``@`` after the first of
    ``/?#`` still ends the userinfo, unless a ``=`` comes between them (then it is the value
    of a query option, as in ``?client_name=me@host``)."""
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@")
    if at < 0:
        return "", "", rest
    if at > end and "=" in rest[end:at]:
        at = rest.rfind("@", 0, end)  # the '@' is in an option's value
        if at < 0:
            return "", "", rest
    return rest[:at], "@", rest[at + 1 :]


def _userinfo_shown(userinfo: str, scheme: str) -> str:
    """What may be printed of a URL's userinfo: the user (never with ``/?#`` in it, which
    means the split was not sure), and ``***`` for the password."""
    user, colon, _ = userinfo.partition(":")
    if colon:
        return f"{user}:***" if not any(c in user for c in "/?#") else "***"
    if scheme.lower() in _LETTUCE_SCHEMES or any(c in user for c in "/?#"):
        return "***"  # Lettuce's bare ``password@``, or not surely a user
    return user


def masked_url(url: str) -> str:
    """``url`` with its password and every ``...password=`` option shown as ``***``; found by
    the URL's structure (``scheme://[user[:password]@]host...``), never by searching the
    password's text, so an unencoded ``/``, ``?``, ``#``, ``@`` or ``:`` in it is masked too."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # no scheme (a URL written without redis://): all before the host is secret
        userinfo, at, after = _split_userinfo(url)
        return f"***@{after}" if at else url
    userinfo, at, after = _split_userinfo(rest)
    netloc_head = f"{_userinfo_shown(userinfo, scheme)}@" if at and userinfo else at
    end = min((i for i in map(after.find, "/?#") if i >= 0), default=len(after))
    hosts, tail = after[:end], after[end:]
    question = tail.find("?")
    if question >= 0:
        path, query = tail[:question], tail[question + 1 :]
        # a password option's value runs to the next '&' ('#' included: it may be in it)
        query = "&".join(_masked_option(pair) for pair in query.split("&"))
        tail = f"{path}?{query}"
    return f"{scheme}{sep}{netloc_head}{hosts}{tail}"


def ambiguous_userinfo(url: str) -> bool:
    """Whether the user or password of ``url`` holds an unencoded ``/``, ``?`` or ``#``:
    redis-py would take part of the password for the host, port or db."""
    _, sep, rest = url.partition("://")
    if not sep:
        return False
    userinfo, at, _ = _split_userinfo(rest)
    return bool(at) and any(c in userinfo for c in "/?#")


_SAFE_PARSE_ERRORS = (
    "Redis URL must specify one of the following schemes",
    "Port out of range",
    "Invalid value for ",
    "Invalid SSL Certificate Requirements Flag",
)
"""redis-py's URL errors that never quote a part of the URL's netloc: shown as they are."""


def url_error(url: object, exc: BaseException | None = None) -> InvalidArgumentError:
    """An ``InvalidArgumentError`` for a URL redis-py refused (``exc``), or for one that is
    not a string: it shows the URL masked and redis-py's message only when that message
    cannot quote a password."""
    if not isinstance(url, str):
        return ArgumentTypeError(f"a Redis URL must be a str, got {type(url).__name__}")
    shown = masked_url(url)
    if ambiguous_userinfo(url):
        why = "its user or password holds an unencoded '/', '?' or '#': percent-encode them"
        why += " (%2F, %3F, %23)"
    elif exc is not None and str(exc).startswith(_SAFE_PARSE_ERRORS):
        why = str(exc)
    elif exc is not None and "Port" in str(exc):
        why = "the port is not a number"
    else:
        why = "redis-py cannot parse it"
    return InvalidArgumentError(
        f"bad Redis URL {shown!r}: {why} (use redis://[[user]:password@]host[:port][/db],"
        " rediss://..., unix:///path or redis+sentinel://...)"
    )


def checked_url(url: object) -> str:
    """``url`` if it is a string redis-py can parse into what it says, else ``url_error``.
    Sentinel URLs are checked by ``parse_sentinel_url``."""
    if not isinstance(url, str):
        raise url_error(url)
    if is_sentinel_url(url):
        return url
    if ambiguous_userinfo(url):
        raise url_error(url)
    try:
        _parse_url(url)
    except (ValueError, TypeError) as exc:
        error = url_error(url, exc)
    else:
        return url
    raise error  # outside the except: redis-py's error (it may quote the password) is not its
    # __context__ either


def url_secrets(url: str) -> list[str]:
    """The passwords in ``url`` (its own and every ``...password=`` option), raw and
    percent-decoded, longest first: what must never be printed."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return []
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    userinfo, at, _ = rest[:end].rpartition("@")
    found: set[str] = set()
    if at and userinfo:
        _, colon, raw = userinfo.partition(":")
        if not colon and scheme.lower() in _LETTUCE_SCHEMES:
            raw = userinfo  # Lettuce's bare ``password@``
        if raw:
            found.update({raw, unquote(raw)})
    query = rest[end:].partition("#")[0].partition("?")[2]
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        if eq and value and name.lower().endswith("password"):
            found.update({value, unquote(value), unquote(value.replace("+", " "))})
    return sorted(found, key=len, reverse=True)


def _masked_option(pair: str) -> str:
    name, eq, value = pair.partition("=")
    return f"{name}=***" if eq and value and name.lower().endswith("password") else pair


def _credentials(userinfo: str, lettuce: bool) -> tuple[str | None, str | None]:
    """(user, password), percent-decoded: ``user:password``, ``:password``; a bare word is
    a user in the Python form (as redis-py reads ``redis://user@host``) and a password in
    Lettuce's."""
    user, colon, password = userinfo.partition(":")
    if not colon:
        return (None, unquote(user) or None) if lettuce else (unquote(user) or None, None)
    return unquote(user) or None, unquote(password) or None


def _sentinel(text: str, bad: Callable[[str], InvalidArgumentError]) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``."""
    if not text:
        raise bad("an empty sentinel address (no host, or two commas)")
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise bad(f"unclosed '[' in sentinel address {text!r}")
        host, after = text[1:close], text[close + 1 :]
        if after and not after.startswith(":"):
            raise bad(f"unexpected {after!r} after ']' in sentinel address {text!r}")
        port_text: str | None = after[1:] if after else None
    elif text.count(":") > 1:
        raise bad(f"sentinel address {text!r}: put an IPv6 address in brackets, [::1]:26379")
    else:
        host, colon, after = text.partition(":")
        port_text = after if colon else None
    if not host:
        raise bad(f"no host in sentinel address {text!r}")
    if port_text is None:
        return unquote(host), SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise bad(f"bad port {port_text!r} in sentinel address {text!r} (1 to 65535)")
    return unquote(host), int(port_text)


def _option(name: str, value: str, bad: Callable[[str], InvalidArgumentError]) -> Any:
    """One connection option, parsed exactly as redis-py parses it in a ``redis://`` URL."""
    bare = name.removeprefix("sentinel_")
    if not bare or bare in _NOT_OPTIONS:
        raise bad(f"{name!r} is not an option of a Sentinel URL")
    try:
        parsed = _parse_url("redis://placeholder/?" + urlencode({bare: value}))
    except ValueError:
        raise bad(f"bad value for option {name!r}") from None
    return parsed[bare]


def _count(value: str, what: str, bad: Callable[[str], InvalidArgumentError]) -> int:
    if not value.isdigit():
        raise bad(f"bad {what} {value!r} (a whole number >= 0)")
    return int(value)


def _duration(value: str, what: str, bad: Callable[[str], InvalidArgumentError]) -> float:
    """Lettuce's durations: ``5`` (seconds), ``5s``, ``500ms``, ``1m``..."""
    match = _DURATION.fullmatch(value)
    seconds = float(match[1]) * _UNITS[match[2] or "s"] if match else 0.0
    if seconds <= 0:
        raise bad(f"bad {what} {value!r} (a positive duration: 5, 5s, 500ms, 1m)")
    return seconds


def sentinel_master(url: str, redis_kwargs: dict[str, Any]) -> tuple[redis.Redis, list[Any]]:
    """A ``redis.Redis`` over the master a Sentinel URL names (it asks the sentinels where the
    master is at every connect), and the sentinels' own clients, to close with it."""
    parsed = parse_sentinel_url(url)
    connection, sentinel_kwargs = parsed.arguments(redis_kwargs)
    make: Any = redis.sentinel.Sentinel  # redis-py leaves it untyped
    sentinel = make(list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **connection)
    return cast("redis.Redis", sentinel.master_for(parsed.service)), list(sentinel.sentinels)


def async_sentinel_master(
    url: str, redis_kwargs: dict[str, Any]
) -> tuple[redis.asyncio.Redis, list[Any]]:
    """The asyncio twin of ``sentinel_master`` (``redis.asyncio.sentinel``)."""
    import redis.asyncio.sentinel  # only for asyncio users

    parsed = parse_sentinel_url(url)
    connection, sentinel_kwargs = parsed.arguments(redis_kwargs)
    make: Any = redis.asyncio.sentinel.Sentinel  # redis-py leaves it untyped
    sentinel = make(list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **connection)
    return cast("redis.asyncio.Redis", sentinel.master_for(parsed.service)), list(
        sentinel.sentinels
    )
