"""The redlease client of the Celery app, one per process (a forked child makes its own)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from celery import signals

from ... import Client, InvalidArgumentError
from .. import _listeners

_clients: weakref.WeakKeyDictionary[Any, tuple[int, Client]] = weakref.WeakKeyDictionary()
_clients_mutex = threading.Lock()


def _fresh_mutex() -> None:
    global _clients_mutex
    _clients_mutex = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_fresh_mutex)


def redlease_url(app: Any) -> str:
    """The app's ``redlease_url`` (any URL ``Client.from_url`` takes, Sentinel's too), else
    its broker URL if that is a Redis one."""
    given = app.conf.get("redlease_url")
    if given:
        return str(given)
    url = app.conf.broker_url
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise InvalidArgumentError(
            "redlease.contrib.celery: set app.conf.redlease_url to a Redis URL (the broker "
            "is not a Redis one)"
        )
    return url


def client_for(app: Any) -> Client:
    """This process's redlease client for the Celery ``app`` (made on first use; a forked
    child makes its own, so each worker process has one, made after the fork)."""
    pid = os.getpid()
    with _clients_mutex:
        held = _clients.get(app)
        if held is not None and held[0] == pid:
            return held[1]
        options = dict(app.conf.get("redlease_client_options") or {})
        listeners = _listeners("redlease_listeners", app.conf.get("redlease_listeners") or ())
        client = Client.from_url(redlease_url(app), **options)
        for listener in listeners:
            client.add_listener(listener)
        _clients[app] = (pid, client)
        return client


def _close_clients(**_: Any) -> None:
    """A worker process ends: close its clients (their holds were released by their runs)."""
    pid = os.getpid()
    with _clients_mutex:
        mine = [client for owner, client in _clients.values() if owner == pid]
        _clients.clear()
    for client in mine:
        client.close()


signals.worker_process_shutdown.connect(
    _close_clients, weak=False, dispatch_uid="redlease.contrib.celery"
)
