"""A function run on one worker, asked straight from a client or from another worker.

Dask's ``run`` handler (what ``Client.run`` reaches through the scheduler) is
reached here with one message each way and no scheduler in between.  A task
costs more: the client tells the scheduler, the scheduler the worker, the
worker the scheduler when it is done, the scheduler the client, and the
client then fetches the result (``docs/performance-history.md`` has the
figures).  Used where one worker is asked for one small answer that it
computes from data it holds: a holder's export for the leader of a fit, and
the leader's fit for the client, and predictions from the blocks their
workers hold (:func:`run_held`).  What runs this way is not a task: the
scheduler does not see it (nor the dashboard), and a lost worker loses the
call (the caller handles that).  ``function`` may be a coroutine function;
one that takes ``dask_worker`` gets the worker it runs on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from typing import Any, NamedTuple

from . import results


class WorkerUnreachable(OSError):
    """The worker did not accept the caller's connection (lost, or behind a network the
    caller cannot cross): what was asked did not start there."""


async def _run(rpc: Any, function: Any, args: tuple) -> Any:
    from distributed.core import clean_exception
    from distributed.protocol import pickle

    response = await rpc.run(function=pickle.dumps(function), args=pickle.dumps(args),
                             wait=True)
    if response.get("status") != "OK":
        _, exc, tb = clean_exception(**response)
        raise exc.with_traceback(tb)
    return response["result"]


_PEER_CALLS = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="mgpu-dask-peer")
PEER_LANE_CALLS = [0]
"""Calls this worker made over another worker's lane (:func:`from_worker`), for the tests."""


def from_worker(address: str, function: Any, *args: Any, worker: Any = None,
                lane_path: str | None = None, here: bool = False,
                timeout: float | None = None) -> "concurrent.futures.Future[Any]":
    """Run ``function(*args)`` on the worker at ``address``, asked by ``worker`` (this
    process's Dask worker; by default the one whose task runs this).

    With ``lane_path`` (that worker's lane, :func:`.lane.paths`) a plain function is
    asked over the lane and runs in the lane's thread there: its arguments and answer
    cross a Unix socket as they lie (arrays out of band), where Dask's RPC pickles them
    in band and frames them again.  Where the lane cannot be reached, through Dask's
    RPC; past ``timeout`` seconds (by default ``mgpu-dask.cluster.compute-timeout``)
    without an answer, ``TimeoutError``.  Returns at once with a future of the result
    (an exception raised there is raised by ``result()``); callable from any thread.
    ``here``: a call over the lane is made in this thread and the future comes back
    done, for a caller with nothing else to do meanwhile: it spares the hand-offs to a
    pool thread and back.
    """
    if worker is None:
        from distributed import get_worker

        worker = get_worker()
    if lane_path is not None and not inspect.iscoroutinefunction(function):
        from .. import config
        from . import lane

        if timeout is None:
            timeout = config.seconds("cluster.compute-timeout")

        def over_lane() -> Any:
            try:
                answer = lane.call_peer(lane_path, ("thread", function, args), timeout)
            except ConnectionError:  # no lane after all: Dask's RPC, as without one
                return asyncio.run_coroutine_threadsafe(
                    _run(worker.rpc(address), function, args),
                    worker.loop.asyncio_loop).result(timeout)
            PEER_LANE_CALLS[0] += 1
            return answer

        if not here:
            return _PEER_CALLS.submit(over_lane)
        done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        try:
            done.set_result(over_lane())
        except BaseException as exc:  # noqa: BLE001 - raised again by result(), as the pool's
            done.set_exception(exc)
        return done
    return asyncio.run_coroutine_threadsafe(_run(worker.rpc(address), function, args),
                                            worker.loop.asyncio_loop)


def from_client(client: Any, address: str, function: Any, *args: Any,
                timeout: float | None = None, in_thread: bool = False) -> Any:
    """Run ``function(*args)`` on the worker at ``address``, asked by ``client``, and
    return its result.

    ``function`` runs on the worker's event loop, as Dask's ``run`` runs it, or
    with ``in_thread``, in a thread of its own (a long call: the worker's loop
    stays free, and the call does not wait for it).  A worker on this client's
    host is asked over its lane (:mod:`.lane`; in its thread), the others
    through Dask's RPC, as :func:`run_held` asks.  A worker that does not
    accept a connection within ``results.CONNECT_SECONDS`` raises
    :class:`WorkerUnreachable` (Dask's own bound is 30 s); one lost on the way,
    an ``OSError`` (over the lane :class:`.lane.LaneLost`, where Dask's RPC raises
    its ``CommClosedError``: the call is not asked again, it may have run); past
    ``timeout`` seconds in all, ``TimeoutError``.
    """
    from . import lane

    message = ("thread" if in_thread else "run", function, args)
    answers = lane.ask(client, {address: message}, timeout, SERVED)
    if answers is not None:
        return answers[address]
    if in_thread:
        function, args = _in_a_thread, (function, args)

    async def ask() -> Any:
        if not await results.reachable(client, [address]):
            raise WorkerUnreachable(f"worker {address} does not accept connections")
        return await _run(client.rpc(address), function, args)

    return client.sync(ask, callback_timeout=timeout)


