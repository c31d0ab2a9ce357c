"""Celery tasks that never run twice: ``@app.task(base=ExclusiveTask, exclusive={...})``.

Built on redlease's public API (install with ``pip install 'redlease[celery]'``):

- **The run hold** is a redlease ``Lock`` named after the task's key, taken by the worker
  process that runs the task, for as long as it runs: renewed by the client's watchdog, so a
  worker killed with SIGKILL frees it within one lease (``watchdog_timeout``), and carrying a
  fencing token (``self.request.redlease_token``).
- **A reservation** is a permit of a one-permit lease semaphore named after the key, with a
  lease of its own (``queued_for``, plus the countdown): a hold that can change hands. It
  covers a task while it waits in the queue (``stage="enqueue"``: taken by the producer in
  ``apply_async``) or between one of its Celery retries and the next (``retries="keep"``:
  taken by the run that retries). Its id travels in the message's headers; the worker that
  runs the task takes the run hold first, then releases the reservation by its id.
- **The task-id records**, plain strings beside them (``<lock>:queued-task``,
  ``<lock>:running-task``, stage ``enqueue`` only), let a duplicate ``delay()`` return the
  first task's ``AsyncResult``. Each is written and deleted only by the holder of the hold it
  describes, while it holds it (and deleted only if it still names its task).

A run without a reservation that finds the run hold free still yields to a reservation held
by another task (a queued or retrying run of the same key): the key is busy for it.

The client comes from the app's configuration: ``redlease_url`` (default: the broker URL, when
it is a Redis one), ``redlease_client_options`` (keywords of ``Client.from_url``, such as
``watchdog_timeout``), ``redlease_listeners`` (listeners added to each process's client:
callables taking a ``LockEvent``, or dotted paths to one, such as a ``PrometheusMetrics``),
``redlease_key_prefix`` (default ``"redlease:celery:"``). There is one
client per process, made on first use after the fork (a forked child makes its own).

The package, one job a module: ``_options`` reads and checks ``exclusive={...}``; ``_clients``
makes each process's client; ``_holds`` is what one key is held with (``Holds``) and one run
(``Run``); ``_task`` is ``ExclusiveTask``, the producer's side and the worker's.
"""

from __future__ import annotations

from .. import _missing_extra

try:  # said here, before a module of the package imports its framework
    import celery  # noqa: F401
    import kombu  # noqa: F401
except ModuleNotFoundError as exc:  # the framework is an extra
    raise _missing_extra(exc, "celery", "celery") from exc

# every public name of the former single module, its public API (__all__) first
from ._clients import client_for
from ._clients import redlease_url as redlease_url
from ._holds import DEFAULT_PREFIX as DEFAULT_PREFIX
from ._holds import DELIVERY_TTL as DELIVERY_TTL
from ._holds import Holds as Holds
from ._holds import Run as Run
from ._options import DEFAULT_KEY_LENGTH as DEFAULT_KEY_LENGTH
from ._options import ON_BUSY as ON_BUSY
from ._options import ON_LOST as ON_LOST
from ._options import OPTIONS as OPTIONS
from ._options import RETRIES as RETRIES
from ._options import STAGES as STAGES
from ._options import WAIT_TIMEOUT as WAIT_TIMEOUT
from ._options import Options as Options
from ._task import HEADER as HEADER
from ._task import MAX_ROUNDS as MAX_ROUNDS
from ._task import PROBE_LEASE as PROBE_LEASE
from ._task import RECORD_WAIT as RECORD_WAIT
from ._task import REDELIVERY_MARGIN as REDELIVERY_MARGIN
from ._task import RESERVE_WAIT as RESERVE_WAIT
from ._task import ExclusiveTask, TaskSkippedError

__all__ = ["ExclusiveTask", "TaskSkippedError", "client_for"]
