"""Numba CUDA kernels of the float32 evaluation in one pass over the rows, for rows of
few features and few classes (at most :data:`MAX_FEATURES` and :data:`MAX_CLASSES`).

The evaluation by products (:mod:`.cuda`) reads the rows twice, through two cuBLAS
products whose few columns the library pads, and writes and reads the logits and the
residuals (``n x k`` each) in between.  :func:`xent_grad_tiles` reads each tile of
:data:`TILE` rows once: the tile goes to shared memory (coalesced loads); the logits of
its rows are summed from it and the coefficients (in shared memory for the block's
whole run), four rows and four classes a thread, each quarter of the features by a
quarter of the block; the softmax, cross-entropy and residuals follow, each row's
log-sum-exp taken by one thread; then the coefficient gradient of the tile, six features
and eight classes a thread, each eighth of the rows by a warp, into registers (eight
or more multiply-adds a shared-memory load; half as many loads as two rows and four
classes a forward thread, three features a gradient one, and 3% faster:
docs/performance-history.md).  A block keeps its gradient, intercept
sums and cross-entropy for every tile it walks and writes them once as its parts;
:func:`sum_block_parts` adds the blocks' parts in block order (float64), so repeated
evaluations give the same bits.  No ``n x k`` buffer is made.

Each thread's running sums are registers (local arrays indexed by unrolled loops) and
every shared-memory offset an unsigned sum (no index wraparound): the inner loops are
loads and fused multiply-adds.  The arithmetic is :func:`.cuda.softmax_xent_rows`'s:
float32 logits (products summed in float32, as a float32 product's), float32
exponentials of differences rounded once to float32, float64 exp-sums, log-sum-exp,
cross-entropies and intercept sums.  No warp shuffles: it also runs in the CUDA
simulator.  Shards of fewer than :data:`ONE_PASS_FROM` rows keep the products, which
are as fast there (docs/performance-history.md).
"""

from __future__ import annotations

import math

from numba import cuda, float32, float64, int32, uint64

from ..jitable import bounded_kernel

TILE = 64
"""Rows a tile."""
THREADS = 256
"""Threads a block."""
MAX_FEATURES = 96
"""Features a row at most: a tile of rows is ``TILE x (MAX_FEATURES + 1)`` float32 in
shared memory, the coefficients ``MAX_FEATURES x MAX_CLASSES``."""
MAX_CLASSES = 16
"""Classes at most (a forward thread sums four of them, a gradient thread eight)."""
BLOCKS_PER_SM = 2
"""Blocks resident per SM and launched per SM (each thread holds 48 gradient sums and 16
logits)."""
ONE_PASS_FROM = 1 << 19
"""Rows of a shard from which its float32 evaluation runs in one pass."""
LD = MAX_FEATURES + 1   # a tile row's stride: odd, so a warp's rows fall on distinct banks
KP = MAX_CLASSES + 1    # a row's logits and residuals: odd stride too
TILE_VALUES = TILE * LD  # shared arrays' sizes: constants, as Numba takes them
COEF_VALUES = MAX_FEATURES * MAX_CLASSES
LOGIT_VALUES = TILE * KP
QUARTERS = 4            # forward: feature quarters, a quarter of the block each
QUARTER = THREADS // QUARTERS
ROWS_A_THREAD = 4       # forward: rows p, p + 16, p + 32, p + 48
ROW_STEP = TILE // ROWS_A_THREAD
PARTS = THREADS // 32   # gradient: row eighths, a warp each
FEATURES_A_THREAD = 6   # gradient: features f, f + 16, ..., f + 80
FEATURE_STEP = MAX_FEATURES // FEATURES_A_THREAD
GROUP = 8               # gradient: classes 8g .. 8g + 7
SUMS = FEATURES_A_THREAD * GROUP
LOGITS = 4 * ROWS_A_THREAD


def usable(n_rows: int, n_features: int, n_classes: int) -> bool:
    """Whether a shard of ``n_rows`` rows of ``n_features`` and ``n_classes`` classes
    evaluates in one pass."""
    return n_rows >= ONE_PASS_FROM and fits(n_features, n_classes)


def fits(n_features: int, n_classes: int) -> bool:
    """Whether rows of ``n_features`` and ``n_classes`` classes fit the kernel's tiles."""
    return 1 <= n_features <= MAX_FEATURES and 2 <= n_classes <= MAX_CLASSES


