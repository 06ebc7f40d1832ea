"""A function run on one worker, asked straight from a client or from another worker.

Dask's ``run`` handler (what ``Client.run`` reaches through the scheduler) is
reached here with one message each way and no scheduler in between.  A task
costs more: the client tells the scheduler, the scheduler the worker, the
worker the scheduler when it is done, the scheduler the client, and the
client then fetches the result (``docs/performance-history.md`` has the
figures).  Used where one worker is asked for one small answer that it
computes from data it holds: a holder's export for the leader of a fit, and
the leader's fit for the client.  What runs this way is not a task: the
scheduler does not see it, and a lost worker loses the call (the caller
handles that).  ``function`` may be a coroutine function; one that takes
``dask_worker`` gets the worker it runs on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

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


def from_worker(address: str, function: Any, *args: Any,
                worker: Any = None) -> "concurrent.futures.Future[Any]":
    """Run ``function(*args)`` on the worker at ``address``, asked by ``worker`` (this
    process's Dask worker; by default the one whose task runs this).

    Returns at once with a future of the result (an exception raised there is
    raised by ``result()``); callable from any thread.
    """
    if worker is None:
        from distributed import get_worker

        worker = get_worker()
    return asyncio.run_coroutine_threadsafe(_run(worker.rpc(address), function, args),
                                            worker.loop.asyncio_loop)


def from_client(client: Any, address: str, function: Any, *args: Any,
                timeout: float | None = None) -> Any:
    """Run ``function(*args)`` on the worker at ``address``, asked by ``client``, and
    return its result.

    A worker that does not accept a connection within
    ``results.CONNECT_SECONDS`` raises :class:`WorkerUnreachable` (Dask's own
    bound is 30 s); past ``timeout`` seconds in all, ``TimeoutError``.
    """
    async def ask() -> Any:
        if not await results.reachable(client, [address]):
            raise WorkerUnreachable(f"worker {address} does not accept connections")
        return await _run(client.rpc(address), function, args)

    return client.sync(ask, callback_timeout=timeout)
