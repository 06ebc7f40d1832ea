"""Row blocks spread evenly over the GPUs before a sharded fit.

Dask leaves a user's blocks where their tasks ran: a persisted array of two blocks
on a cluster of two GPUs may well have both on one worker (its rechunk tasks go
where their inputs are).  A plan that searches or fits each shard where it lies
would then use one GPU of two.  :func:`balanced_runs` says, from the blocks' sizes
and holders alone, whether their rows are spread evenly enough over the GPUs and,
where not, which runs of adjacent blocks to make one shard each and where each goes:
contiguous runs of about equal rows, one per GPU, each on the GPU that already holds
most of its rows, so that the fewest rows move.  Where the blocks are too coarse for
that (fewer blocks than GPUs, or one block larger than a GPU's share),
:func:`finer_blocks` says into how many the caller rechunks first.

Workers that share one GPU count as one place (:func:`.workers.gpu_ids`); workers
without a GPU each count as one.  KNN's shard plan joins each run into one shard
(:mod:`mgpu_dask.knn.layout`); a fit that reads the blocks where they lie (the
logistic regression's) has them copied block by block (:func:`located`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

TOLERANCE = 0.25
"""A GPU holding up to this much over an even share of the rows is left as it is: moving
rows costs a transfer at the fit, and a search or fit over shards waits for the largest."""


def _units(workers: Sequence[str], ids: dict[str, str | None]) -> dict[str, str]:
    """Each worker's place: its GPU where it has one, else the worker itself."""
    return {w: ids.get(w) or w for w in workers}


def _loads(sizes: Sequence[int], where: Sequence[str], workers: Sequence[str],
          ids: dict[str, str | None]) -> dict[str, int]:
    """Rows held on each place (GPU, or worker without one) of ``workers``."""
    unit = _units(workers, ids)
    out = dict.fromkeys(dict.fromkeys(unit.values()), 0)
    for size, w in zip(sizes, where):
        u = unit.get(w, w)
        out[u] = out.get(u, 0) + int(size)
    return out


def is_balanced(sizes: Sequence[int], where: Sequence[str], workers: Sequence[str],
                ids: dict[str, str | None]) -> bool:
    """Whether no place holds more than :data:`TOLERANCE` over an even share of the rows."""
    held = _loads(sizes, where, workers, ids)
    return max(held.values(), default=0) <= (1 + TOLERANCE) * sum(sizes) / max(1, len(held))


def _cuts(sizes: Sequence[int], parts: int) -> list[range]:
    """``parts`` contiguous runs of blocks, each ending at the block edge nearest to its
    even share of the rows (none empty where there are enough blocks)."""
    edges = [0]
    for s in sizes:
        edges.append(edges[-1] + int(s))
    total, nblocks = edges[-1], len(sizes)
    bounds = [0]
    for j in range(1, parts):
        goal = total * j / parts
        b = min(range(bounds[-1] + 1, nblocks - (parts - j) + 1),
                key=lambda i: (abs(edges[i] - goal), i), default=bounds[-1] + 1)
        bounds.append(b)
    bounds.append(nblocks)
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def needs_finer_blocks(sizes: Sequence[int], places: int) -> bool:
    """Whether ``sizes`` cannot be cut into ``places`` contiguous runs within
    :data:`TOLERANCE` of an even share each (too few blocks, or blocks too large)."""
    if places <= 1:
        return False
    if len(sizes) < places:
        return True
    share = sum(sizes) / places
    return any(sum(sizes[b] for b in run) > (1 + TOLERANCE) * share
               for run in _cuts(sizes, places))


def _uneven_places(sizes: Sequence[int], where: Sequence[str], workers: Sequence[str],
                   ids: dict[str, str | None]) -> list[str]:
    """The places of ``workers`` where the rows sit unevenly over two or more of them
    (none: one place, or spread evenly enough, :func:`is_balanced`)."""
    places = list(dict.fromkeys(_units(workers, ids).values()))
    if len(places) <= 1 or is_balanced(sizes, where, workers, ids):
        return []
    return places


def finer_blocks(sizes: Sequence[int], where: Sequence[str], workers: Sequence[str],
                 ids: dict[str, str | None]) -> int | None:
    """The blocks to rechunk into (one per place) where the rows sit unevenly and the
    blocks are too coarse to even them out (:func:`needs_finer_blocks`); None otherwise."""
    places = _uneven_places(sizes, where, workers, ids)
    return len(places) if places and needs_finer_blocks(sizes, len(places)) else None


