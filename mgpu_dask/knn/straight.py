"""Host predictions of a KNN predict asked of the workers straight, with no Dask task.

Where the predictions come back to the client, the workers that hold the query
blocks are asked for them in one message each (:func:`.placement.run_straight`,
:func:`.direct.run_held`): no scheduler between, and the answers come back as an
array in hand.

- Replicate plan: each block's holder searches its own copy of the training rows.
- Shard plan on one worker (every query block and training shard there, as with
  rows made where they live): it searches each shard, merges and votes.
- Shard plan over several workers: every shard's holder searches every query
  block in one call, fetching the blocks it lacks from their holders while it
  searches its own (so they cross under its search, not before it).  Where every
  block's holder holds a shard, each hands the others the candidates of their
  blocks, worker to worker, and answers with its own blocks' predictions, merged
  in the tasks' tree order and voted: one message each way.  Otherwise the
  candidates come to the client and each block's holder is asked to merge and
  vote: two.

Each path gives the task path's bits (the same block functions, :mod:`.blocks`).
:func:`predict` answers None where it cannot run (a block moved on, a worker
unreachable): the caller submits the tasks instead.
"""

from __future__ import annotations

import functools
from typing import Any

import dask.array as da
from distributed import Client

from ..parallel import direct, placement
from . import blocks
from .layout import TrainLayout

MAIL = True
"""Shard holders hand each other their candidates, worker to worker, where they can
(:func:`_across`); off, the candidates always come to the client first."""


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
    """The shard plan over several workers: every shard holder asked at once for its
    candidates for every query block.  Where every block's holder holds a shard, the
    holders hand each other the candidates of the blocks they lack (:class:`.blocks.Mail`)
    and answer with their own blocks' predictions: one call a holder.  Otherwise the
    candidates come here and each block's holder is asked to merge and vote."""
    holders = list(dict.fromkeys(layout.workers))
    gpu = layout.device == "gpu"
    mail = MAIL and all(w in holders for w in where)
    wait = timeout / 2  # a holder gives up on a block or a box in time to say so
    calls: dict[str, list[tuple[Any, tuple]]] = {}
    for w in holders:
        mine = tuple(p for p, held in enumerate(layout.workers) if held == w)
        local = [i for i, h in enumerate(where) if h == w]
        remote = tuple((i, h, queries[i].key) for i, h in enumerate(where) if h != w)
        box = blocks.Mail(name, mine, len(layout.X), tuple((i, h) for i, h, _ in remote),
                          vote, gpu) if mail else None
        fn = functools.partial(
            blocks.candidates_here, offsets=tuple(int(layout.offsets[p]) for p in mine),
            local=tuple(local), remote=remote, wait=wait, mail=box, **opts)
        args = (direct.Here(), *[direct.Held(layout.ref(field, p)) for p in mine
                                 for field in ("X", "y")],
                *[direct.Held(queries[i].key) for i in local])
        calls[w] = [(fn, args)]
    found = placement.ask_straight(client, calls, timeout)
    if found is None or any(answer[0] is None for answer in found.values()):
        return None
    if mail:
        predictions = {i: p for answer in found.values() for i, p in answer[0].items()}
        return placement.in_hand(name, [predictions[i] for i in range(len(queries))],
                                 chunks, meta)
    by_shard = []  # by_shard[p][i]: shard p's candidates for query block i
    seen: dict[str, int] = {}
    for w in layout.workers:
        j = seen[w] = seen.get(w, -1) + 1
        by_shard.append({i: per_shard[j] for i, per_shard in found[w][0].items()})
    fn = functools.partial(blocks.merged_vote, vote=vote, gpu=gpu)
    votes = [(w, fn, tuple(shard[i] for shard in by_shard)) for i, w in enumerate(where)]
    return placement.run_straight(client, name, votes, chunks, meta, timeout)