def served(message: tuple, dask_worker: Any = None) -> Any:
    """On a worker, in its lane's thread (:mod:`.lane`), what the lane serves:
    ``("held", calls)``, the calls of :func:`run_held`, handed from this thread straight to
    the worker's task thread (:func:`_answer_held`; the event loop is not woken for
    them, and a loop busy with other work does not hold them up); ``("thread",
    function, args)``, a call of :func:`from_client` with ``in_thread``, run in this
    thread; or ``("run", function, args)``, one without, run on the event loop as Dask's
    own ``run`` handler runs it (awaited where it is a coroutine function).  A function
    that takes ``dask_worker`` is given it."""
    if message[0] == "held":
        executor = _task_executor(dask_worker)
        if executor is None:  # no task thread to run them in: this thread
            return _answer_held(message[1], dask_worker)
        return executor.submit(_answer_held, message[1], dask_worker).result()
    _, function, args = message
    if message[0] == "thread":
        return function(*args, **_worker_kwargs(function, dask_worker))
    return asyncio.run_coroutine_threadsafe(_run_here(function, args, dask_worker),
                                            dask_worker.loop.asyncio_loop).result()


@functools.lru_cache(maxsize=256)
def _takes_worker(function: Any) -> bool:
    """Whether ``function`` takes ``dask_worker`` (its signature read once, not each call)."""
    from distributed.utils import has_arg

    return has_arg(function, "dask_worker")


def _worker_kwargs(function: Any, dask_worker: Any) -> dict[str, Any]:
    try:
        takes = _takes_worker(function)
    except TypeError:  # not hashable
        from distributed.utils import has_arg

        takes = has_arg(function, "dask_worker")
    return {"dask_worker": dask_worker} if takes else {}


async def _run_here(function: Any, args: tuple, dask_worker: Any) -> Any:
    import inspect

    answer = function(*args, **_worker_kwargs(function, dask_worker))
    return await answer if inspect.isawaitable(answer) else answer


async def _in_a_thread(function: Any, args: tuple, dask_worker: Any = None) -> Any:
    """Through Dask's RPC, :func:`from_client`'s ``in_thread`` call: in a thread of its own."""
    return await asyncio.to_thread(function, *args, **_worker_kwargs(function, dask_worker))


SERVED = f"{__name__}:served"
"""What the workers' lanes serve (:func:`served`)."""


class Held(NamedTuple):
    """An argument of a call in :func:`run_held`: the block its worker holds under ``key``."""

    key: Any


class Here(NamedTuple):
    """An argument of a call in :func:`run_held`: the Dask worker that runs it (to ask
    another worker straight, :func:`from_worker`)."""


def _task_executor(dask_worker: Any) -> Any:
    """The executor whose thread runs the worker's tasks (None where it has none)."""
    return getattr(dask_worker, "executors", {}).get("default")


def _answer_held(calls: list[tuple[Any, tuple]], dask_worker: Any) -> dict[str, Any]:
    """:func:`held_calls`' answer, in the thread that runs the calls."""
    try:
        resolved = [(function, [dask_worker.data[a.key] if isinstance(a, Held)
                                else dask_worker if isinstance(a, Here) else a
                                for a in args]) for function, args in calls]
    except KeyError as exc:
        return {"refused": "moved", "message": f"block {exc} is no longer on worker "
                                               f"{dask_worker.address}"}
    return {"results": [function(*args) for function, args in resolved]}


async def held_calls(calls: list[tuple[Any, tuple]], dask_worker: Any = None) -> dict[str, Any]:
    """On a worker, asked by :func:`run_held` through Dask's RPC: every ``(function,
    args)`` of ``calls``, its :class:`Held` arguments read from this worker's blocks, one
    after another in the worker's own task thread (where its tasks keep their GPU
    buffers), not on the event loop.  ``{"results": [...]}``, or ``{"refused": "moved"}``
    where a block is no longer here (nothing ran).  Over a lane, :func:`served` runs
    the same in the same thread."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_task_executor(dask_worker), _answer_held, calls,
                                      dask_worker)


def run_held(client: Any, calls: dict[str, list[tuple[Any, tuple]]],
             timeout: float | None = None) -> dict[str, list[Any]] | None:
    """Run each worker's calls on the blocks it holds, every worker asked at once, straight.

    ``calls`` maps a worker's address to its ``(function, args)`` pairs;
    arguments that are :class:`Held` stand for the block that worker holds
    under that key.  Each worker runs its calls one after another in its task
    thread, and the answers come back with one message each way: no task, no
    scheduler in between, no fetch after.  For small answers (predictions on
    the host): an answer is pickled back to this client.  Workers on this
    client's host are asked over their own lane (:mod:`.lane`, a Unix socket
    each), the others through Dask's RPC.

    Returns each worker's results, in the order of its calls; None where a
    worker does not accept a connection, no longer holds a block, or is lost
    on the way (nothing is kept from the others: the caller then submits the
    same work as tasks, which Dask reruns wherever the blocks now are).  An
    exception raised by a call is raised here.  Past ``timeout`` seconds,
    ``TimeoutError``.
    """
    from . import lane

    try:
        answers = lane.ask(client, {w: ("held", c) for w, c in calls.items()}, timeout, SERVED)
    except lane.LaneLost:  # held calls only read: Dask's RPC may ask them again
        answers = None
    if answers is None:
        answers = _through_rpc(client, calls, timeout)
    if answers is None or any("refused" in a for a in answers.values()):
        return None
    return {w: a["results"] for w, a in answers.items()}


def _through_rpc(client: Any, calls: dict[str, list[tuple[Any, tuple]]],
                 timeout: float | None) -> dict[str, Any] | None:
    """Each worker's :func:`held_calls` answer through Dask's RPC; None where a worker
    does not accept a connection or is lost on the way."""
    workers = list(calls)

    async def ask() -> dict[str, Any] | None:
        if not await results.reachable(client, workers):
            return None
        answers = await asyncio.gather(*(_run(client.rpc(w), held_calls, (calls[w],))
                                         for w in workers))
        return dict(zip(workers, answers))

    try:
        return client.sync(ask, callback_timeout=timeout)
    except TimeoutError:  # an OSError too, but no reason to start again
        raise
    except OSError:  # a worker lost on the way (Dask's CommClosedError is an OSError)
        return None
