"""Every ```python block of README.md and docs/*.md, run against a real server.

One test per document: its blocks run in order in one namespace, as a reader would paste them
into one session. The namespace holds ``url`` (a private server's URL, where the text says
``redis://127.0.0.1:6379/0`` or "your server") and ``client`` (a ``Client`` on it, closed after
the document); redlock.md also gets ``urls``, three independent masters. A client a document
makes itself and leaves open (``client = Client.from_url(url)``, as a reader keeps one per
process) is closed by the test after the document's last block, and a server it starts is
stopped, so no page has to end with a ``client.close()`` block that means nothing to its
reader. docs/django.md runs with Django configured (``REDLEASE`` on the document's server: its
settings blocks only show the shape); docs/fencing-database.md gets ``database_url``, a
private PostgreSQL's, which is Django's default database there. A block after
``<!-- skip: next "why" -->`` is not run (only where a real Sentinel or cluster is needed).
Shell, console, SQL and text blocks are not run.
"""

from __future__ import annotations

import re
import unittest
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

import redlease
from redlease.testing import PostgresServer, RedisServer, find_server

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# documents whose examples need more than one server
MASTERS = {"redlock.md": 3}


def _django(stack: ExitStack, url: str) -> None:
    """docs/django.md: Django set up (unless a test of this process did it already), with
    ``REDLEASE`` pointing at the document's server for as long as the document runs."""
    import django
    from django.conf import settings
    from django.test import override_settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "redlease.contrib.django"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        )
        django.setup()
    stack.enter_context(override_settings(REDLEASE={"URL": url}))


def _fencing_database(stack: ExitStack, url: str) -> dict[str, object]:
    """docs/fencing-database.md: a private PostgreSQL (``database_url``, SQLAlchemy's URL with
    psycopg), which is also Django's default database while the document runs."""
    from django.db import connections
    from django.db.utils import load_backend

    _django(stack, url)
    server = stack.enter_context(PostgresServer())
    engine = "django.db.backends.postgresql"
    database = {"ENGINE": engine, "NAME": "postgres", "USER": "postgres",
                "HOST": server.host, "PORT": str(server.port)}  # fmt: skip
    filled = connections.configure_settings({"default": database})["default"]
    previous = connections["default"]
    connections["default"] = load_backend(engine).DatabaseWrapper(filled, "default")

    def restore() -> None:
        connections["default"].close()
        connections["default"] = previous

    stack.callback(restore)
    return {"database_url": server.url_for("psycopg")}


# documents whose examples need a framework set up first (and the names it gives them)
SETUP: dict[str, Callable[[ExitStack, str], dict[str, object] | None]] = {
    "django.md": _django,
    "fencing-database.md": _fencing_database,
}

_SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


@pytest.fixture(scope="module")
def docs_server() -> Iterator[RedisServer]:
    """One private server (the newest binary found) for every document's examples."""
    with RedisServer(find_server()) as server:
        yield server


def test_documents_found() -> None:
    assert (ROOT / "mkdocs.yml").exists()
    assert len(DOCUMENTS) > 10, DOCUMENTS


def _close_clients(namespace: dict[str, object]) -> None:
    """Close the sync clients a document's examples left open (closing twice is harmless),
    then stop the servers it started (the tutorial's ``RedisServer().start()``)."""
    for value in list(namespace.values()):
        if isinstance(value, (redlease.Client, redlease.RedlockClient)):
            value.close()
    for value in list(namespace.values()):
        if isinstance(value, RedisServer):
            value.close()


@pytest.mark.parametrize("path", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_examples(path: Path, docs_server: RedisServer) -> None:
    document = _SYBIL.parse(path)
    examples = list(document)
    with ExitStack() as stack:
        masters = [
            stack.enter_context(RedisServer(find_server()))
            for _ in range(MASTERS.get(path.name, 0))
        ]
        # each document on a database of its own, so that no name one uses is left to another
        db = DOCUMENTS.index(path) % 16
        url = f"{docs_server.url.rsplit('/', 1)[0]}/{db}"
        with redis.Redis.from_url(url) as raw:
            raw.flushdb()
        client = stack.enter_context(redlease.Client.from_url(url))
        document.namespace.update(url=url, client=client, urls=[m.url for m in masters])
        if path.name in SETUP:
            document.namespace.update(SETUP[path.name](stack, url) or {})
        stack.callback(_close_clients, document.namespace)
        ran = skipped = 0
        for example in examples:
            try:
                example.evaluate()
            except unittest.SkipTest:
                skipped += 1  # a block marked <!-- skip: next "why" -->; the rest still run
            else:
                ran += example.region.lexemes.get("arguments") == "python"
    # every ```python fence was found and run (or explicitly skipped): none rots unseen
    fences = len(re.findall(r"^[ ]*```python[ ]*$", path.read_text(), flags=re.MULTILINE))
    assert (ran, skipped) == (fences - skipped, skipped), f"{fences} python blocks, {ran} ran"
