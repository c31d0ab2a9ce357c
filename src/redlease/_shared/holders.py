"""Who holds a lock: each client's holder record (no I/O here).

A lock's hash keeps Redisson's layout (``<client uuid>:<thread>`` -> hold count), which Java's
Redisson reads: nothing is added to it per holder. Instead each client writes one record key,
``redlease:client:{<client uuid>}``, a small JSON object (host, pid, process name, and the
description the client was given, e.g. ``redlease run``'s command), with a TTL, at its first
use of the server and again every half hour while it is in use or its watchdog runs. Nothing
is written per acquire. ``status``, ``list`` and ``statistics()`` find it by the uuid in each
owner field (on a cluster the record has a slot of its own: one more read, not a script's).

Passwords are never stored: a description is scrubbed first (``scrub_words`` /
``scrub_text``): a URL's password (and ``...password=`` query options), a glued ``-pSECRET``
(mysql), the value of an option or assignment whose name says it is a secret
(``--password=x``, ``--token x``, ``DB_PASSWORD=x``, ...), redis-cli's ``-a PASSWORD``, and
the client's own passwords wherever they appear (``sh -c '... PASSWORD ...'``).
Anything else is stored as given: keep other secrets out of command lines (the environment
or a file).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .._redis.urls import masked_url
from ..stats import HolderInfo

RECORD_TTL = 5400
"""Seconds a holder record lives unless rewritten (it is rewritten every half hour while the
client is in use or its watchdog runs: see ``_servers.RECHECK``)."""
MAX_INFO = 1000
"""Characters of a description kept (a longer one is cut, ending with ``...``)."""
MASK = "***"

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]*")
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|api[_-]?key|auth|credential", re.IGNORECASE)
_QUOTES = "'\""


def record_key(client_id: str) -> str:
    """The holder record of the client ``client_id`` (its own hash slot)."""
    return f"redlease:client:{{{client_id}}}"


def client_of(owner: str) -> str:
    """The client uuid of an owner field ``<uuid>:<thread>``."""
    return owner.rsplit(":", 1)[0]


def process_name() -> str:
    """What ``ps`` and ``top`` show for this process (``/proc/self/comm`` on Linux), else the
    name of the script or of the interpreter."""
    try:
        name = Path("/proc/self/comm").read_text().strip()
    except OSError:
        name = ""
    return name or Path(sys.argv[0] if sys.argv and sys.argv[0] else sys.executable).name


def record(info: str | None) -> str:
    """This process's holder record, as stored."""
    return json.dumps(
        {"host": socket.gethostname(), "pid": os.getpid(), "process": process_name(), "info": info},
        separators=(",", ":"),
    )


def parse(value: Any) -> HolderInfo | None:
    """A stored record as a ``HolderInfo``; ``None`` for none or a value that is not one."""
    if value is None:
        return None
    try:
        data = json.loads(value.decode() if isinstance(value, bytes) else str(value))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None

    def text(key: str) -> str | None:
        found = data.get(key)
        return found if isinstance(found, str) else None

    pid = data.get("pid")
    return HolderInfo(
        host=text("host"),
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        process=text("process"),
        info=text("info"),
    )


def holder_infos(
    owners: Iterable[str], records: dict[str, HolderInfo | None]
) -> dict[str, HolderInfo]:
    """Each owner's record (an empty ``HolderInfo`` when its client wrote none or it expired)."""
    return {owner: records.get(client_of(owner)) or HolderInfo() for owner in owners}


def _mask_word(word: str) -> str:
    """One word with a URL's password masked (a word may hold a URL anywhere in it)."""
    return _URL.sub(lambda m: masked_url(m.group(0)), word)


def _secret_name(option: str) -> bool:
    return bool(_SECRET_NAME.search(option))


def scrub_words(argv: Sequence[str]) -> list[str]:
    """A command line's words with what looks like a password replaced by ``***``."""
    out: list[str] = []
    program = Path(argv[0]).name if argv else ""
    cli = program in ("redis-cli", "valkey-cli", "keydb-cli")
    mask_next = False
    for word in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        bare = word.strip(_QUOTES)
        name, eq, _ = bare.partition("=")
        if bare.startswith("-p") and not bare.startswith("--") and len(bare) > 2:
            out.append("-p" + MASK)  # mysql -pSECRET
        elif eq and (name.startswith("-") or name.isidentifier()) and _secret_name(name):
            out.append(f"{name}={MASK}")  # --password=x, DB_PASSWORD=x
        elif (
            bare.startswith("-")
            and not bare.startswith("--no-")  # a switch (--no-auth-warning) takes no value
            and not eq
            and _secret_name(bare.lstrip("-"))
        ):
            out.append(word)  # --password x: the next word is the secret
            mask_next = True
        elif cli and bare == "-a":
            out.append(word)  # redis-cli -a PASSWORD
            mask_next = True
        else:
            out.append(_mask_word(word))
    return out


SHORT_SECRET = 4
"""A secret shorter than this is masked only where it stands apart (not inside a longer run of
letters and digits): a password ``a`` must not turn "backup" into "b***ckup", which would
be unreadable and tell the reader the password too."""


def _mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret masked: as given, percent-encoded (in a
    URL) and as ``shlex.quote`` writes it inside a quoted word; a short one (``SHORT_SECRET``)
    only where no letter or digit touches it (``-a pw``, ``:pw@host``, ``'pw'``)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        for form in dict.fromkeys((secret, quote(secret, safe=""), secret.replace("'", "'\"'\"'"))):
            if len(secret) >= SHORT_SECRET:
                text = text.replace(form, MASK)
            else:
                apart = rf"(?<![0-9A-Za-z]){re.escape(form)}(?![0-9A-Za-z])"
                text = re.sub(apart, lambda _: MASK, text)
    return text


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A free-form description scrubbed word by word as ``scrub_words`` does, its spacing
    kept, and cut to ``MAX_INFO`` characters. Each of ``secrets`` (the client's passwords) is
    masked wherever it appears, even inside a word (``sh -c '... PASSWORD ...'``)."""
    text = _mask_secrets(text, secrets)
    parts = re.split(r"(\s+)", text)
    words = scrub_words([p for p in parts[::2]])
    parts[::2] = words
    out = "".join(parts)
    if len(out) > MAX_INFO:
        out = out[: MAX_INFO - 3] + "..."
    return out
