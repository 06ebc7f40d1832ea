"""Numba CUDA kernels that end an L-BFGS iteration on the device: the objective at the
trial point and whether to keep it (float64; the state of :mod:`.cuda`).

Two launches, so that only scalar work runs in one block and every sweep
over the ``d * k + k`` entries runs over many:

* :func:`assemble` (many blocks): the gradient at the trial point from the
  shards' partial sums (mean cross-entropy plus the L2 penalty on the
  coefficients, the intercept unpenalised) into ``gt``, and each block's
  parts of the sums the decision needs (``fparts``: the penalty's squared
  norm, the slope, ``gt . gt``, the largest ``|gt|``, and the new curvature
  pair's ``s . y`` and ``y . y``).  The grid's last block then decides
  (:func:`_decide`): it adds those parts in a fixed order and, by
  ``mode``, keeps the point as the start point (INIT), keeps it when both
  strong-Wolfe conditions hold (AUTO), only reports value and slope (PROBE),
  or keeps the last probed point (COMMIT); it writes the scalars and, in
  ``scal[APPLY]``, what :func:`apply` is to do.
* :func:`apply` (many blocks): ``g = gt``, and for a step kept ``x += s``
  and, where the pair is stored, its ``s`` and ``y`` into ring slot
  ``scal[SLOT]``.

In one block the three sweeps were each a chain of dependent loads per
thread; spread over many blocks they wait on memory side by side
(``docs/performance-history.md``).
"""

from __future__ import annotations

import math

from numba import cuda, float64, int32

from ..blocks import LANES, last_block, row_reduce
from ..jitable import inlined_device
from .cuda import (ACCEPTED, ACTIVE, APPLY, AUTO, COMMIT, COUNT_END, DECREASE, DECREASE_1,
                   DECREASE_2, DONE, F, F_PREV, FTOL, GMAX, GTOL, HEAD, INIT, N_SCALARS,
                   NOT_DESCENT, PAIRS, ROUNDING, SEARCH, SLOPE, SLOPE0, SLOT, STATUS, STEP,
                   STORED, SWEEP, VALUE)
from .rules import acceptable, moved_entry, pseudo_entry, sufficient_decrease

# Rows of ``fparts`` (one column per block of assemble).
W2, GTP, GG, TOP, SY, YY, L1 = range(7)
N_PARTS = 7
PARTS_LANES = 56  # N_PARTS * blocks.LANES (literal: a shared array's shape)
assert PARTS_LANES == N_PARTS * LANES
# Values of ``scal[APPLY]``.
NOTHING, GRADIENT, STEP_KEPT, PAIR_STORED = 0, 1, 2, 3


