"""Host predictions of a KNN predict asked of the workers straight, with no Dask task.

Where the predictions come back to the client, the workers that hold the query
blocks are asked for them in one message each (:func:`.placement.run_straight`,
:func:`.direct.run_held`): no scheduler between, and the answers come back as an
array in hand.

- Replicate plan: each block's holder searches its own copy of the training rows;
  where several holders share one GPU, one of them searches all their blocks as one
  (:mod:`.joined`: one call, one search).
- Shard plan of one shard (workers that share one GPU have their rows joined at the
  fit, :func:`.layout.gpu_runs`): as the replicate plan's one copy, the query blocks
  of its GPU searched as one by the shard's holder.
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

from .. import config
from ..parallel import direct, kept_with_blocks, lane, placement
from ..parallel.workers import gpu_ids
from . import blocks, exchange, joined
from .layout import TrainLayout

MAIL = True
"""Shard holders hand each other their candidates, worker to worker, where they can
(:func:`_across`); off, the candidates always come to the client first."""


def predict(client: Client, name: str, layout: TrainLayout, queries: list, where: list,
            opts: dict, vote: tuple, chunks: tuple, meta: Any, timeout: float, *,
            row_bytes: int) -> da.Array | None:
    """Host predictions of every query block (``queries``: its futures, ``where``: their
    holders; ``row_bytes``: a query row's) asked straight, as the module's docstring says;
    None where they cannot be."""
    if not all(hasattr(q, "key") for q in queries) or any(w is None for w in where):
        return None
    if layout.plan == "replicate":
        calls = _calls_on_copies(layout, queries, where, opts, vote)
        if any(call is None for call in calls):
            return None
        if config.get("knn.one-search-per-gpu", True):  # workers without a GPU share none
            done = _one_search_per_gpu(client, name, layout, queries, where, calls, opts, vote,
                                       chunks, meta, timeout, row_bytes)
            if done is not None:
                return done
        return placement.run_straight(client, name, calls, chunks, meta, timeout)
    if not layout.workers or any(w is None for w in layout.workers):
        return None
    if len(layout.X) == 1 and config.get("knn.one-search-per-gpu", True):
        # one shard (the GPU's rows joined, :func:`.layout.gpu_runs`): searched like one copy
        calls = _calls_on_copies(layout, queries, where, opts, vote)
        done = _one_search_per_gpu(client, name, layout, queries, where, calls, opts, vote,
                                   chunks, meta, timeout, row_bytes)
        if done is not None:
            return done
    if all(set(layout.workers) == {w} for w in where):
        fn = functools.partial(blocks.shards_block, offsets=tuple(int(o) for o in layout.offsets),
                               vote=vote, **opts)
        shards = [direct.Held(layout.ref(field, p)) for p in range(len(layout.X))
                  for field in ("X", "y")]
        calls = [(w, fn, (direct.Held(q.key), *shards)) for q, w in zip(queries, where)]
        return placement.run_straight(client, name, calls, chunks, meta, timeout)
    return _across(client, name, layout, queries, where, opts, vote, chunks, meta, timeout,
                   row_bytes)


def _calls_on_copies(layout: TrainLayout, queries: list, where: list, opts: dict,
                     vote: tuple) -> list[tuple[str, Any, tuple] | None]:
    """Each query block's search and vote on its holder's copy of the training rows (the
    replicate plan's, or the one shard); None where its holder has no copy."""
    copies = {w: j for j, w in enumerate(layout.workers)}
    fn = functools.partial(blocks.replicated_block, vote=vote, **opts)
    return [(w, fn, (direct.Held(q.key), direct.Held(layout.ref("X", copies[w])),
                     direct.Held(layout.ref("y", copies[w])))) if w in copies else None
            for q, w in zip(queries, where)]


def searchers(where: list[str], ids: dict[str, str | None],
              copies: Any = None) -> dict[str, list[int]]:
    """The query blocks to search as one: for each GPU whose blocks are held by workers
    other than its searcher (``ids``: each worker's GPU, :func:`.workers.gpu_ids`), the
    searcher and those blocks, in order.  The searcher is the holder of the GPU's first
    block where it holds a copy of the training rows (every worker, where ``copies`` is
    None), else the first worker in ``copies`` on that GPU; a GPU with no copy has none."""
    by_gpu: dict[str, list[int]] = {}
    for i, w in enumerate(where):
        if ids.get(w) is not None:
            by_gpu.setdefault(ids[w], []).append(i)
    found_by: dict[str, list[int]] = {}
    for gpu, found in by_gpu.items():
        searcher = where[found[0]]
        if copies is not None and searcher not in copies:
            searcher = next((c for c in copies if ids.get(c) == gpu), None)
        if searcher is not None and len({where[i] for i in found} | {searcher}) > 1:
            found_by[searcher] = found
    return found_by


_UNJOINED: "dict[tuple, None]" = {}
_UNJOINED_KEPT = 64  # query key sets whose searchers could not join them, most recent last


def _one_search_per_gpu(client: Client, name: str, layout: TrainLayout, queries: list,
                        where: list, calls: list, opts: dict, vote: tuple, chunks: tuple,
                        meta: Any, timeout: float, row_bytes: int) -> da.Array | None:
    """Host predictions with the query blocks of workers that share a GPU searched as one
    on that GPU's searcher (:func:`.joined.predictions`), against its copy of the
    training rows (the replicate plan's, or the one shard), the other blocks by their
    holders as ``calls`` has them (None: a holder with no copy); None where no GPU holds
    blocks of a worker other than its searcher, the blocks are too large to join, a
    block has no call, or a searcher could not join them (those blocks are then not
    tried again: each worker searches its own)."""
    rows = chunks[0]
    copies = {w: j for j, w in enumerate(layout.workers)}
    # a one-copy layout's holder may hold no query block (the fit asked for its GPU)
    ids = gpu_ids(client, list(dict.fromkeys(where + (list(copies) if len(copies) == 1 else []))))
    groups = {s: (found, tuple(queries[i].key for i in found))  # the blocks and their keys
              for s, found in searchers(where, ids, copies).items()
              if sum(rows[i] for i in found) * row_bytes <= joined.JOIN_BYTES}
    groups = {s: group for s, group in groups.items() if group[1] not in _UNJOINED}
    grouped = {i for found, _ in groups.values() for i in found}
    if not groups or any(call is None for i, call in enumerate(calls) if i not in grouped):
        return None
    keep = kept_with_blocks.ensure_release(client)
    by_worker: dict[str, list[tuple[Any, tuple]]] = {}
    alone: list[tuple[int, str, int]] = []  # (block, its holder, its call's place there)
    for s, (found, keys) in groups.items():
        own = tuple(i for i in found if where[i] == s)
        fn = functools.partial(
            joined.predictions, own=own,
            others=tuple((i, where[i], queries[i].key) for i in found if where[i] != s),
            keys=keys, wait=timeout / 2, keep=keep and bool(own), vote=vote, **opts)
        by_worker.setdefault(s, []).append(
            (fn, (direct.Here(), direct.Held(layout.ref("X", copies[s])),
                  direct.Held(layout.ref("y", copies[s])),
                  *[direct.Held(queries[i].key) for i in own])))
    for i, call in enumerate(calls):
        if i not in grouped:
            w, fn, args = call
            by_worker.setdefault(w, []).append((fn, args))
            alone.append((i, w, len(by_worker[w]) - 1))
    answers = placement.ask_straight(client, by_worker, timeout)
    if answers is None:
        return None
    predicted: dict[int, Any] = {}
    for s, (_, keys) in groups.items():
        got = answers[s][0]
        if got is None:
            _UNJOINED[keys] = None
            while len(_UNJOINED) > _UNJOINED_KEPT:
                del _UNJOINED[next(iter(_UNJOINED))]
            return None
        predicted.update(got)
    predicted.update((i, answers[w][j]) for i, w, j in alone)
    return placement.in_hand(name, [predicted[i] for i in range(len(queries))], chunks, meta)


def _across(client: Client, name: str, layout: TrainLayout, queries: list, where: list,
            opts: dict, vote: tuple, chunks: tuple, meta: Any, timeout: float,
            row_bytes: int) -> da.Array | None:
    """The shard plan over several workers: every shard holder asked at once for its
    candidates for every query block.  Where every block's holder holds a shard, the
    holders hand each other the candidates of the blocks they lack (:class:`.exchange.Mail`)
    and answer with their own blocks' predictions: one call a holder.  Otherwise the
    candidates come here and each block's holder is asked to merge and vote."""
    holders = list(dict.fromkeys(layout.workers))
    gpu = layout.device == "gpu"
    mail = MAIL and all(w in holders for w in where)
    wait = timeout / 2  # a holder gives up on a block or a box in time to say so
    # the workers' lanes on this host: the holders fetch blocks and hand candidates over them
    lanes = tuple(lane.paths(client, list(dict.fromkeys(holders + where)), direct.SERVED).items())
    calls: dict[str, list[tuple[Any, tuple]]] = {}
    for w in holders:
        mine = tuple(p for p, held in enumerate(layout.workers) if held == w)
        local = [i for i, h in enumerate(where) if h == w]
        remote = tuple((i, h, queries[i].key, chunks[0][i], chunks[0][i] * row_bytes)
                       for i, h in enumerate(where) if h != w)
        box = exchange.Mail(name, mine, len(layout.X), tuple((i, h) for i, h, *_ in remote),
                          vote, gpu) if mail else None
        out = exchange.HandOut(name, tuple(queries[i].key for i in local), len(holders) - 1)
        fn = functools.partial(
            exchange.candidates_here, offsets=tuple(int(layout.offsets[p]) for p in mine),
            local=tuple(local), remote=remote, wait=wait, mail=box, hand_out=out, lanes=lanes,
            **opts)
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
