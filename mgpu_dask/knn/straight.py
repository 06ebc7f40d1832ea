"""Host predictions of a KNN predict asked of the workers straight, with no Dask task.

Where the predictions come back to the client, the workers that hold the query
blocks are asked for them in one message each (:func:`.placement.run_straight`,
:func:`.direct.run_held`): no scheduler between, and the answers come back as an
array in hand.

- Replicate plan: each block's holder searches its own copy of the training rows.
- Shard plan on one worker (every query block and training shard there, as with
  rows made where they live): it searches each shard, merges and votes.
- Shard plan over several workers of one host: every shard's holder searches
  every query block in one call, fetching the blocks it lacks from their holders
  while it searches its own (so they cross under its search, not before it), and
  answers with its candidates in host memory; each block's holder is then asked to
  merge them in the tasks' tree order and vote.  Two messages each way instead of
  a graph of tasks.

Each path gives the task path's bits (the same block functions, :mod:`.blocks`).
:func:`predict` answers None where it cannot run (a block moved on, a worker
unreachable): the caller submits the tasks instead.
"""

from __future__ import annotations

import functools
from typing import Any

import dask.array as da
from distributed import Client

from ..config import seconds
from ..parallel import direct, placement
from . import blocks
from .layout import TrainLayout


def predict(client: Client, name: str, layout: TrainLayout, queries: list, where: list,
            opts: dict, vote: tuple, chunks: tuple, meta: Any,
            timeout: float) -> da.Array | None:
    """Host predictions of every query block (``queries``: its futures, ``where``: their
    holders) asked straight, as the module's docstring says; None where they cannot be."""
    if not all(hasattr(q, "key") for q in queries) or any(w is None for w in where):
        return None
    if layout.plan == "replicate":
        copies = {w: j for j, w in enumerate(layout.workers)}
        if not all(w in copies for w in where):
            return None
        fn = functools.partial(blocks.replicated_block, vote=vote, **opts)
        calls = [(w, fn, (direct.Held(q.key), direct.Held(layout.ref("X", copies[w])),
                          direct.Held(layout.ref("y", copies[w]))))
                 for q, w in zip(queries, where)]
        return placement.run_straight(client, name, calls, chunks, meta, timeout)
    if not layout.workers or any(w is None for w in layout.workers):
        return None
    if all(set(layout.workers) == {w} for w in where):
        fn = functools.partial(blocks.shards_block, offsets=tuple(int(o) for o in layout.offsets),
                               vote=vote, **opts)
        shards = [direct.Held(layout.ref(field, p)) for p in range(len(layout.X))
                  for field in ("X", "y")]
        calls = [(w, fn, (direct.Held(q.key), *shards)) for q, w in zip(queries, where)]
        return placement.run_straight(client, name, calls, chunks, meta, timeout)
    return _across(client, name, layout, queries, where, opts, vote, chunks, meta, timeout)


def _across(client: Client, name: str, layout: TrainLayout, queries: list, where: list,
            opts: dict, vote: tuple, chunks: tuple, meta: Any,
            timeout: float) -> da.Array | None:
    """The shard plan over several workers: each shard holder's candidates for every query
    block (one call a holder, every holder at once), then each block's merge and vote on
    its holder (one call a holder)."""
    holders = list(dict.fromkeys(layout.workers))
    calls: dict[str, list[tuple[Any, tuple]]] = {}
    for w in holders:
        mine = [p for p, held in enumerate(layout.workers) if held == w]
        local = [i for i, h in enumerate(where) if h == w]
        remote = tuple((i, h, queries[i].key) for i, h in enumerate(where) if h != w)
        fn = functools.partial(
            blocks.candidates_here, offsets=tuple(int(layout.offsets[p]) for p in mine),
            local=tuple(local), remote=remote, wait=seconds("cluster.compute-timeout"), **opts)
        args = (direct.Here(), *[direct.Held(layout.ref(field, p)) for p in mine
                                 for field in ("X", "y")],
                *[direct.Held(queries[i].key) for i in local])
        calls[w] = [(fn, args)]
    found = placement.ask_straight(client, calls, timeout)
    if found is None or any(answer[0] is None for answer in found.values()):
        return None
    by_shard = []  # by_shard[p][i]: shard p's candidates for query block i
    seen: dict[str, int] = {}
    for w in layout.workers:
        j = seen[w] = seen.get(w, -1) + 1
        by_shard.append({i: per_shard[j] for i, per_shard in found[w][0].items()})
    fn = functools.partial(blocks.merged_vote, vote=vote, gpu=layout.device == "gpu")
    votes = [(w, fn, tuple(shard[i] for shard in by_shard)) for i, w in enumerate(where)]
    return placement.run_straight(client, name, votes, chunks, meta, timeout)
