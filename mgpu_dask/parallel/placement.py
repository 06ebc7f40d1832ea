"""Block tasks that run where their shard lives, and a record of where shards are.

Why this exists.  Dask places a task without worker restrictions by its own
heuristics, and one of them moved our shards: the scheduler calls a task
*root-ish* when its task group is larger than twice the cluster's threads and
has few dependencies, and places root-ish tasks on the least busy worker,
whatever their inputs.  A task group keeps counting its forgotten tasks until
every one of them is forgotten, so the alias tasks that ``da.concatenate`` put
in front of persisted shards, resubmitted under the same names by every
predict, sometimes grew into "root-ish" groups: the scheduler then ran them
away from their shard, copied the shard, and the Active Memory Manager at times
kept the copy and dropped the original.  Work stealing does the same to
unrestricted tasks of a busy worker.

The cure is structural, for every graph this project builds:

* each block task is *pinned*: a strict worker restriction to the holder of its
  shard (restricted tasks are never root-ish, and strict ones are never stolen);
* block tasks name the persisted shard keys directly: no alias layer;
* pinned graphs are submitted without Dask's low-level optimisation, which
  fuses tasks and drops their annotations;
* data that must cross workers (a query block visiting every training shard)
  travels under a throwaway key made by an identity task on its holder
  (:func:`send`), so the shard itself never gains a replica;
* the scheduler plugin :class:`~.recovery.PinRecovery` unpins a pinned task whose worker is
  gone, so a lost worker's shards and tasks are rebuilt elsewhere, as before.

Graphs use Dask's documented custom-graph format (tuples of a callable and its
arguments; a key stands for that key's value).  Constant arguments that are
tuples go inside a ``functools.partial``, where they are never taken for keys.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any, Callable, Hashable, Iterable, NamedTuple, Sequence

import dask.array as da
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from .. import config
from . import direct, results
from .recovery import PIN, ensure_recovery, losses, on_loss
from .workers import scheduler_workers

Key = Hashable


class Pinned(NamedTuple):
    """A task of a pinned graph: its key, the call, and the worker it must run on."""

    key: Key
    task: tuple          # (callable, *arguments); keys among the arguments are inputs
    worker: str | None   # None: anywhere (no client, or the input has no holder yet)


def send(block: Any) -> Any:
    """Identity, run on a block's holder: the block leaves under this task's key.

    The receiving worker then holds a replica of this throwaway key, released
    with the graph, instead of a replica of the shard.  Pinned to another worker
    instead, it leaves a copy of the block there under its own key.
    """
    return block


def row_futures(array: da.Array) -> list[Any]:
    """The persisted future behind each row block of ``array`` (None where there is none).

    Follows the alias entries that ``concatenate`` and friends put in front of
    persisted keys.  An array with several column blocks has no single future
    per row block: all None.
    """
    from distributed import Future

    if any(n != 1 for n in array.numblocks[1:]):
        return [None] * array.numblocks[0]
    graph = dict(array.__dask_graph__())
    keys = array.__dask_keys__()
    while keys and isinstance(keys[0], list):
        keys = [k[0] for k in keys]
    found: list[Any] = []
    for key in keys:
        future = None
        for _ in range(16):
            value = graph.get(key)
            if isinstance(value, Future):
                future = value
                break
            target = getattr(value, "target", None)  # dask's Alias task
            if target is not None and target in graph:
                key = target
            elif isinstance(value, tuple) and value in graph:  # a legacy alias
                key = value
            else:
                break
        found.append(future)
    return found


_KNOWN_HOLDERS: dict[tuple[str, Key], str] = {}
"""(scheduler, key) -> holder, for :func:`locate` with ``remembered=True``."""


@on_loss
def _forget_holder(scheduler: str, worker: str) -> None:
    """A worker left: none of its blocks is remembered there any more (on the client's
    event loop, before any of them is reported rebuilt elsewhere)."""
    for entry, holder in list(_KNOWN_HOLDERS.items()):
        if holder == worker and entry[0] == scheduler:
            _KNOWN_HOLDERS.pop(entry, None)


def holders(client: Any, futures: Sequence[Any]) -> list[str | None]:
    """The worker holding each future (the first, should there be several); one round trip."""
    present = [f for f in futures if f is not None]
    who_has = client.who_has(present) if present else {}
    return [sorted(who_has.get(f.key, ()))[0] if f is not None and who_has.get(f.key) else None
            for f in futures]


def pinned_holders(client: Any, futures: Sequence[Any], pinned: Sequence[str],
                   losses_before: int) -> list[str | None]:
    """The holder of each finished block of a strictly pinned graph: the worker it was
    pinned to, where no worker has left since the graph was submitted
    (``losses_before``: :func:`.recovery.losses` then) -- no round trip; else
    :func:`holders`."""
    if (ensure_recovery(client) and losses(client) == losses_before
            and all(f.status == "finished" for f in futures)):
        return list(pinned)
    return holders(client, futures)


def _remembered_holders(client: Any, futures: Sequence[Any]) -> list[str | None]:
    """:func:`holders`, asking the scheduler only about futures not seen finished before.

    A pinned block stays on its holder while its future stays finished and its
    holder in the cluster: :class:`~.recovery.PinRecovery` tells the client of
    every worker that leaves (:func:`_forget_holder`).  Where it is not on the
    scheduler, nothing is remembered.
    """
    if not ensure_recovery(client):
        return holders(client, futures)
    scheduler = client.scheduler.address
    ask = [f for f in futures if f.status != "finished" or (scheduler, f.key) not in _KNOWN_HOLDERS]
    if ask:
        if len(_KNOWN_HOLDERS) > 100_000:
            _KNOWN_HOLDERS.clear()
        for f, w in zip(ask, holders(client, ask)):
            if w is not None and f.status == "finished":
                _KNOWN_HOLDERS[(scheduler, f.key)] = w
            else:
                _KNOWN_HOLDERS.pop((scheduler, f.key), None)
    return [_KNOWN_HOLDERS.get((scheduler, f.key)) for f in futures]


def locate(client: Any, array: da.Array,
           remembered: bool = False) -> tuple[list[Any], list[str]] | None:
    """Futures and holders of the row blocks of a persisted array; None if it is not persisted.

    A block that has no holder just now (a lost worker's, being rebuilt) is
    given a worker round-robin; the scheduler's recovery moves it if needed.
    ``remembered=True`` skips the scheduler round trip for blocks located
    before (every warm predict asks where the same query blocks are).
    """
    futures = row_futures(array)
    if any(f is None for f in futures):
        return None
    where = _remembered_holders(client, futures) if remembered else holders(client, futures)
    if any(w is None for w in where):
        from distributed import wait

        wait(futures, timeout=config.seconds("cluster.compute-timeout"))  # lost ones are rebuilt
        where = holders(client, futures)
        spare = sorted(scheduler_workers(client))
        where = [w or spare[i % len(spare)] for i, w in enumerate(where)]
    return futures, where


def pinned_array(name: str, tasks: Iterable[Pinned], *, chunks: tuple, meta: Any,
                 inputs: Iterable[Any] = (), loose: bool = False) -> da.Array:
    """A dask array whose blocks are ``tasks``, each to run on its worker.

    Parameters
    ----------
    name : str
        The array's name: every output key is ``(name, i, ...)``.
    tasks : iterable of Pinned
        Every task of the graph, outputs and intermediates; a key that appears
        among a task's arguments stands for that key's value.  Either every
        task names its worker (a distributed run) or none does (local scheduler).
    chunks, meta
        Of the result, as for :class:`dask.array.Array`.
    inputs : iterable of Future or dask collection
        What the tasks read: persisted keys, or (on the local scheduler) the
        collections whose keys they name.
    loose : bool, default False
        Let the scheduler move a task elsewhere (only where :class:`~.recovery.PinRecovery`
        cannot be installed: without it a strict task would wait for a lost worker).
    """
    tasks = list(tasks)
    pinned = [t.worker is not None for t in tasks]
    if any(pinned) and not all(pinned):
        raise ValueError(f"{name}: either every task names its worker or none does")
    layers: dict[str, Any] = {}
    dependencies: dict[str, set[str]] = {name: set()}
    inputs = list(inputs)
    futures = {f.key: f for f in inputs if not hasattr(f, "__dask_graph__")}
    if futures:
        layers[f"{name}-inputs"] = MaterializedLayer(futures)
        dependencies[f"{name}-inputs"] = set()
        dependencies[name] = {f"{name}-inputs"}
    for collection in (c for c in inputs if hasattr(c, "__dask_graph__")):
        graph = collection.__dask_graph__()
        layers.update(graph.layers)
        dependencies.update(graph.dependencies)
        dependencies[name] |= set(collection.__dask_layers__())
    annotations = None
    if tasks and all(pinned):
        where = {t.key: t.worker for t in tasks}
        annotations = {"workers": functools.partial(_worker_of, where),
                       "allow_other_workers": loose, PIN: True}
    layers[name] = MaterializedLayer({t.key: t.task for t in tasks}, annotations=annotations)
    return da.Array(HighLevelGraph(layers, dependencies), name, chunks, meta=meta)


def _worker_of(where: dict[Key, str], key: Key) -> list[str]:
    return [where[key]]


def persist(client: Any, array: da.Array) -> da.Array:
    """Submit a pinned array as built: no optimisation, which would drop the pins.

    Where each output block was pinned is remembered, so that
    :func:`.results.gather` fetches it straight from there.
    """
    if client is None:
        return array.persist()
    results.remember(client, results.pinned_where(array))
    return client.persist(array, optimize_graph=False)


def submit_pinned(client: Any, function: Any, *args: Any, worker: str, **kwargs: Any) -> Any:
    """``client.submit(function, *args)`` on ``worker``, pinned as our graphs' tasks are: a
    strict restriction that :class:`~.recovery.PinRecovery` drops should the worker be
    gone (a loose one where it cannot be installed), never waiting for it forever."""
    import dask

    loose = not ensure_recovery(client)
    with dask.annotate(**{PIN: True}):
        return client.submit(function, *args, workers=[worker], allow_other_workers=loose,
                             pure=False, **kwargs)


def carrying_data() -> Any:
    """A context for submitting graphs that carry their rows on purpose: the rows are
    the lineage a lost worker's block is rebuilt from, so Dask's large-graph advice
    (scatter the data instead) does not apply and its warning is not shown."""
    import dask

    return dask.config.set({"distributed.admin.large-graph-warning-threshold": "64GiB"})


class InHand(da.Array):
    """A dask array whose row blocks are already in this process: its ``compute()`` joins
    them here.  (Dask's own would send the graph to the distributed scheduler and fetch
    the blocks back: a round trip, some 16 ms, for answers already in hand.)"""

    __slots__ = ()

    def compute(self, **kwargs: Any) -> Any:
        blocks = None if kwargs else blocks_in_hand(self)
        if blocks is None:  # a scheduler asked for by name, or a graph not of blocks in hand
            return super().compute(**kwargs)
        if len(blocks) == 1:
            return blocks[0]
        from ..kernels.launch import array_module

        return array_module(blocks[0]).concatenate(blocks)


def in_hand(name: str, blocks: Sequence[Any], chunks: tuple, meta: Any) -> da.Array:
    """A dask array of row blocks already in this process (answers brought back straight,
    :func:`.direct.run_held`): computing it runs nothing anywhere (:class:`InHand`)."""
    tail = (0,) * (len(chunks) - 1)
    layer = MaterializedLayer({(name, i, *tail): block for i, block in enumerate(blocks)})
    return InHand(HighLevelGraph({name: layer}, {name: set()}), name, chunks, meta=meta)


def blocks_in_hand(array: da.Array) -> list[Any] | None:
    """The row blocks of an array made by :func:`in_hand` (None for any other array)."""
    layers = array.__dask_graph__().layers
    layer = layers.get(array.name)
    if len(layers) != 1 or not isinstance(layer, MaterializedLayer):
        return None
    keys = array.__dask_keys__()
    while keys and isinstance(keys[0], list):
        keys = [k[0] for k in keys]
    if any(n != 1 for n in array.numblocks[1:]):
        return None
    blocks = [layer.mapping.get(key) for key in keys]
    return blocks if all(hasattr(b, "__array__") for b in blocks) else None


def run_straight(client: Any, name: str, calls: Sequence[tuple[str, Any, tuple]],
                 chunks: tuple, meta: Any, timeout: float | None = None) -> da.Array | None:
    """Each row block's ``(worker, function, args)`` asked of its worker straight
    (:func:`.direct.run_held`; :class:`.direct.Held` arguments are blocks the worker
    holds): the answers come back as an array in hand.  None where that could not be
    done (a worker unreachable, a block moved on) or is not wanted
    (``mgpu-dask.cluster.straight-predictions`` false: tasks, which the dashboard
    shows): the caller submits tasks instead."""
    by_worker: dict[str, list[tuple[Any, tuple]]] = {}
    order: list[tuple[str, int]] = []
    for worker, function, args in calls:
        by_worker.setdefault(worker, []).append((function, args))
        order.append((worker, len(by_worker[worker]) - 1))
    answers = ask_straight(client, by_worker, timeout)
    if answers is None:
        return None
    return in_hand(name, [answers[w][i] for w, i in order], chunks, meta)


def ask_straight(client: Any, calls: dict[str, list[tuple[Any, tuple]]],
                 timeout: float | None = None) -> dict[str, list[Any]] | None:
    """:func:`.direct.run_held` where straight answers are wanted: None where they are not
    (``mgpu-dask.cluster.straight-predictions`` false) or could not be had, and then the
    holders remembered for the blocks asked about are forgotten (:func:`locate` asks the
    scheduler again: a block released and made again lives where it was put last)."""
    if not config.get("cluster.straight-predictions", True):
        return None
    answers = direct.run_held(client, calls, timeout)
    if answers is None:  # a block not where it was remembered: ask the scheduler next time
        scheduler = client.scheduler.address
        for pairs in calls.values():
            for _, args in pairs:
                for a in args:
                    if isinstance(a, direct.Held):
                        _KNOWN_HOLDERS.pop((scheduler, a.key), None)
    return answers


def map_blocks(client: Any, fn: Callable[..., Any], array: da.Array, *args: Any, name: str,
               chunks: tuple, meta: Any, straight: bool = False) -> da.Array:
    """``fn(block, *args)`` for every row block of a persisted ``array``, on the block's holder.

    Lazy ``map_blocks`` where there is no client or ``array`` is not persisted.
    Returns the (persisted, where there is a client) result.  Holders found
    before are not asked for again (every warm predict maps the same blocks).
    ``straight``: ``fn`` returns small host arrays, asked of every holder straight
    (:func:`run_straight`, no task) and returned in hand; as tasks where that
    cannot be done.
    """
    placed = locate(client, array, remembered=True) if client is not None else None
    if placed is not None and straight:
        futures, where = placed
        calls = [(w, fn, (direct.Held(f.key), *args)) for f, w in zip(futures, where)]
        done = run_straight(client, name, calls, chunks, meta,
                            config.seconds("cluster.compute-timeout"))
        if done is not None:
            return done
    if placed is None:
        axes = {}
        if len(chunks) < array.ndim:
            axes["drop_axis"] = list(range(len(chunks), array.ndim))
        elif len(chunks) > array.ndim:
            axes["new_axis"] = list(range(array.ndim, len(chunks)))
        lazy = array.map_blocks(fn, *args, chunks=chunks, meta=meta, name=name, **axes)
        return lazy if client is None else client.persist(lazy)
    futures, where = placed
    loose = not ensure_recovery(client)
    tail = (0,) * (len(chunks) - 1)
    call = functools.partial(_apply_to_block, fn, args)  # arguments inside: never read as keys
    tasks = [Pinned((name, i, *tail), (call, f.key), w) for i, (f, w) in enumerate(zip(futures, where))]
    return persist(client, pinned_array(name, tasks, chunks=chunks, meta=meta, inputs=futures,
                                        loose=loose))


def _apply_to_block(fn: Callable[..., Any], args: tuple, block: Any) -> Any:
    return fn(block, *args)


def fresh_name(prefix: str) -> str:
    """A key prefix never used before: repeated calls must recompute, not reuse results."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
