"""Numba CUDA kernels for k-nearest neighbours.

- ``sqdist_tiled``: squared euclidean distances, 64x64 output tiles in shared
  memory, 4x4 outputs per thread.  Accumulates ``(q - t)^2`` directly, so it
  is exact for 8-bit pixel data (every partial sum is an integer below 2^24
  for the near neighbours that matter).
- ``scan_tile``: folds one product tile (still in L2) into each row's running
  top-K: one comparison per value for almost every value, and a merge (K
  rounds of block argmin) only in blocks that found something better.
  ``scan_tile_short`` (K <= SHORT_K) and ``scan_tile_long`` (K <= MAX_K) are
  the same loop with shorter and longer per-thread lists.
- ``refine_rows``: exact float64 distances for candidate columns, keep k best.
- ``merge_pairs``: merge two sorted candidate lists per query.
- ``vote_rows``: uniform or 1/d weighted vote (exact matches win), per query.

Ties are broken by the smaller training index everywhere, so results are
deterministic.  Candidate lists are packed as float64 ``(m, k, 3)`` arrays of
``[squared distance, training index, label]``.
"""

from __future__ import annotations

import math

from numba import config, cuda, float32, float64, int32

from ..blocks import block_sum
from ..jitable import inlined_device
from .lists import keep_sorted

MAX_K = 64          # longest candidate list a lane keeps (k plus refine margin)
TILE = 64           # output tile side of sqdist_tiled
BK = 16             # feature slice per shared-memory step
TILE_PAD = TILE + 1  # padded shared-memory row: fewer bank conflicts on the transposed store
INT_MAX = 2**31 - 1


