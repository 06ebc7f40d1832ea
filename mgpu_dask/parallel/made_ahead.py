"""A task's value made on its worker before the task gets there.

A task reaches its worker through the scheduler: the client tells the
scheduler, the scheduler the worker, each hop through an event loop (what that
costs beside a warm fit's own work: ``docs/performance-history.md``).  Where the
client already knows what a pinned task will compute, it can ask the worker
straight, over its lane (:mod:`.lane`), to start at once (:func:`started`); the
task, when it comes, takes what was made (:func:`taken`) instead of making it
again.  The
task is submitted as before, so the scheduler, the dashboard and recovery see
it as any other; a task rerun elsewhere (a lost worker) makes its value itself.

Each value is taken once.  A task that finds nothing under its token (the
worker was not asked, or not yet) makes the value itself and leaves a mark, so
that a call arriving after it makes nothing.  A value that no task took within
:data:`KEEP_SECONDS` (its graph was never submitted) is dropped at that
worker's next call or task here.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import threading
import time
from typing import Any, Callable

KEEP_SECONDS = 60.0
"""A value made ahead and not taken within this long is dropped."""
_MARKS = 256
"""Tokens of tasks that found nothing, remembered (the newest) so that late calls skip."""

_lock = threading.Lock()
_made: dict[str, tuple[float, "concurrent.futures.Future[Any]"]] = {}
_marks: "collections.OrderedDict[str, None]" = collections.OrderedDict()
_asker: concurrent.futures.ThreadPoolExecutor | None = None


def _drop_stale() -> None:
    """Forget values made more than :data:`KEEP_SECONDS` ago and never taken (``_lock``
    held)."""
    now = time.monotonic()
    for old in [t for t, (at, _) in _made.items() if now - at > KEEP_SECONDS]:
        del _made[old]


def make_here(token: str, make: Callable[[], Any]) -> bool:
    """On a worker (in its lane's thread): ``make()`` kept under ``token`` for the task
    that takes it.  False where that task has already been and made it itself."""
    done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
    with _lock:
        _drop_stale()
        if token in _marks or token in _made:
            return False
        _made[token] = (time.monotonic(), done)
    try:
        value = make()
        _settle()
        done.set_result(value)
    except BaseException as exc:  # the task makes it itself, and raises what it raises
        done.set_exception(exc)
    return True


def _settle() -> None:
    """Wait for the GPU work this thread queued: the task thread takes the value, and
    with per-thread default streams its stream would not wait for this thread's."""
    import sys

    cupy = sys.modules.get("cupy")
    if cupy is None:  # nothing queued on a GPU here
        return
    try:
        stream = cupy.cuda.get_current_stream()
    except Exception:  # CuPy without a GPU (a CPU worker)
        return
    stream.synchronize()


def taken(token: str, make: Callable[[], Any]) -> Any:
    """In the task: the value made ahead under ``token`` (waited for if it is being made),
    else ``make()`` here."""
    with _lock:
        _drop_stale()
        entry = _made.pop(token, None)
        if entry is None:
            _marks[token] = None
            while len(_marks) > _MARKS:
                _marks.popitem(last=False)
    if entry is not None:
        try:
            return entry[1].result()
        except Exception:  # made again here: an error is then this task's own
            pass
    return make()


def make_all(pairs: list[tuple[str, Callable[[], Any]]]) -> list[bool]:
    """On a worker (in its lane's thread): :func:`make_here` for each ``(token, make)``, in
    order."""
    return [make_here(token, make) for token, make in pairs]


def ask_ahead(client: Any, makes: dict[str, list[tuple[str, Callable[[], Any]]]]) -> None:
    """Ask each worker of ``makes`` (address -> ``(token, make)`` for each task pinned to
    it: what the task will compute) to make those values now, over its lane; returns at
    once.  Nothing is asked where a worker has no lane; a call that fails is dropped
    (the tasks then make their values themselves)."""
    from .. import config
    from . import direct, lane

    global _asker
    with _lock:
        if _asker is None:
            _asker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mgpu-dask-ahead")
    calls = {w: ("thread", make_all, (pairs,)) for w, pairs in makes.items() if pairs}

    def ask() -> None:
        try:
            lane.ask(client, calls, config.seconds("cluster.compute-timeout"), direct.SERVED)
        except Exception:  # lost on the way, or the lane closed: the tasks make them
            pass

    if calls:
        _asker.submit(ask)


def started(client: Any, tasks: list[tuple[str, str, Callable[[], Any]]]) -> list[Any]:
    """For each ``(worker, token, make)`` of a task pinned to ``worker``: its worker asked
    to make it now (:func:`ask_ahead`), and the task's callable, which takes that value
    (:func:`taken`; the token inside a partial, never read as a graph key)."""
    makes: dict[str, list[tuple[str, Callable[[], Any]]]] = {}
    for worker, token, make in tasks:
        makes.setdefault(worker, []).append((token, make))
    ask_ahead(client, makes)
    return [functools.partial(taken, token, make) for _, token, make in tasks]
