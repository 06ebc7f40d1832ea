"""The k nearest training rows of a query block, exact whatever the product's precision.

:func:`local_candidates` is the whole search on one worker's training block.  The
query rows go in passes whose buffers fit the device's free memory (a query block
of any size searches in bounded memory), each pass through the tile loop of
:mod:`.loop`.  Where the product's keys are exact (8-bit data) the loop's top-k is
the answer.  Elsewhere the ``k + margin`` best candidates by approximate key are
re-ranked exactly (:func:`list_length`) and each row is *certified* by the product's
error bound (:mod:`.precision`): no training row left out can reach its k nearest.  The
rows that are not go on to a more exact product -- the three-part float16 product of a
split operand (:mod:`.floats`), then float64 in tiles of training rows -- so the
neighbours are always those of an exact brute force, and how many rows needed which
tier is reported in ``stats``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..launch import all_entries_finite, array_module, finite_later, launch
from . import floats
from . import precision as precisions
from .distances import INT_MAX, MAX_K, _cuda_target, refine
from .loop import smallest, tile_loop

SPLIT_FIRST = 0.1
"""Where a search leaves more than this share of a pass's rows uncertified, the training
block's later searches start at the next tier (:data:`FIRST_TIER`): one search of every
row costs less than two of some."""
PASS_SHARE = 0.25
"""A pass's own buffers take at most this share of the device's free memory."""
PASS_ROWS = (256, 1 << 17)
"""Fewest and most query rows in one pass."""
SMALL_PASS = 1 << 28
"""A query block whose pass buffers take less than this is one pass, the device not asked."""
MARGIN = 8
"""Extra candidates re-ranked where no ``margin`` is given and lists stay short."""
LONG_FEATURES = 256
"""From this many features on, an approximate search keeps :data:`MAX_K` candidates a
row (where no ``margin`` is given): the float16 bound widens with the features, and
lists of ``k + 8`` then leave most rows to the three-part product and float64."""
NOT_FINITE = "the query rows contain NaN or infinity; clean or impute them first"
"""What a search of rows with NaN or infinity raises (``ValueError``)."""
LONG_VALUES = 1 << 26
"""From this many training values (rows times features) in the block on, lists of
:data:`MAX_K` in the plain product cost less than the three-part product of short ones
(docs/performance-history.md, "list lengths" and "lists as heaps")."""


def _pack(xp: Any, dist: Any, columns: Any, labels: Any, index: Any) -> Any:
    """Candidates as float64 ``(m, k, 3)``: distance, training index, label."""
    valid = columns != INT_MAX
    safe = xp.where(valid, columns, 0)
    out = xp.empty(columns.shape + (3,), dtype=np.float64)
    out[..., 0] = xp.where(valid, dist, np.inf)
    out[..., 1] = xp.where(valid, index[safe], -1)
    out[..., 2] = xp.where(valid, labels[safe], 0)
    return out


def free_bytes(gpu: bool) -> int:
    """Bytes this process could still allocate on its device (CuPy's pool counted free)."""
    if gpu:
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        return int(free) + int(cupy.get_default_memory_pool().free_bytes())
    import psutil

    return int(psutil.virtual_memory().available)


def _pass_budget(gpu: bool, tile_bytes: int | None) -> float:
    """Bytes one pass may take: :data:`PASS_SHARE` of the free memory, at most eight
    product tiles where ``tile_bytes`` is given (a small budget makes small passes too)."""
    budget = PASS_SHARE * free_bytes(gpu)
    return min(budget, 8 * int(tile_bytes)) if tile_bytes else budget


def pass_rows(m: int, train: Any, K: int, gpu: bool, tile_bytes: int | None) -> int:
    """Query rows per pass: a pass's operands, exact rows and lists within
    :func:`_pass_budget`."""
    item = int(train.operand.dtype.itemsize)
    per_row = item * int(train.operand.shape[1]) + 16 * train.d + 32 * K + 64
    if not tile_bytes and m * per_row <= SMALL_PASS:  # no need to ask the device
        return m
    rows = int(_pass_budget(gpu, tile_bytes) // per_row) // 16 * 16
    return max(1, min(m, max(PASS_ROWS[0], min(PASS_ROWS[1], rows))))


def _exact_tiles(Qx: Any, train: Any, kk: int, cuda: bool, tile_bytes: int | None,
                 gpu: bool) -> Any:
    """The ``kk`` best columns of each row by float64 keys, in tiles of training rows whose
    keys stay within a pass's share of memory (the last tier: never the whole matrix)."""
    xp = array_module(Qx)
    r, n = int(Qx.shape[0]), train.n
    ip = floats.inner(train.metric)
    center = train.frame.center if train.frame is not None else None
    Q64 = Qx.astype(np.float64)
    if center is not None and not ip:
        Q64 = Q64 - center
    step = max(64, int(_pass_budget(gpu, tile_bytes) // max(1, 32 * r)))
    best_keys = xp.full((r, kk), np.inf)
    best_cols = xp.full((r, kk), INT_MAX, dtype=np.int32)
    for c0 in range(0, n, step):
        T64 = train.rows[c0:c0 + step].astype(np.float64)
        if center is not None:
            T64 = T64 - center
        keys = -2.0 * (Q64 @ T64.T)
        if not ip:
            keys += (T64 * T64).sum(axis=1)[None, :]
        keys_c, cols_c = smallest(keys, min(kk, keys.shape[1]), target="cuda" if cuda else "cpu")
        both_keys = xp.concatenate([best_keys, keys_c], axis=1)
        both_cols = xp.concatenate([best_cols, xp.where(cols_c == INT_MAX, INT_MAX, cols_c + c0)],
                                   axis=1)
        order = xp.argsort(both_keys, axis=1, kind="stable")[:, :kk]  # earlier columns first
        best_keys = xp.take_along_axis(both_keys, order, axis=1)
        best_cols = xp.take_along_axis(both_cols, order, axis=1).astype(np.int32)
    return best_cols


def _certified(queries: Any, train: Any, keys: Any, cols: Any, k: int, K: int, split: bool,
               target: str | None) -> tuple[Any, Any, Any]:
    """Exact values and columns of each row's k best candidates, and the rows whose
    candidates the bound does not certify (or whose values left float16's range)."""
    xp = array_module(keys)
    kk = min(k, K)
    sq, best = refine(queries.exact, train.rows, cols, kk, target=target,
                      inner=floats.inner(train.metric))
    if K >= train.n:  # every column was a candidate
        doubtful = xp.zeros(sq.shape[0], dtype=bool)
    else:
        scale = train.frame.scale if train.frame is not None else 1.0
        kept = keys[:, K - 1] / (scale * scale)
        bound = precisions.error_bound(train.precision, train.d, queries.q_norm, train.t_max,
                                       train.method, train.eight_bit, scale=scale, split=split,
                                       q_err=queries.q_err, t_err=train.t_err)
        doubtful = ~(kept - bound > sq[:, kk - 1] - queries.norms)
    if queries.wide is not None:
        doubtful |= queries.wide
    return sq, best, doubtful


def _padded(rows: int) -> int:
    """A size for a loop over ``rows`` query rows: a power of two, so that few loops serve."""
    return max(64, 1 << int(rows - 1).bit_length())


def tiers(train: Any) -> list[bool]:
    """The approximate searches a row goes through until one certifies it, each a flag
    (the three-part product or not): the plain product, then the three-part one where
    the training block has one.  Exact keys (8-bit data) need only the first.

    How many candidates each keeps is :func:`list_length`'s (docs/performance-history.md,
    "list lengths": what they measured)."""
    split = train.rows is not None and train.frame is not None and train.frame.part is not None
    return [False, True] if split else [False]


FIRST_TIER = ("first tier",)
"""Key in a training block's ``loops`` of the tier its searches start at: where one left
more than :data:`SPLIT_FIRST` of a pass's rows uncertified, later ones start at the next."""


def _run_tier(Q: Any, train: Any, split: bool, k: int, K: int, cuda: bool,
              tile_bytes: int | None, target: str | None, home: Any) -> tuple[Any, ...]:
    """One tier over the query rows ``Q`` (all of a pass's, or the uncertified ones):
    ``(sq, best, doubtful, loop, exact)`` (``exact``: the rows the re-rank compares), on
    the loop's stream after ``home``'s work."""
    n = int(Q.shape[0])
    size = n if home is None else _padded(n)
    loop = tile_loop(train, size, K, cuda, tile_bytes, split=split)
    loop.follow()
    with loop.on_stream():
        queries = loop(Q)  # the loop's rows past n keep what they held
        keys, cols = loop.scan.keys[:n], loop.scan.cols[:n]
        if train.rows is None:  # exact keys (8-bit data)
            sq = keys[:, :k] + queries.norms[:, None]
            return sq, cols[:, :k], None, loop, queries.exact
        sq, best, doubtful = _certified(queries, train, keys, cols, k, K, split, target)
    return sq, best, doubtful, loop, queries.exact


def _pack_into(out: Any, sq: Any, best: Any, k: int, train: Any, labels: Any, index: Any,
               cuda: bool) -> None:
    """Candidates ``sq`` / ``best`` packed into ``out`` (padded with "no neighbour" where
    the block has fewer than k rows), on the current stream."""
    xp = array_module(sq)
    if sq.shape[1] < k:
        pad = k - sq.shape[1]
        sq = xp.concatenate([sq, xp.full((sq.shape[0], pad), np.inf)], axis=1)
        best = xp.concatenate([best, xp.full((sq.shape[0], pad), INT_MAX, dtype=np.int32)],
                              axis=1)
    if cuda:  # one launch
        from . import cuda_rows

        entries = int(sq.shape[0]) * int(sq.shape[1])
        launch(cuda_rows.pack_rows, max(1, -(-entries // 128)), 128, sq, best, labels, index,
               cuda_rows.METRIC_CODES[train.metric], out)
    else:
        out[...] = _pack(xp, floats.finish(xp, sq, train.metric), best, labels, index)


def _finite(check: Any) -> None:
    if not bool(check):
        raise ValueError(NOT_FINITE)


def _search_pass(Q: Any, train: Any, k: int, K: int, cuda: bool, tile_bytes: int | None,
                 target: str | None, stats: dict, out: Any, labels: Any, index: Any,
                 check: bool) -> None:
    """The k nearest of one pass's query rows, packed into ``out``: each row through the
    :func:`tiers` until one certifies it, float64 for any left.  The packing is queued
    before the host asks which rows were not certified (rarely any, once a block's
    searches start at the tier that certifies them), so that the GPU has it in hand
    while the host waits; rows that go further are packed again.  ``check``: whether
    the rows are finite is asked of the GPU once the first search is queued (its
    reductions run beside it) and read when the host has waited for the search anyway;
    rows with NaN or infinity raise ``ValueError`` before any goes further."""
    xp = array_module(train.norms)
    m = int(Q.shape[0])
    steps = tiers(train)
    first = min(train.loops.get(FIRST_TIER, 0), len(steps) - 1)
    sq, best, doubtful, home, exact = _run_tier(Q, train, steps[first], k, K, cuda, tile_bytes,
                                                target, None)
    finite = finite_later(Q) if check else True
    stats["kind"] = home.kind
    stats["graph"], stats["graph_note"] = home.graph is not None, home.graph_note
    scan = getattr(home.scan, "_launch", None)
    stats["scan"], stats["fused note"] = scan, getattr(home.fused, "note", None)
    with home.on_stream():
        _pack_into(out, sq, best, k, train, labels, index, cuda)
        if doubtful is not None:  # approximate keys: the rows not certified go further
            rows = xp.nonzero(doubtful)[0]
            _finite(finite)
            if rows.size > SPLIT_FIRST * m and first + 1 < len(steps):
                train.loops[FIRST_TIER] = first + 1
            further = bool(rows.size)
            for split in steps[first + 1:]:
                if not rows.size:
                    break
                sq_s, best_s, doubtful_s, loop, _ = _run_tier(Q[rows], train, split, k, K, cuda,
                                                              tile_bytes, target, home)
                home.follow_loop(loop)  # this stream goes on after the other's work
                sq[rows], best[rows] = sq_s, best_s
                stats["rows_split"] += int(rows.size)
                rows = rows[doubtful_s]
            if rows.size:
                found = _exact_tiles(exact[rows], train, min(k, K), cuda, tile_bytes, home.gpu)
                sq[rows], best[rows] = refine(exact[rows], train.rows, found, min(k, K),
                                              target=target, inner=floats.inner(train.metric))
                stats["rows_recomputed"] += int(rows.size)
            if further:
                _pack_into(out, sq, best, k, train, labels, index, cuda)
    if home.stream is not None:  # the caller's stream goes on after the loop's work
        import cupy

        cupy.cuda.get_current_stream().wait_event(home.stream.record())
    _finite(finite)


def list_length(k: int, margin: int | None, n_features: int, rows: int, exact: bool) -> int:
    """Candidates a query row keeps in the search of a training block of ``rows`` rows.

    Exact keys (8-bit data) need ``k``.  Approximate ones keep ``k + margin`` for a
    re-rank, and with no ``margin`` the rule measured fastest on clustered float rows:
    :data:`MAX_K` from :data:`LONG_FEATURES` features or :data:`LONG_VALUES` values on
    (the plain float16 product then certifies nearly every row), ``k +``
    :data:`MARGIN` below (the three-part product's tighter bound does it cheaper).
    Never more than the block's rows."""
    if exact:
        K = k
    elif margin is not None:
        K = k + max(0, int(margin))
    elif n_features >= LONG_FEATURES or n_features * rows >= LONG_VALUES:
        K = MAX_K
    else:
        K = k + MARGIN
    return max(1, min(MAX_K, K, rows))


def local_candidates(Q: Any, train: Any, labels: Any, index: Any, k: int, *,
                     margin: int | None = None,
                     tile_bytes: int | None = None, target: str | None = None,
                     stats: dict | None = None) -> Any:
    """The k nearest training rows of every query row, as packed candidates.

    Parameters
    ----------
    Q : array of shape (m, d)
        Query rows, in any dtype the training block accepts (uint8 pixels stay uint8).
    train : operands.TrainBlock
        This worker's training rows, prepared by ``operands.prepare_train``.
    labels : array of shape (n,)
        Their labels.
    index : array of shape (n,)
        Their global row numbers (int64), reported in the candidates.
    k : int
        Neighbours per query.
    margin : int or None, default None
        Extra candidates re-ranked exactly where keys are approximate; None picks the
        list length from the block's shape (:func:`list_length`).
    tile_bytes : int or None
        Cap on one product tile (default: eight times the GPU's L2, 8 MiB on a CPU), and
        on a pass's buffers (eight tiles).
    target : {None, "cuda", "cpu"}
        Kernel family for the scan and re-rank; None follows the array type.
    stats : dict or None
        Filled with ``rows_split`` and ``rows_recomputed`` (rows the bound did not
        certify, searched again in the three-part product and in float64: :func:`tiers`),
        and the
        search run (``search``, ``graph``, ``graph_note``, ``launch_note``).

    Returns
    -------
    array of shape (m, k, 3), float64
        ``[distance, global index, label]``, nearest first, the distance as the
        training block's metric has it (``floats.finish``); missing neighbours
        (fewer than k rows here) are ``[inf, -1, 0]``.

    Raises
    ------
    ValueError
        Query rows with NaN or infinity (:data:`NOT_FINITE`): on a CPU before the search,
        on a GPU once the host has waited for the first one (no wait before it).
    """
    xp = array_module(train.norms)
    m, n = int(Q.shape[0]), train.n
    out = xp.empty((m, k, 3), dtype=np.float64)
    ran = {"rows_split": 0, "rows_recomputed": 0}
    if stats is not None:
        stats.update(ran)
    Q = xp.asarray(Q)
    check = not np.issubdtype(Q.dtype, np.integer)
    if check and (xp is np or n == 0 or m == 0) and not all_entries_finite(Q):
        raise ValueError(NOT_FINITE)
    if n == 0 or m == 0:
        out[..., 0], out[..., 1], out[..., 2] = np.inf, -1, 0
        return out
    cuda = _cuda_target(train.norms, target)
    K = list_length(k, margin, train.d, n, train.rows is None)
    step = pass_rows(m, train, K, xp is not np, tile_bytes)
    for r0 in range(0, m, step):
        _search_pass(Q[r0:r0 + step], train, k, K, cuda, tile_bytes, target, ran,
                     out[r0:r0 + step], labels, index, check and xp is not np)
    if stats is not None:
        scan = ran.pop("scan", None)
        stats.update(rows_split=ran["rows_split"], rows_recomputed=ran["rows_recomputed"],
                     search=ran["kind"], graph=ran["graph"], graph_note=ran["graph_note"])
        stats["launch_note"] = (None if scan is None or scan.fast or xp is np
                                else f"the scan kernel is launched through Numba's own "
                                     f"launch, slower ({scan.why})")
        if ran.get("fused note"):  # the fused build that could not run
            stats["launch_note"] = ran["fused note"]
    return out