@inlined_device
def _block_parts(sh, fparts, c):
    """``fparts[:, c]``: each of the N_PARTS rows of ``sh`` (one slot per thread) summed
    over the block, TOP's row its largest entry, in one tree for all six (the same
    tree, so the same bits, as one block-wide reduction each)."""
    tid = cuda.threadIdx.x
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if tid < stride:
            for r in range(N_PARTS):
                if r == TOP:
                    sh[r, tid] = max(sh[r, tid], sh[r, tid + stride])
                else:
                    sh[r, tid] = sh[r, tid] + sh[r, tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid < N_PARTS:
        fparts[tid, c] = sh[tid, 0]


@cuda.jit(cache=True)
def assemble(parts, psums, x, p, g, gt, rho, scal, fparts, count, inv_n, penalty, mode, pg,
             l1):
    """``gt`` at the trial point ``x + step p`` (COMMIT: ``gt`` as the last probe left it),
    this block's parts of the decision's sums in ``fparts[:, block]``, and, in the grid's
    last block (``count[COUNT_END]``, see :func:`~mgpu_dask.kernels.blocks.last_block`), the
    decision (:func:`_decide`).

    With an L1 part (``l1 > 0``, OWL-QN; ``pg``: the pseudo-gradient at ``x``): the trial
    point is projected on the orthant of ``x`` (as :func:`.cuda.trial` made it), the
    objective has ``l1 |coef|_1``, the slope is ``pg``'s product with the step taken, and
    the gradient's norm and largest entry are the pseudo-gradient's at the trial point.

    ``parts[s]``: shard ``s``'s coefficient gradient (rows x classes, flat,
    float32, unscaled); ``psums[s]``: its intercept gradient and, last, its
    summed cross-entropy.
    """
    active = scal[ACTIVE]  # the scalars loaded together, before the test
    step = scal[STEP]
    if mode == AUTO and active == 0.0:  # queued behind a step not kept, or a stop
        if cuda.grid(1) == 0:  # (the whole grid returns: no block counts itself)
            scal[APPLY] = NOTHING
        return
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    c = cuda.blockIdx.x
    chunks = cuda.gridDim.x
    m = x.shape[0]
    dk = parts.shape[1]
    n_parts = parts.shape[0]
    sh = cuda.shared.array((N_PARTS, SWEEP), float64)
    w2 = float64(0.0)
    gtp = float64(0.0)
    gg = float64(0.0)
    top = float64(0.0)
    sy = float64(0.0)
    yy = float64(0.0)
    a1 = float64(0.0)
    for j in range(c * nt + tid, m, chunks * nt):
        pj = p[j]
        xj = x[j]
        lj = l1 if j < dk else 0.0
        xt = moved_entry(xj, pj, pg[j], step, lj)
        if mode == COMMIT:
            v = gt[j]
        else:
            total = float64(0.0)
            if j < dk:
                for s in range(n_parts):
                    total += float64(parts[s, j])
                v = total * inv_n + penalty * xt
                w2 += xt * xt
                a1 += abs(xt)
            else:
                for s in range(n_parts):
                    total += psums[s, j - dk]
                v = total * inv_n
            gt[j] = v
        if l1 > 0.0:
            q = pseudo_entry(xt, v, lj)
            s_j = xt - xj
            gtp += pg[j] * s_j
        else:
            q = v
            s_j = step * pj
            gtp += v * pj
        gg += q * q
        top = max(top, abs(q))
        y_j = v - g[j]
        sy += s_j * y_j
        yy += y_j * y_j
    sh[L1, tid] = a1
    sh[W2, tid] = w2
    sh[GTP, tid] = gtp
    sh[GG, tid] = gg
    sh[TOP, tid] = top
    sh[SY, tid] = sy
    sh[YY, tid] = yy
    _block_parts(sh, fparts, c)
    if last_block(count, COUNT_END, chunks):
        _decide(psums, rho, scal, fparts, inv_n, penalty, mode, l1)


@inlined_device
def _sum_or_top(r, a, b):
    return max(a, b) if r == TOP else a + b


# ``out[r]``: row ``r`` of ``fparts`` over the blocks, TOP's its largest entry and the
# others' sums, in one pass (in the order of ``row_sums`` and ``row_maxes``, so their bits)
_totals = row_reduce(_sum_or_top)


@inlined_device
def _decide(psums, rho, scal, fparts, inv_n, penalty, mode, l1):
    """The objective and slope at the trial point from ``assemble``'s parts, and what
    ``mode`` makes of them (one block, every block's parts written; ``apply`` carries it
    out over the vectors).  The scalars and the shards' losses are read into shared
    memory side by side with the parts, not one after another by the deciding thread."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    k = psums.shape[1] - 1
    sc = cuda.shared.array(N_SCALARS, float64)
    summed = cuda.shared.array(1, float64)
    for i in range(tid, N_SCALARS, nt):
        sc[i] = scal[i]
    if tid == nt - 1:  # the shards' summed losses, in shard order
        loss = float64(0.0)
        for s in range(psums.shape[0]):
            loss += psums[s, k]
        summed[0] = loss
    scratch = cuda.shared.array(PARTS_LANES, float64)
    sums = cuda.shared.array(N_PARTS, float64)
    _totals(fparts, N_PARTS, scratch, sums)  # in a fixed order: the same bits every time
    if tid != 0:
        return
    memory = rho.shape[0]
    f = sc[F]
    step = sc[STEP]
    slope0 = sc[SLOPE0]
    pairs = int32(sc[PAIRS])
    head = int32(sc[HEAD])
    value = sc[VALUE]
    slope = sc[SLOPE]
    if mode != COMMIT:
        value = summed[0] * inv_n + 0.5 * penalty * sums[W2] + l1 * sums[L1]
        slope = sums[GTP]
    descent = slope0 < 0
    if l1 > 0.0:
        fits = sufficient_decrease(value, slope, f)
    else:
        fits = acceptable(value, slope, step, f, slope0, sc[ROUNDING])
    keep = mode == INIT or mode == COMMIT or (mode == AUTO and descent and fits)
    status = ACCEPTED if keep else (NOT_DESCENT if mode == AUTO and not descent else SEARCH)
    todo = NOTHING
    if keep and mode == INIT:
        scal[F] = value
        scal[F_PREV] = value + math.sqrt(sums[GG]) / 2  # first trial step of about unit length
        scal[GMAX] = sums[TOP]
        scal[DECREASE] = math.inf
        todo = GRADIENT
    elif keep:
        todo = STEP_KEPT
        sy = sums[SY]
        if sy > 1e-10 * sums[YY]:
            todo = PAIR_STORED
            scal[STORED] = 1.0  # the next cuda.products brings SY and YY up to date
            scal[SLOT] = head
            rho[head] = 1.0 / sy
            scal[HEAD] = (head + 1) % memory
            scal[PAIRS] = min(pairs + 1, memory)
        top = sums[TOP]
        decrease = (f - value) / max(abs(f), abs(value), 1.0)
        if l1 > 0.0:  # the best of the last rules.STALLED steps
            last = decrease
            decrease = max(decrease, max(sc[DECREASE_1], sc[DECREASE_2]))
            scal[DECREASE_2] = sc[DECREASE_1]
            scal[DECREASE_1] = last
        scal[F_PREV] = f
        scal[F] = value
        scal[GMAX] = top
        scal[DECREASE] = decrease
        if mode == AUTO:
            scal[DONE] = sc[DONE] + 1.0
            scal[ACTIVE] = 1.0 if top > sc[GTOL] and decrease > sc[FTOL] else 0.0
    if mode == AUTO and not keep:
        scal[ACTIVE] = 0.0
    scal[VALUE] = value
    scal[SLOPE] = slope
    scal[STATUS] = status
    scal[APPLY] = todo


@cuda.jit(cache=True)
def apply(x, p, g, gt, S, Y, scal, pg, l1, dk):
    """What ``assemble``'s last block decided, over the vectors (any grid): ``g = gt``;
    for a step kept ``x += step p``; for a stored pair ``S[slot] = step p``,
    ``Y[slot] = gt - g``; ``pg``: the pseudo-gradient at the new ``x`` (``g`` itself
    without an L1 part).  With one (``l1 > 0``) the step is the one to the projected
    point, which ``x`` becomes."""
    todo = scal[APPLY]  # the scalars loaded together, before the test
    step = scal[STEP]
    slot = int32(scal[SLOT])
    if todo == NOTHING:
        return
    for j in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        lj = l1 if j < dk else 0.0
        if todo >= STEP_KEPT:
            if l1 > 0.0:
                xt = moved_entry(x[j], p[j], pg[j], step, lj)
                s_j = xt - x[j]
            else:
                s_j = step * p[j]
            if todo == PAIR_STORED:
                S[slot, j] = s_j
                Y[slot, j] = gt[j] - g[j]
            if l1 > 0.0:
                x[j] = xt
            else:
                x[j] += s_j
        g[j] = gt[j]
        pg[j] = pseudo_entry(x[j], gt[j], lj)

