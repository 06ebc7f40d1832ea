"""Query blocks of workers that share one GPU, searched as one.

Several Dask workers may share one GPU (a ``LocalCluster`` whose nannies see the
same device).  Under the replicate plan each would search its own query block
against its own copy of the training rows, and their searches would take turns
on the GPU: kernels of different processes do not run at once (without MPS),
each search fills fewer of the GPU's SMs than one search of every block, and a
worker whose search ends first waits for the others' before its vote runs.

Instead one worker per GPU, its *searcher*, searches every query block held on
that GPU in one call (:func:`predictions`): the other holders export their
blocks (CUDA IPC, :mod:`..parallel.peer_views`), the searcher copies them beside
its own into one array, closes the mappings and has the exports released at
once.  It keeps the joined queries under the keys of every block
(:mod:`..parallel.kept_with_blocks`: they go when its own block's key leaves its
memory), so a later predict of the same persisted queries (the CLI's warm
repetitions, a model asked again) asks no other worker anything: one message
from the client, one search, one vote.  Dask keys name their values, so a block
held elsewhere under the same key holds the same rows.  Runs on the workers; the
client side is :func:`.straight.predict`.
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any, NamedTuple

import numpy as np

from ..kernels.allocator import pooled
from ..kernels.launch import array_module, on_gpu
from ..parallel import direct, kept_with_blocks, peer_views
from . import blocks

logger = logging.getLogger(__name__)

JOIN_BYTES = 1 << 30
"""The most bytes of query rows joined on one searcher: above this, one more copy of the
queries costs memory the search needs, and each worker's search is long enough to fill
the GPU on its own."""


class Joined(NamedTuple):
    """Every query block on one GPU, in block order, as one array."""

    rows: Any
    blocks: tuple[int, ...]   # the blocks' indices, in order
    sizes: tuple[int, ...]    # each block's rows


_EXPORTED = [0]


def export_block(token: str, key: Any, dask_worker: Any = None) -> dict[str, Any]:
    """On a query block's holder, asked by its GPU's searcher: the block, exported
    (released when the searcher has copied it, :func:`joined_queries`)."""
    description = peer_views.export(token, [[dask_worker.data[key]]])
    _EXPORTED[0] += 1
    return description


def exported() -> int:
    """How many query blocks this process exported for a searcher (for tests)."""
    return _EXPORTED[0]


def joined_queries(worker: Any, own: dict[int, Any], others: tuple[tuple[int, str, Any], ...],
                   keys: tuple, wait: float, keep: bool = True) -> Joined | None:
    """The query blocks held here (``own``: block index -> rows) and the ones held by the
    workers that share this GPU (``others``: block index, holder, key) as one array on
    this GPU, kept for the next predict of the same blocks (``keys``: every block's key,
    in block order) where ``keep`` (the workers drop what they keep with its blocks);
    None where they cannot be joined (a holder unreachable or its block gone, another
    GPU, rows of other kinds, too little free memory)."""
    entry = (keys, "knn queries joined")
    held = [own[i] for i in sorted(own)]
    found = kept_with_blocks.kept_for(held, entry)
    if found is not kept_with_blocks.MISSING:
        return found
    token = f"knn-queries-{uuid.uuid4().hex}"
    asked = [(i, holder, direct.from_worker(holder, export_block, token, key, worker=worker))
             for i, holder, key in others]
    try:
        described = [(i, future.result(timeout=wait)) for i, _, future in asked]
        with peer_views.opened([d for _, d in described]) as mapped:
            parts = dict(own)
            parts.update((i, arrays[0]) for (i, _), arrays in zip(described, mapped))
            order = tuple(sorted(parts))
            sizes = tuple(int(parts[i].shape[0]) for i in order)
            rows = _joined([parts[i] for i in order])
            parts.clear()
    except (peer_views.PeerUnavailable, OSError, KeyError, TimeoutError):
        return None  # a block moved on or a worker lost: each worker searches its own
    except Exception as exc:  # each worker's own search still answers: say why, go on
        logger.warning("could not join the query blocks that share this GPU (%s: %s); "
                       "each worker searches its own", type(exc).__name__, exc)
        return None
    finally:
        for _, holder, future in asked:  # each export released once it is made (and copied)
            future.add_done_callback(functools.partial(_release, holder, token, worker))
    if rows is None:
        return None
    joined = Joined(rows, order, sizes)
    if keep:
        kept_with_blocks.keep(held, entry, joined)
    return joined


def _release(holder: str, token: str, worker: Any, _: Any) -> None:
    direct.from_worker(holder, peer_views.release, token, worker=worker)  # not waited for


@pooled()
def _joined(parts: list[Any]) -> Any:
    """One array of ``parts`` (this process's GPU, or host memory), the copies done; None
    where they are of different kinds or devices, or there is too little room."""
    xp = array_module(parts[0])
    if len({(array_module(p), p.dtype, p.shape[1:]) for p in parts}) > 1:
        return None
    if xp is np:
        return np.concatenate(parts)
    device = xp.cuda.Device()
    if any(not on_gpu(p) or p.device.id != device.id for p in parts):
        return None
    size = sum(int(p.nbytes) for p in parts)
    if size > JOIN_BYTES or xp.cuda.runtime.memGetInfo()[0] < 2 * size:
        return None
    with device:
        rows = xp.concatenate(parts)
        xp.cuda.get_current_stream().synchronize()  # copied before the mappings close
    return rows


def predictions(worker: Any, X: Any, y: Any, *held: Any, own: tuple[int, ...],
                others: tuple[tuple[int, str, Any], ...], keys: tuple, wait: float, keep: bool,
                k: int, margin: int | None, tile_bytes: int | None,
                vote: tuple) -> dict[int, Any] | None:
    """On a GPU's searcher (``X``, ``y``: its copy of the training rows; ``held``: the
    query blocks ``own`` it holds): every query block on this GPU searched in one call
    and voted, ``{block: predictions}``; None where the blocks could not be joined
    (:func:`joined_queries`), and then the caller asks each holder for its own."""
    joined = joined_queries(worker, dict(zip(own, held)), others, keys, wait, keep)
    if joined is None:
        return None
    pred = blocks.vote_pred(blocks.search(joined.rows, X, y, 0, k, margin, tile_bytes), *vote)
    blocks.RAN["joined"] = max(blocks.RAN.get("joined", 0), len(joined.blocks))
    edges = np.cumsum((0,) + joined.sizes)
    return {i: pred[a:b] for i, a, b in zip(joined.blocks, edges[:-1], edges[1:])}