def balanced_runs(sizes: Sequence[int], where: Sequence[str], workers: Sequence[str],
                  ids: dict[str, str | None]) -> tuple[list[range], list[str]] | None:
    """Runs of adjacent blocks, one per place, and the worker each is to be joined on;
    None where the rows are spread evenly enough already (:func:`is_balanced`), there is
    one place, or the blocks are too coarse (:func:`finer_blocks`: rechunk first).

    Each run goes to the place holding most of its rows, runs with more rows in place
    choosing first; on a place of several workers, to the one of them holding most
    of the run (else the first of them in ``workers``)."""
    unit = _units(workers, ids)
    places = _uneven_places(sizes, where, workers, ids)
    if not places or needs_finer_blocks(sizes, len(places)):
        return None
    runs = _cuts(sizes, len(places))
    held = [{p: sum(int(sizes[b]) for b in run if unit.get(where[b], where[b]) == p)
             for p in places} for run in runs]
    pairs = sorted(((held[j][p], -j, -i) for j in range(len(runs))
                    for i, p in enumerate(places)), reverse=True)
    place_of: dict[int, str] = {}
    taken: set[str] = set()
    for _, j, i in pairs:
        j, p = -j, places[-i]
        if j not in place_of and p not in taken:
            place_of[j] = p
            taken.add(p)
    targets = []
    for j, run in enumerate(runs):
        mine = [w for w in workers if unit[w] == place_of[j]]
        rows = {w: sum(int(sizes[b]) for b in run if where[b] == w) for w in mine}
        targets.append(max(mine, key=lambda w: (rows[w], -mine.index(w))))
    return runs, targets


MOVED_KEPT = 8
"""Sets of blocks copied to other workers (rows spread, labels put beside their rows),
kept for the next fits of the same blocks, which then find them in place (and whatever
those fits keep with them)."""
_MOVED: "OrderedDict[tuple, list[Any]]" = OrderedDict()


def copied_to(client: Any, found: tuple[list[Any], list[str]], targets: list[str]) -> list[Any]:
    """Each block of ``found`` (futures, holders) on its worker of ``targets``: a copy made
    there, worker to worker, by one task where it lies elsewhere; kept for the next
    fits of the same blocks (the last :data:`MOVED_KEPT` sets)."""
    from distributed import wait

    from . import placement

    futures, where = found
    key = (client.id, tuple(f.key for f in futures), tuple(targets))  # futures are a client's
    kept = _MOVED.get(key)
    if kept is None or any(f.status != "finished" for f in kept):
        kept = [f if w == t else placement.submit_pinned(client, placement.send, f, worker=t)
                for f, w, t in zip(futures, where, targets)]
        wait(kept)
        _MOVED[key] = kept
        while len(_MOVED) > MOVED_KEPT:
            _MOVED.popitem(last=False)
    _MOVED.move_to_end(key)
    return kept


def located(client: Any, X: Any) -> tuple[list[Any], list[str]] | None:
    """The futures and holders of a persisted array's row blocks (None: not persisted), each
    block copied first to its run's worker where the rows sit unevenly on the GPUs of the
    hosts that hold them (:func:`balanced_runs`, :func:`copied_to`: once for the next fits
    too).  The workers are :func:`.workers.fixed_facts`' (asked once per set of workers:
    a warm fit pays no round trip)."""
    from distributed.comm import get_address_host

    from . import placement
    from .workers import fixed_facts, gpu_ids

    found = placement.locate(client, X, remembered=True)
    if found is None:
        return None
    # the hosts that hold blocks already: a fit over one host's shards maps them all in
    # one process, which blocks sent to another host would undo
    hosts = {get_address_host(w) for w in found[1]}
    workers = sorted(w for w in fixed_facts(client) if get_address_host(w) in hosts)
    if len(workers) < 2:
        return found
    runs = balanced_runs(X.chunks[0], found[1], workers, gpu_ids(client, workers))
    if runs is None:
        return found
    targets = [w for run, w in zip(*runs) for _ in run]
    return copied_to(client, found, targets), targets