def layout(n_rows: int, sms: int) -> int:
    """Blocks of :func:`xent_grad_tiles` over ``n_rows`` rows on a GPU of ``sms`` SMs:
    one a tile, at most :data:`BLOCKS_PER_SM` a multiprocessor."""
    return max(1, min(-(-n_rows // TILE), BLOCKS_PER_SM * sms))


@bounded_kernel(THREADS, BLOCKS_PER_SM)
def xent_grad_tiles(X, d, labels, params, k, weights, weighted, grad_parts, sum_parts):
    """Block ``b`` walks the tiles ``b, b + grid, ...`` of :data:`TILE` rows of ``X`` (a
    flat view of ``n x d`` row-major float32 rows; ``n`` is ``labels.size``) at the
    parameters ``params`` (float32 ``[coef (d x k, row-major), intercept]``) and writes
    ``grad_parts[b * d * k + j * k + c]``: the float32 sum over its rows of
    ``X[row, j] * resid[row, c]``, and ``sum_parts[b * (k + 1) + c]``: its rows'
    residual sums per class and, at ``c = k``, their summed cross-entropy (float64).
    With ``weighted`` each row's residual and cross-entropy are times ``weights[row]``."""
    tid = cuda.threadIdx.x
    n = labels.shape[0]
    xs = cuda.shared.array(TILE_VALUES, float32)
    ws = cuda.shared.array(COEF_VALUES, float32)
    zs = cuda.shared.array(LOGIT_VALUES, float32)  # a tile's logits, then its residuals
    bs = cuda.shared.array(MAX_CLASSES, float32)
    ys = cuda.shared.array(TILE, int32)
    vs = cuda.shared.array(TILE, float32)
    ls = cuda.shared.array(TILE, float64)  # each row's log-sum-exp
    red = cuda.shared.array(THREADS, float64)
    ld = uint64(LD)
    kp = uint64(KP)
    mc = uint64(MAX_CLASSES)
    dk = d * k
    for e in range(tid, TILE_VALUES, THREADS):  # columns past d stay zero (no tile writes)
        xs[e] = float32(0.0)
    for e in range(tid, COEF_VALUES, THREADS):
        j = e // MAX_CLASSES
        c = e % MAX_CLASSES
        ws[e] = params[j * k + c] if j < d and c < k else float32(0.0)
    if tid < MAX_CLASSES:
        bs[tid] = params[dk + tid] if tid < k else float32(0.0)
    # Forward: features of quarter h, rows p + 16i of the tile, classes 4q .. 4q + 3
    # (a warp's 32 threads: sixteen rows, two sets of classes).
    h = tid // QUARTER
    p = tid % ROW_STEP
    q = (tid % QUARTER) // ROW_STEP
    dq = (d + QUARTERS - 1) // QUARTERS
    j0 = min(d, h * dq)
    j1 = min(d, j0 + dq)
    live = q * 4 < k
    # Softmax and residuals: row r of the tile, classes 4s .. 4s + 3.
    r = tid % TILE
    s = tid // TILE
    # Gradient: features f + 16i, classes 8g .. 8g + 7, rows [8 part, 8 part + 8).
    warp = tid // 32
    part = warp
    f = tid % FEATURE_STEP
    g = (tid % 32) // FEATURE_STEP
    acc = cuda.local.array(SUMS, float32)
    for i in range(SUMS):
        acc[i] = float32(0.0)
    bsum = cuda.local.array(4, float64)
    for i in range(4):
        bsum[i] = 0.0
    z = cuda.local.array(LOGITS, float32)  # forward: row i, class c at 4i + c
    xv = cuda.local.array(FEATURES_A_THREAD, float32)
    zv = cuda.local.array(GROUP, float32)
    loss = float64(0.0)
    width = uint64(d)
    lane = tid % 32
    for tile in range(cuda.blockIdx.x, (n + TILE - 1) // TILE, cuda.gridDim.x):
        row0 = tile * TILE
        rows = min(TILE, n - row0)
        cuda.syncthreads()  # the last tile's rows and residuals are read by every thread
        for rr in range(warp, rows, THREADS // 32):  # a warp a row at a time: coalesced
            at = uint64(row0 + rr) * width
            to = uint64(rr) * ld
            for i in range(MAX_FEATURES // 32):
                jj = lane + 32 * i
                if jj < d:
                    xs[to + uint64(jj)] = X[at + uint64(jj)]
        if tid < rows:
            ys[tid] = labels[row0 + tid]
            vs[tid] = weights[row0 + tid] if weighted != 0 else float32(1.0)
        cuda.syncthreads()
        qb = uint64(q * 4)
        for i in range(ROWS_A_THREAD):
            for c in range(4):
                z[4 * i + c] = bs[qb + uint64(c)] if h == 0 else float32(0.0)
        if live:
            xa = uint64(p) * ld + uint64(j0)
            wa = uint64(j0) * mc + qb
            for _ in range(j1 - j0):
                for i in range(ROWS_A_THREAD):
                    xv[i] = xs[xa + uint64(i * ROW_STEP * LD)]
                for c in range(4):
                    w = ws[wa + uint64(c)]
                    for i in range(ROWS_A_THREAD):
                        z[4 * i + c] += xv[i] * w
                xa += uint64(1)
                wa += mc
        za = uint64(p) * kp + qb
        for step in range(QUARTERS):  # the quarters' sums added in one order
            if h == step:
                for i in range(ROWS_A_THREAD):
                    for c in range(4):
                        at = za + uint64(i * ROW_STEP * KP + c)
                        zs[at] = z[4 * i + c] if step == 0 else zs[at] + z[4 * i + c]
            cuda.syncthreads()
        at = uint64(r) * kp
        first = s * 4
        for c in range(4):
            zv[c] = zs[at + uint64(first + c)]
        if s == 0 and r < rows:  # one thread a row: its largest logit and exp-sum
            top = zs[at]
            for c in range(1, k):
                top = max(top, zs[at + uint64(c)])
            total = float64(0.0)
            for c in range(k):
                total += float64(math.exp(zs[at + uint64(c)] - top))
            lse = float64(top) + math.log(total)
            ls[r] = lse
            loss += float64(vs[r]) * (lse - float64(zs[at + uint64(ys[r])]))
        cuda.syncthreads()  # the logits are read: the residuals take their place
        if r < rows:
            lse = ls[r]
            wr = float64(vs[r])
            y = ys[r]
        for c in range(4):
            e = 0.0
            if r < rows and first + c < k:
                e = wr * (float64(math.exp(float32(float64(zv[c]) - lse)))
                          - (1.0 if first + c == y else 0.0))
                bsum[c] += e
            zs[at + uint64(first + c)] = float32(e)
        cuda.syncthreads()
        lo = part * (TILE // PARTS)
        xa = uint64(lo) * ld + uint64(f)
        za = uint64(lo) * kp + uint64(g * GROUP)
        for _ in range(min(rows, lo + TILE // PARTS) - lo):  # rows [lo, lo + 8)
            for i in range(FEATURES_A_THREAD):
                xv[i] = xs[xa + uint64(i * FEATURE_STEP)]
            for c in range(GROUP):
                zv[c] = zs[za + uint64(c)]
            for i in range(FEATURES_A_THREAD):
                for c in range(GROUP):
                    acc[GROUP * i + c] += xv[i] * zv[c]
            xa += ld
            za += kp
    b = cuda.blockIdx.x
    # The row eighths' sums, added in one order through the rows' buffer.
    t = uint64(lane) * uint64(SUMS)
    for step in range(1, PARTS):
        cuda.syncthreads()
        if part == step:
            for i in range(SUMS):
                xs[t + uint64(i)] = acc[i]
        cuda.syncthreads()
        if part == 0:
            for i in range(SUMS):
                acc[i] += xs[t + uint64(i)]
    if part == 0:
        at = uint64(b) * uint64(dk)
        for i in range(FEATURES_A_THREAD):
            fi = f + FEATURE_STEP * i
            for c in range(GROUP):
                cc = g * GROUP + c
                if fi < d and cc < k:
                    grad_parts[at + uint64(fi * k + cc)] = acc[GROUP * i + c]
    out = b * (k + 1)
    for c in range(4):  # the intercept sums: each class's rows, in row order
        cuda.syncthreads()
        red[tid] = bsum[c]
        cuda.syncthreads()
        if r == 0 and s * 4 + c < k:
            total = float64(0.0)
            for i in range(TILE):
                total += red[s * TILE + i]
            sum_parts[out + s * 4 + c] = total
    cuda.syncthreads()
    red[tid] = loss
    cuda.syncthreads()
    if tid == 0:
        total = float64(0.0)
        for i in range(THREADS):
            total += red[i]
        sum_parts[out + k] = total


@cuda.jit(cache=True)
def sum_block_parts(grad_parts, sum_parts, blocks, dk, k, grad, sums):
    """``grad[i]`` (float32) the sum over the ``blocks`` blocks of ``grad_parts`` entry
    ``i < dk``; ``sums[e]`` (float64) of ``sum_parts`` entry ``e <= k``: each in block
    order, in float64.  One thread an output."""
    i = cuda.grid(1)
    if i < dk:
        total = float64(0.0)
        for b in range(blocks):
            total += float64(grad_parts[b * dk + i])
        grad[i] = float32(total)
    elif i < dk + k + 1:
        e = i - dk
        total = float64(0.0)
        for b in range(blocks):
            total += sum_parts[b * (k + 1) + e]
        sums[e] = total