@cuda.jit(cache=True)
def sqdist_tiled(Q, T, out):
    """out[i, j] = sum_f (Q[i, f] - T[j, f])^2; launch with block (16, 16)."""
    qs = cuda.shared.array((BK, TILE_PAD), float32)
    ts = cuda.shared.array((BK, TILE_PAD), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tid = ty * 16 + tx
    row0 = cuda.blockIdx.y * TILE
    col0 = cuda.blockIdx.x * TILE
    m = Q.shape[0]
    n = T.shape[0]
    d = Q.shape[1]
    c00 = c01 = c02 = c03 = float32(0.0)
    c10 = c11 = c12 = c13 = float32(0.0)
    c20 = c21 = c22 = c23 = float32(0.0)
    c30 = c31 = c32 = c33 = float32(0.0)
    for k0 in range(0, d, BK):
        for step in range(4):
            e = tid + step * 256
            r = e // BK
            kk = e % BK
            gk = k0 + kk
            qv = float32(0.0)
            tv = float32(0.0)
            if gk < d:
                if row0 + r < m:
                    qv = Q[row0 + r, gk]
                if col0 + r < n:
                    tv = T[col0 + r, gk]
            qs[kk, r] = qv
            ts[kk, r] = tv
        cuda.syncthreads()
        for kk in range(BK):
            a0 = qs[kk, ty]
            a1 = qs[kk, ty + 16]
            a2 = qs[kk, ty + 32]
            a3 = qs[kk, ty + 48]
            b0 = ts[kk, tx]
            b1 = ts[kk, tx + 16]
            b2 = ts[kk, tx + 32]
            b3 = ts[kk, tx + 48]
            t = a0 - b0; c00 += t * t
            t = a0 - b1; c01 += t * t
            t = a0 - b2; c02 += t * t
            t = a0 - b3; c03 += t * t
            t = a1 - b0; c10 += t * t
            t = a1 - b1; c11 += t * t
            t = a1 - b2; c12 += t * t
            t = a1 - b3; c13 += t * t
            t = a2 - b0; c20 += t * t
            t = a2 - b1; c21 += t * t
            t = a2 - b2; c22 += t * t
            t = a2 - b3; c23 += t * t
            t = a3 - b0; c30 += t * t
            t = a3 - b1; c31 += t * t
            t = a3 - b2; c32 += t * t
            t = a3 - b3; c33 += t * t
        cuda.syncthreads()
    _store4(out, row0 + ty, col0 + tx, m, n, c00, c01, c02, c03)
    _store4(out, row0 + ty + 16, col0 + tx, m, n, c10, c11, c12, c13)
    _store4(out, row0 + ty + 32, col0 + tx, m, n, c20, c21, c22, c23)
    _store4(out, row0 + ty + 48, col0 + tx, m, n, c30, c31, c32, c33)


@inlined_device
def _store4(out, row, col, m, n, v0, v1, v2, v3):
    if row < m:
        if col < n:
            out[row, col] = v0
        if col + 16 < n:
            out[row, col + 16] = v1
        if col + 32 < n:
            out[row, col + 32] = v2
        if col + 48 < n:
            out[row, col + 48] = v3


# Threads that share one row in scan_tile / refine_rows (a power of 2).  The CUDA
# simulator runs every thread as a Python thread, so it gets a narrow row.
ROW_THREADS = 4 if config.ENABLE_CUDASIM else 128
SHORT_K = 4          # longest running list scan_tile_short keeps (k up to 4 on 8-bit data)
SCAN_K = 16          # longest running list scan_tile keeps; scan_tile_long keeps MAX_K
LONG_THREADS = 4 if config.ENABLE_CUDASIM else 32


@inlined_device
def _block_min(value, index, sh_v, sh_i, threads):
    """Smallest (value, index) over the block's ``threads`` threads, returned to every thread."""
    tid = cuda.threadIdx.x
    sh_v[tid] = value
    sh_i[tid] = index
    cuda.syncthreads()
    stride = threads // 2
    while stride > 0:
        if tid < stride:
            ov = sh_v[tid + stride]
            oi = sh_i[tid + stride]
            if ov < sh_v[tid] or (ov == sh_v[tid] and oi < sh_i[tid]):
                sh_v[tid] = ov
                sh_i[tid] = oi
        cuda.syncthreads()
        stride //= 2
    best_v = sh_v[0]
    best_i = sh_i[0]
    cuda.syncthreads()
    return best_v, best_i


@inlined_device
def _insert(lv, li, tid, K, v, col):
    """Insert (v, col) into thread ``tid``'s ascending list (a later column loses a tie)."""
    j = K - 1
    while j > 0 and lv[tid, j - 1] > v:
        lv[tid, j] = lv[tid, j - 1]
        li[tid, j] = li[tid, j - 1]
        j -= 1
    lv[tid, j] = v
    li[tid, j] = col


@inlined_device
def _scan_body(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K,
               lv, li, sh_v, sh_i, threads):
    r = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    row = row0 + r
    valid = r < nrows
    bound = math.inf
    if valid:
        bound = keys[row, K - 1]
    for j in range(K):  # thread 0 starts from the running list, the others empty
        if tid == 0 and valid:
            lv[tid, j] = keys[row, j]
            li[tid, j] = cols[row, j]
        else:
            lv[tid, j] = math.inf
            li[tid, j] = INT_MAX
    worst = bound
    found = 0
    if valid:
        limit = min(ncols, n_valid - col0)
        base = r * ld
        c = tid
        while c + 3 * threads < limit:  # four independent loads in flight per thread
            g0 = float64(G[base + c])
            g1 = float64(G[base + c + threads])
            g2 = float64(G[base + c + 2 * threads])
            g3 = float64(G[base + c + 3 * threads])
            v0 = alpha * g0
            v1 = alpha * g1
            v2 = alpha * g2
            v3 = alpha * g3
            if use_norms != 0:
                v0 += float64(norms[col0 + c])
                v1 += float64(norms[col0 + c + threads])
                v2 += float64(norms[col0 + c + 2 * threads])
                v3 += float64(norms[col0 + c + 3 * threads])
            if min(min(v0, v1), min(v2, v3)) < worst:  # rare once the lists have filled
                if v0 < worst:
                    _insert(lv, li, tid, K, v0, col0 + c)
                    worst = min(bound, lv[tid, K - 1])
                if v1 < worst:
                    _insert(lv, li, tid, K, v1, col0 + c + threads)
                    worst = min(bound, lv[tid, K - 1])
                if v2 < worst:
                    _insert(lv, li, tid, K, v2, col0 + c + 2 * threads)
                    worst = min(bound, lv[tid, K - 1])
                if v3 < worst:
                    _insert(lv, li, tid, K, v3, col0 + c + 3 * threads)
                    worst = min(bound, lv[tid, K - 1])
                found = 1
            c += 4 * threads
        while c < limit:
            v = alpha * float64(G[base + c])
            if use_norms != 0:
                v += float64(norms[col0 + c])
            if v < worst:
                _insert(lv, li, tid, K, v, col0 + c)
                worst = min(bound, lv[tid, K - 1])
                found = 1
            c += threads
    if cuda.syncthreads_or(found) == 0:
        return
    head = 0
    for j in range(K):
        mine_v = math.inf
        mine_i = INT_MAX
        if head < K:
            mine_v = lv[tid, head]
            mine_i = li[tid, head]
        best_v, best_i = _block_min(mine_v, mine_i, sh_v, sh_i, threads)
        if tid == 0 and valid:
            keys[row, j] = best_v
            cols[row, j] = best_i
        if head < K and mine_i == best_i and best_i != INT_MAX:
            head += 1


@cuda.jit(cache=True)
def scan_tile(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K):
    """Fold one product tile into every row's running top-K, K <= SCAN_K; launch
    (nrows, ROW_THREADS).

    ``G`` holds an ``nrows x ncols`` tile (row stride ``ld``, flat) of products
    for query rows ``row0 + r`` and training columns ``col0 + c``; a column's key
    is ``alpha * G + norms[col0 + c]`` (``norms`` unused when ``use_norms`` is 0).
    ``keys``/``cols`` hold each row's K best so far, ascending, ties by the
    smaller column.  Columns at or past ``n_valid`` (padding) are skipped.  The
    tile is read once, while it is in L2, four loads in flight per thread;
    most values fail one comparison with the row's K-th key, and a block whose
    threads found nothing better returns without merging.  Each thread's list
    lives in shared memory (local arrays would cost their whole size in DRAM
    traffic at every launch).
    """
    lv = cuda.shared.array((ROW_THREADS, SCAN_K), float64)
    li = cuda.shared.array((ROW_THREADS, SCAN_K), int32)
    sh_v = cuda.shared.array(ROW_THREADS, float64)
    sh_i = cuda.shared.array(ROW_THREADS, int32)
    _scan_body(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K,
               lv, li, sh_v, sh_i, ROW_THREADS)


@cuda.jit(cache=True)
def scan_tile_short(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols,
                    K):
    """``scan_tile`` for K <= SHORT_K: launch (nrows, ROW_THREADS).  Lists a quarter as
    long take a quarter of the shared memory, so more rows are scanned at once."""
    lv = cuda.shared.array((ROW_THREADS, SHORT_K), float64)
    li = cuda.shared.array((ROW_THREADS, SHORT_K), int32)
    sh_v = cuda.shared.array(ROW_THREADS, float64)
    sh_i = cuda.shared.array(ROW_THREADS, int32)
    _scan_body(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K,
               lv, li, sh_v, sh_i, ROW_THREADS)


@cuda.jit(cache=True)
def scan_tile_long(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols,
                   K):
    """``scan_tile`` for K up to MAX_K: launch (nrows, LONG_THREADS)."""
    lv = cuda.shared.array((LONG_THREADS, MAX_K), float64)
    li = cuda.shared.array((LONG_THREADS, MAX_K), int32)
    sh_v = cuda.shared.array(LONG_THREADS, float64)
    sh_i = cuda.shared.array(LONG_THREADS, int32)
    _scan_body(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K,
               lv, li, sh_v, sh_i, LONG_THREADS)


@cuda.jit(cache=True)
def refine_rows(Q, T, cand, k, inner, out_sq, out_idx):
    """Exact float64 squared distances (``inner``: ``-2 q.t``) of each row's candidates; keep
    the k best.  One block of ROW_THREADS threads per row; thread 0 keeps the sorted list."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    sh = cuda.shared.array(ROW_THREADS, float64)
    best = cuda.shared.array(MAX_K, float64)     # thread 0's list; shared, not local: a local
    best_i = cuda.shared.array(MAX_K, int32)     # array costs its whole size per thread
    for j in range(k):
        best[j] = math.inf
        best_i[j] = INT_MAX
    valid_row = row < Q.shape[0]
    for j in range(cand.shape[1]):
        t = INT_MAX
        if valid_row:
            t = cand[row, j]
        ok = t >= 0 and t < T.shape[0]
        acc = 0.0
        if ok:
            for f in range(tid, Q.shape[1], ROW_THREADS):
                q, v = float64(Q[row, f]), float64(T[t, f])
                acc += -2.0 * q * v if inner != 0 else (q - v) * (q - v)
        acc = block_sum(acc, sh)
        if tid == 0 and ok:
            keep_sorted(best, best_i, k, acc, t)
    if tid == 0 and valid_row:
        for j in range(k):
            out_sq[row, j] = best[j]
            out_idx[row, j] = best_i[j]


@cuda.jit(cache=True)
def merge_pairs(a, b, out):
    """Merge two sorted packed candidate lists per row into the k best."""
    row = cuda.grid(1)
    if row >= a.shape[0]:
        return
    k = out.shape[1]
    i = 0
    j = 0
    for r in range(k):
        take_a = j >= b.shape[1] or (i < a.shape[1] and (
            a[row, i, 0] < b[row, j, 0] or (a[row, i, 0] == b[row, j, 0] and a[row, i, 1] <= b[row, j, 1])))
        if take_a:
            out[row, r, 0] = a[row, i, 0]
            out[row, r, 1] = a[row, i, 1]
            out[row, r, 2] = a[row, i, 2]
            i += 1
        else:
            out[row, r, 0] = b[row, j, 0]
            out[row, r, 1] = b[row, j, 1]
            out[row, r, 2] = b[row, j, 2]
            j += 1


@inlined_device
def _weight(cand, row, j, uniform, exact):
    if cand[row, j, 1] < 0 or cand[row, j, 0] == math.inf:
        return 0.0
    if uniform:
        return 1.0
    if exact:
        return 1.0 if cand[row, j, 0] == 0.0 else 0.0
    return 1.0 / cand[row, j, 0]


@cuda.jit(cache=True)
def vote_rows(cand, n_classes, uniform, out_proba, out_pred):
    """Class probabilities and prediction per row (ties: the smaller class).

    A class's score is summed over the row's k candidates directly (k is
    small), so no per-class array is needed: a local array of every class
    would cost its whole size in memory traffic per thread.
    """
    row = cuda.grid(1)
    if row >= cand.shape[0]:
        return
    k = cand.shape[1]
    exact = False
    if not uniform:
        for j in range(k):
            if cand[row, j, 0] == 0.0:
                exact = True
    total = 0.0
    zero = 0.0  # the score of class 0, which wins when every score is 0
    for j in range(k):
        w = _weight(cand, row, j, uniform, exact)
        total += w
        if int32(cand[row, j, 2]) == 0:
            zero += w
    for c in range(n_classes):
        out_proba[row, c] = 0.0
    best = 0
    best_score = zero
    for j in range(k):
        label = int32(cand[row, j, 2])
        score = 0.0
        for i in range(k):
            if int32(cand[row, i, 2]) == label:
                score += _weight(cand, row, i, uniform, exact)
        out_proba[row, label] = score / total if total > 0 else 0.0
        if score > best_score or (score == best_score and label < best):
            best = label
            best_score = score
    out_pred[row] = best
